"""The report's verdict banner: every run verdict has its own colour, a SUSPECT run's included."""

from importlib.resources import files

import pytest

from soak.report.render import environment
from soak.report.sections import header
from support.records import run_summary, stored_run

RUN = stored_run(id="20261204T150000Z-ab12", started_at="2026-12-04T15:00:00+00:00",
                 ended_at="2026-12-04T15:10:00+00:00")


@pytest.mark.parametrize("verdict", ["PASS", "FAIL", "SUSPECT", "INCONCLUSIVE", "INVALID"])
def test_each_run_verdict_has_a_banner_style(verdict):
    reason = "leak.rss SUSPECT: rises 20 MiB/h — next: run ≥ 4h00m of judged load"
    summary = run_summary(verdict=verdict, verdict_reason=reason)
    html = environment().get_template("_header.j2").render(header=header(RUN, summary, 600.0), outcomes={"banner": []})
    assert f'<header class="banner v-{verdict.lower()}"' in html
    assert f'<div class="verdict-word">{verdict}</div>' in html and "next: run ≥ 4h00m" in html
    css = files("soak._templates").joinpath("report.css").read_text(encoding="utf-8")
    assert f".banner.v-{verdict.lower()} {{" in css and f".v-{verdict.lower()} .verdict-word {{" in css
