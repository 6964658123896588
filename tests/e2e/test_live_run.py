"""A real `soak start --web` run: its live page advances while it runs, `soak report` mid-run writes a report
marked in progress without touching the run, and the run still finishes with its own report; the live view's
process ends with it."""

from __future__ import annotations

import json
import re
import select
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import pytest

from soak.units import parse_duration

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

START = ["start", "--duration", "45s", "--warmup", "5s", "--window", "5s", "--sample-every", "1s", "--rate", "2",
         "--no-idle-probes", "--canary-every", "0", "--web"]
ELAPSED = re.compile(r"provisional, the run is in progress \((\S+) of 45s\)")


def _live_url(process: subprocess.Popen, timeout_s: float = 120) -> str:
    """The URL `soak start --web` prints on stderr at start."""
    deadline, seen = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline and process.poll() is None:
        if select.select([process.stderr], [], [], 0.2)[0]:
            line = process.stderr.readline()
            seen += line
            if line.startswith("live view: "):
                return line.split(": ", 1)[1].strip()
    raise AssertionError(f"no live view URL was printed: {seen}")


def _page(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.read().decode("utf-8")
    except (urllib.error.URLError, ConnectionError):
        return None


def _elapsed_s(url: str, after_s: float, timeout_s: float = 40) -> float:
    """Poll the live page until it shows the run further on than `after_s`; returns how far it shows."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = ELAPSED.search(_page(url) or "")
        if match and parse_duration(match.group(1)) > after_s:
            return parse_duration(match.group(1))
        time.sleep(0.5)
    raise AssertionError(f"the live page never showed the run past {after_s} s")


@pytest.mark.slow
def test_a_live_run_is_viewed_and_reported_mid_run_and_still_finishes_normally(tmp_path, soak_cli):
    process = subprocess.Popen([sys.executable, "-m", "soak", *START, "--out", str(tmp_path), "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = _live_url(process)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/runs/\d{8}T\d{6}Z-[0-9a-f]{4}", url)
        run_id = url.rsplit("/", 1)[1]
        first = _elapsed_s(url, after_s=0.0)
        second = _elapsed_s(url, after_s=first)  # the same page, later: the run has moved on
        assert second > first

        mid = soak_cli("report", run_id, "--out", str(tmp_path), "--json", timeout_s=120)
        assert mid.returncode == 0, mid.stderr
        assert json.loads(mid.stdout)["in_progress"] is True
        row = sqlite3.connect(tmp_path / "soak.db").execute(
            "select status, verdict, summary_json from runs where id = ?", (run_id,)).fetchone()
        assert row == ("running", None, None)
        stdout, stderr = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode in (0, 1, 3), stderr
    summary = json.loads(stdout)
    assert summary["run_id"] == run_id and summary["status"] == "completed" and "in_progress" not in summary
    run_dir = tmp_path / run_id
    assert 'id="in-progress"' not in (run_dir / "report.html").read_text()
    assert json.loads((run_dir / "summary.json").read_text())["verdict"] == summary["verdict"]
    assert json.loads((run_dir / "summary-in-progress.json").read_text())["in_progress"] is True  # kept apart
    web_pid = int(re.search(r"live view at \S+ \(pid (\d+)\)", (run_dir / "soak.log").read_text()).group(1))
    assert not psutil.pid_exists(web_pid)
    assert _page(url) is None  # nothing listens there any more


@pytest.mark.slow
def test_the_live_view_ends_when_its_soak_is_killed(tmp_path, soak_cli):
    process = subprocess.Popen([sys.executable, "-m", "soak", *START, "--out", str(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = _live_url(process)
        _elapsed_s(url, after_s=0.0)
        process.kill()  # SIGKILL: soak cannot stop its child; the child notices its parent is gone
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    deadline = time.monotonic() + 20
    while _page(url) is not None:
        assert time.monotonic() < deadline, "the live view outlived its killed soak"
        time.sleep(0.25)
    closed = soak_cli("close", url.rsplit("/", 1)[1], "--out", str(tmp_path), timeout_s=120)  # ends the server
    assert closed.returncode in (1, 3), closed.stderr


def test_a_web_port_in_use_stops_the_start_before_anything_runs(tmp_path, soak_cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = soak_cli("start", "--duration", "30s", "--web", f"127.0.0.1:{port}", "--out", str(tmp_path),
                          timeout_s=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"soak: error: cannot serve the live view at 127.0.0.1:{port}: Address already in use")
    runs = sqlite3.connect(tmp_path / "soak.db").execute("select count(*) from runs").fetchone()[0]
    assert runs == 0  # no server was started and no run was recorded
