"""Leak forensics on the reference server: a planted per-request leak found SUSPECT or FAIL before the run's end
window opens a memray window there, which names the fault's own allocation line in the report, summary.json and
the leak.rss finding, and is left out of the checks; `soak forensics RUN` opens one on a running run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import query, wait_for_server_samples

# One xdist group: the module fixture's run is made once, not once per worker that takes one of its tests.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("forensics")]

REPO = Path(__file__).resolve().parents[2]
LEAKY = ["--warmup", "20s", "--window", "5s", "--sample-every", "1s", "--rate", "4", "--scenario", "chat_short",
         "--no-idle-probes", "--time-scale", "60", "--reference-fault", "rss-leak=256KiB"]
FAULT_FILE = "soak/refserver/injector.py"  # where the reference server keeps what rss-leak leaks


@pytest.fixture(scope="module")
def auto_run(tmp_path_factory, soak_cli) -> tuple[dict, Path]:
    # 240 s: the end look at 160 s judges 26 windows; the 30 s window runs from 205 s to 235 s
    out = tmp_path_factory.mktemp("forensics")
    result = soak_cli("start", "--duration", "240s", *LEAKY, "--forensics-for", "30s", "--json", "--out", str(out),
                      timeout_s=540)
    assert result.returncode == 1, result.stderr[-3000:]
    return json.loads(result.stdout), out


def test_the_planted_leak_is_attributed_to_the_faults_own_allocation_line(auto_run):
    summary, _ = auto_run
    (record,) = summary["forensics"]
    assert record["method"] == "memray" and record["named"], record
    top = record["stacks"][0]
    assert top["file"].endswith(FAULT_FILE) and top["function"] == "_retain", top
    assert top["caller"].startswith("on_request_finished (") and top["share"] > 0.5
    # the sentence gives the share in whole percent; summary.json keeps it to three places (0.995 may read 99 %)
    said = re.match(r"(\d+) % of the ", record["sentence"])
    assert said and abs(int(said[1]) - top["share"] * 100) <= 1, record["sentence"]


def test_the_leak_finding_says_where_the_memory_went(auto_run):
    summary, _ = auto_run
    rss = next(f for f in summary["findings"] if f["check"] == "leak.rss")
    assert rss["verdict"] == "FAIL", rss["evidence"]
    assert "Forensics: " in rss["evidence"] and f"{FAULT_FILE}:" in rss["evidence"] and "in _retain" in rss["evidence"]


def test_the_window_opened_at_the_end_and_is_left_out_of_the_checks(auto_run):
    summary, out = auto_run
    spans = query(out, "select t_s, kind from events where kind like 'forensics%' order by t_s")
    kinds = [kind for _, kind in spans]
    assert kinds == ["forensics_start", "forensics_end", "forensics"], spans
    start_s, end_s = spans[0][0], spans[1][0]
    assert 200 <= start_s < end_s <= 245 and end_s - start_s >= 25
    rss = next(f for f in summary["findings"] if f["check"] == "leak.rss")
    # every window from the warm-up to the tracker's start is judged, none after it
    assert rss["details"]["points"] <= (start_s - 20) / 5 + 1


def test_the_report_has_the_section_and_the_flame_graph(auto_run):
    summary, out = auto_run
    run_dir = out / summary["run_id"]
    report = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "Where the memory went" in report and "_retain" in report
    flame = summary["forensics"][0]["flamegraph"]
    assert f'href="{flame}"' in report and (run_dir / flame).stat().st_size > 0


def test_soak_forensics_opens_a_window_on_a_running_run(tmp_path, soak_cli):
    out = tmp_path / "out"
    live = subprocess.Popen([sys.executable, "-m", "soak", "start", "--duration", "100s", *LEAKY, "--forensics", "off",
                             "--out", str(out), "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ))
    try:
        run_id, _ = wait_for_server_samples(out, minimum=5)
        asked = soak_cli("forensics", run_id, "--for", "10s", "--out", str(out), timeout_s=200)
        assert asked.returncode == 0, asked.stderr[-3000:]
        assert "in _retain" in asked.stdout and FAULT_FILE in asked.stdout, asked.stdout
        stdout, stderr = live.communicate(timeout=300)
    finally:
        if live.poll() is None:
            live.kill()
            live.wait()
    summary = json.loads(stdout)
    assert summary["forensics"][0]["named"] and summary["forensics"][0]["stacks"][0]["function"] == "_retain"
    again = soak_cli("forensics", run_id, "--out", str(out))
    assert again.returncode != 0 and "forensics watches a running server" in again.stderr, again.stderr
