"""`soak daemon` as a real process firing real `soak start` runs against a local OpenAI-compatible stub."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from schedule_helpers import DaemonProcess, WebhookReceiver, openai_stub, soak, soak_json, wait_until

from soak.run.locking import hold_run_lock

# One xdist group: the daemon is a module fixture, started once on one worker (`--dist loadgroup`).
pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("schedule_daemon_process")]

# --scenario: a built-in that exists today; the stub answers every request in a few milliseconds.
START = ("--duration", "20s", "--scenario", "chat_short", "--rate", "2", "--sample-every", "1s")


@pytest.fixture
def daemons():
    """Start daemons through this; each is stopped (and killed only if it will not stop) afterwards."""
    started: list[DaemonProcess] = []

    def start(out: Path, env: dict[str, str] | None = None, *extra: str) -> DaemonProcess:
        process = DaemonProcess(out, env, *extra)
        started.append(process)
        process.wait_ready()
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.stop()


def events(out: Path, name: str) -> list[dict]:
    return soak_json("schedule", "events", name, "--out", str(out))


def event_of(out: Path, name: str, *kinds: str):
    return lambda: next((e for e in events(out, name) if e["kind"] in kinds), None)


def add(out: Path, name: str, *args: str) -> None:
    result = soak("schedule", "add", name, "--out", str(out), *args)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def fired(tmp_path_factory):
    """One cron fire through a real daemon: first fire 1 s after adding, webhook in the daemon's environment."""
    out = tmp_path_factory.mktemp("fired") / "out"
    with openai_stub() as url, WebhookReceiver() as hook:
        add(out, "weekend", "--cron", "0 20 * * 5", "--notify-env", "SOAK_TEST_HOOK", "--first-fire-in", "1s",
            "--", "--target", url, *START)
        daemon = DaemonProcess(out, {"SOAK_TEST_HOOK": hook.url})
        try:
            daemon.wait_ready()
            ended = wait_until(event_of(out, "weekend", "finished", "failed"), 90, "the scheduled run to end",
                               every_s=0.5)
            body = hook.bodies.get(timeout=30)
            notified = wait_until(event_of(out, "weekend", "notified", "notify_failed"), 30, "the notify event")
        finally:
            exit_code = daemon.stop()
    return {"out": out, "ended": ended, "body": body, "notified": notified, "daemon_exit": exit_code,
            "daemon_log": daemon.text()}


def _require_a_run(fired) -> str:
    ended = fired["ended"]
    if ended["run_id"] is None:
        pytest.fail(f"soak start did not record a run: {ended['message']}")
    return ended["run_id"]


@pytest.mark.slow
def test_a_cron_fire_runs_soak_start_records_the_exit_and_notifies(fired):
    ended, body = fired["ended"], fired["body"]
    kinds = [e["kind"] for e in reversed(events(fired["out"], "weekend"))]
    assert kinds[:2] == ["started", ended["kind"]]
    assert ended["exit_code"] is not None and ended["trigger"] == "cron"
    assert fired["notified"]["kind"] == "notified"
    assert "weekend" in body["text"] and body["schedule_name"] == "weekend"
    assert body["run_id"] == ended["run_id"]
    assert fired["daemon_exit"] == 0
    assert "SECRET-TOKEN" not in fired["daemon_log"]
    [listed] = soak_json("schedule", "list", "--out", str(fired["out"]))
    assert datetime.fromisoformat(listed["next_fire_at"]).strftime("%a %H:%M") == "Fri 20:00"


@pytest.mark.slow
def test_the_scheduled_run_appears_in_soak_runs_with_its_verdict(fired):
    run_id = _require_a_run(fired)
    runs = soak_json("runs", "--out", str(fired["out"]))
    assert run_id in [run["id"] for run in runs]
    summary = json.loads((fired["out"] / run_id / "summary.json").read_text())
    assert fired["body"]["verdict"] == summary["verdict"] == fired["ended"]["verdict"]
    assert fired["body"]["report_html"] == summary["report_html"]
    [listed] = soak_json("schedule", "list", "--out", str(fired["out"]))
    assert listed["last_run"]["id"] == run_id and listed["last_run"]["verdict"] == summary["verdict"]


@pytest.mark.slow
def test_the_scheduled_run_is_tagged_with_the_schedule(fired):
    run_id = _require_a_run(fired)
    [run] = [run for run in soak_json("runs", "--out", str(fired["out"])) if run["id"] == run_id]
    assert run["schedule_name"] == "weekend"


def test_an_overlapping_fire_is_refused_and_recorded(tmp_path, daemons):
    out = tmp_path / "out"
    add(out, "nightly", "--cron", "0 3 * * *", "--", "--target", "http://127.0.0.1:9", *START)
    daemons(out)
    with hold_run_lock(out):  # as a run with an embedded server would
        assert soak("schedule", "run-now", "nightly", "--out", str(out)).returncode == 0
        skipped = wait_until(event_of(out, "nightly", "skipped"), 30, "the skip to be recorded")
    assert ".soak.lock" in skipped["message"] and skipped["trigger"] == "run-now"
    assert [e["kind"] for e in events(out, "nightly")] == ["skipped"]  # nothing was started


def test_a_schedule_survives_a_daemon_restart(tmp_path, daemons):
    out = tmp_path / "out"
    add(out, "weekend", "--cron", "0 20 * * FRI", "--timezone", "Europe/Berlin", "--", "--target",
        "http://127.0.0.1:9", *START)
    [before] = soak_json("schedule", "list", "--out", str(out))
    first = daemons(out)
    assert "1 schedule(s)" in first.text() and "next: weekend" in first.text()
    assert first.stop() == 0
    second = daemons(out)
    assert "next: weekend" in second.text()
    [after] = soak_json("schedule", "list", "--out", str(out))
    assert after["next_fire_at"] == before["next_fire_at"]
    assert datetime.fromisoformat(after["next_fire_at"]).strftime("%a %H:%M") == "Fri 20:00"
    assert second.stop() == 0


def test_a_second_daemon_on_the_same_folder_is_refused(tmp_path, daemons):
    out = tmp_path / "out"
    daemons(out)
    second = soak("daemon", "--out", str(out), timeout_s=30)
    assert second.returncode == 2
    assert "another soak daemon" in second.stderr


@pytest.mark.slow
def test_sigterm_stops_the_running_soak_and_it_is_finalised(tmp_path, daemons):
    out = tmp_path / "out"
    with openai_stub() as url:
        add(out, "long", "--cron", "0 3 * * *", "--", "--target", url, "--duration", "5m", "--scenario",
            "chat_short", "--rate", "2")
        daemon = daemons(out, None, "--stop-timeout", "60s")
        assert soak("schedule", "run-now", "long", "--out", str(out)).returncode == 0
        wait_until(event_of(out, "long", "started"), 30, "the run to start")
        running = wait_until(lambda: soak_json("runs", "--out", str(out)) or event_of(out, "long", "failed")(),
                             60, "the run to be recorded (or to fail)", every_s=0.5)
        assert daemon.stop(timeout_s=90) == 0
    ended = event_of(out, "long", "finished", "failed")()
    kinds = [e["kind"] for e in reversed(events(out, "long"))]
    if isinstance(running, dict):  # soak start failed on its own before the stop
        pytest.fail(f"soak start failed: {ended['message']}")
    assert kinds == ["started", "stopping", "finished"]
    summary = json.loads((out / ended["run_id"] / "summary.json").read_text())
    assert summary["status"] in ("aborted", "completed") and summary["verdict"] == ended["verdict"]
