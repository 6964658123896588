"""Labels through schedules: `soak schedule add … -- --label KEY=VALUE` checks them like `soak start` does, and
the run a real daemon fires carries them (`soak runs --label`, summary.json)."""

from __future__ import annotations

import json

import pytest
from schedule_helpers import DaemonProcess, openai_stub, soak, soak_json, wait_until

pytestmark = pytest.mark.timeout(150)

START = ("--duration", "8s", "--warmup", "2s", "--window", "2s", "--scenario", "chat_short", "--rate", "2",
         "--sample-every", "1s")


def test_a_bad_label_is_refused_when_the_schedule_is_added(tmp_path):
    result = soak("schedule", "add", "nightly", "--out", str(tmp_path), "--cron", "0 3 * * *", "--",
                  "--target", "http://127.0.0.1:9", *START, "--label", "release")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("soak: error: invalid setting label (--label): "
                                                             "label 'release' is not KEY=VALUE")
    assert soak_json("schedule", "list", "--out", str(tmp_path)) == []


@pytest.mark.slow
def test_a_fired_run_carries_the_schedules_labels(tmp_path):
    out = tmp_path / "out"
    with openai_stub() as url:
        added = soak("schedule", "add", "nightly", "--out", str(out), "--cron", "0 3 * * *", "--first-fire-in", "1s",
                     "--", "--target", url, *START, "--label", "release=1.4.2", "--label", "gpu=none")
        assert added.returncode == 0, added.stderr
        daemon = DaemonProcess(out)
        try:
            daemon.wait_ready()
            ended = wait_until(lambda: next((e for e in soak_json("schedule", "events", "nightly", "--out", str(out))
                                             if e["kind"] in ("finished", "failed")), None),
                               100, "the scheduled run to end", every_s=0.5)
        finally:
            daemon.stop()
    assert ended["run_id"], ended["message"]
    [run] = soak_json("runs", "--out", str(out), "--label", "release=1.4.2", "--label", "gpu=none")
    assert run["id"] == ended["run_id"] and run["schedule_name"] == "nightly"
    assert run["labels"] == {"gpu": "none", "release": "1.4.2"}
    summary = json.loads((out / run["id"] / "summary.json").read_text())
    assert summary["labels"] == {"gpu": "none", "release": "1.4.2"}
