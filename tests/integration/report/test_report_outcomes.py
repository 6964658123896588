"""The report's "Errors and expectations": the context length, failed requests by message ("9 × HTTP 400: …"),
validation gaps in a table and in the banner, all escaped."""

from __future__ import annotations

from html import unescape

import pytest
from report_run import HOSTILE, RUN_ID, summary_dict

from soak.contracts import parse_summary
from soak.report import render_report

pytestmark = pytest.mark.timeout(120)

CONTEXT_400 = "HTTP 400: request (1719 tokens) exceeds the available context size (1024 tokens)"


def outcome_summary() -> dict:
    summary = summary_dict()
    summary["context"] = {"tokens": 1024, "source": "GET /props", "stated": 1024}
    summary["error_messages"] = [
        {"count": 9, "error_class": "http_4xx", "status_code": 400, "message": CONTEXT_400, "scenarios": ["long_tail"]},
        {"count": 2, "error_class": "http_5xx", "status_code": 500, "message": f"HTTP 500: {HOSTILE}",
         "scenarios": ["mixed"]}]
    summary["validation_gaps"] = [{"count": 27, "scenario": "bad_input", "expectation": "empty messages: a 4xx",
                                   "status_code": 200, "max_output_tokens": 2000}]
    return summary


def render(built_run, tmp_path, summary) -> str:
    path = render_report(built_run["store"], RUN_ID, parse_summary(summary), tmp_path / "report.html")
    return path.read_text(encoding="utf-8")


def test_errors_by_message_gaps_and_context_are_shown(built_run, tmp_path):
    html = render(built_run, tmp_path, outcome_summary())
    text = unescape(html)
    assert f"9 × {CONTEXT_400}" in text
    assert "Requests were sized for a context of 1,024 tokens (from GET /props)." in text
    assert "27 × bad_input" in text and "empty messages: a 4xx" in text and "up to 2,000 output tokens" in text
    assert "27 request(s) answered 200 where a refusal was expected" in text  # the banner
    assert HOSTILE not in html  # a server's message is escaped


def test_a_clean_run_says_so(built_run, tmp_path):
    text = unescape(render(built_run, tmp_path, summary_dict()))
    assert "No request failed." in text and "No request that expected a refusal was answered 200." in text
    assert "answered 200 where a refusal" not in text
