"""Fixtures of the report tests: the realistic run of `report_run`, built and rendered once per session."""

from __future__ import annotations

from typing import Any

import pytest
from report_run import RUN_ID, baseline_dict, build_run, summary_dict

from soak.contracts import parse_summary
from soak.report import render_report


@pytest.fixture(scope="session")
def built_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The realistic run, built once per session."""
    return build_run(tmp_path_factory.mktemp("report-db") / "soak.db")


@pytest.fixture(scope="session")
def rendered(built_run: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The realistic run's report (with a baseline), rendered once per session: path, HTML and inputs."""
    summary = summary_dict()
    out = tmp_path_factory.mktemp("report-out") / RUN_ID / "report.html"
    path = render_report(built_run["store"], RUN_ID, parse_summary(summary), out, baseline=baseline_dict())
    return {**built_run, "path": path, "html": path.read_text(encoding="utf-8"), "summary": summary}
