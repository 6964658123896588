"""Webhook notifications: payload, retries with backoff, timeouts, and no URL or token in the logs."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "schedule"))
from schedule_helpers import WebhookReceiver

from soak.run.notify import notification_payload, notify, summary_text

pytestmark = pytest.mark.timeout(60)

SUMMARY = {"schema": "soak.run.summary/1", "run_id": "20261204T190000Z-ab12", "status": "completed",
           "verdict": "FAIL", "verdict_reason": "leak.rss FAIL: +47 MiB/h", "report_html": "/runs/x/report.html",
           "findings": []}


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def test_text_has_verdict_run_reason_and_report():
    text = summary_text(SUMMARY, "weekend")
    for part in ("weekend", "FAIL", "20261204T190000Z-ab12", "completed", "leak.rss FAIL", "/runs/x/report.html"):
        assert part in text
    payload = notification_payload(SUMMARY, "weekend")
    assert payload["text"] == text and payload["run_id"] == SUMMARY["run_id"]
    assert payload["schedule_name"] == "weekend" and payload["findings"] == []


def test_text_of_a_crash_without_run():
    text = summary_text({"run_id": None, "status": "crashed", "verdict": None,
                         "verdict_reason": "soak start exited with code 4"})
    assert "NO VERDICT" in text and "crashed" in text and "code 4" in text


def test_delivers_the_summary_as_json():
    with WebhookReceiver() as hook:
        assert notify(hook.url, SUMMARY, schedule_name="weekend")
        body = hook.bodies.get(timeout=5)
    assert body["verdict"] == "FAIL" and "FAIL" in body["text"]


def test_retries_server_errors_with_exponential_backoff(caplog):
    sleeps = Sleeps()
    with WebhookReceiver(statuses=[500, 503, 429]) as hook, caplog.at_level(logging.DEBUG, "soak.run.notify"):
        assert notify(hook.url, SUMMARY, attempts=4, backoff_s=0.5, sleep=sleeps)
        assert hook.requests == 4
    assert sleeps == [0.5, 1.0, 2.0]
    assert "SECRET-TOKEN" not in caplog.text and "127.0.0.1" not in caplog.text


def test_gives_up_after_the_last_attempt():
    sleeps = Sleeps()
    with WebhookReceiver(statuses=[502] * 3) as hook:
        assert not notify(hook.url, SUMMARY, attempts=3, sleep=sleeps)
        assert hook.requests == 3
    assert len(sleeps) == 2


def test_a_client_error_is_not_retried(caplog):
    with WebhookReceiver(statuses=[404]) as hook, caplog.at_level(logging.DEBUG, "soak.run.notify"):
        assert not notify(hook.url, SUMMARY, sleep=Sleeps())
        assert hook.requests == 1
    assert "HTTP 404" in caplog.text and "SECRET-TOKEN" not in caplog.text


def test_unreachable_and_silent_receivers_time_out_without_leaking_the_url(caplog):
    with socket.socket() as silent:  # accepts connections (backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}/hooks/SECRET-TOKEN"
        with caplog.at_level(logging.DEBUG, "soak.run.notify"):
            assert not notify(silent_url, SUMMARY, attempts=2, timeout_s=0.3, sleep=Sleeps())
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        closed_url = f"http://127.0.0.1:{closed.getsockname()[1]}/hooks/SECRET-TOKEN"
    with caplog.at_level(logging.DEBUG, "soak.run.notify"):
        assert not notify(closed_url, SUMMARY, attempts=2, sleep=Sleeps())
    assert "SECRET-TOKEN" not in caplog.text and "127.0.0.1" not in caplog.text
    assert "transport error" in caplog.text


def test_a_non_http_url_is_refused():
    assert not notify("file:///etc/passwd", SUMMARY, sleep=Sleeps())
