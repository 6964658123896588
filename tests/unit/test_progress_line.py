"""The one-line live progress of `soak start`: nothing shown that was not measured."""

from soak.cli.start import describe_progress
from soak.contracts import Progress

BASE = {"run_id": "r1", "stage": "warm-up", "elapsed_s": 20.0, "duration_s": 600.0, "requests": 12,
        "errors": 0, "rate_rps": None, "p99_ms": {"ttft": 0.0, "e2e": 0.0}, "server_rss_bytes": None,
        "in_flight": 3}


def test_warmup_line_does_not_show_none_rate_or_zero_latency():
    line = describe_progress(Progress.model_validate(BASE))
    assert "None" not in line and "0 ms" not in line
    assert "from the end of warm-up" in line


def test_unknown_server_memory_is_not_zero():
    line = describe_progress(Progress.model_validate(BASE | {"server_rss_bytes": 0}))
    assert "0 MiB" not in line and "not sampled" in line


def test_measured_line_shows_rate_latency_and_memory():
    line = describe_progress(Progress.model_validate(BASE | {
        "stage": "measuring", "rate_rps": 4.5, "p99_ms": {"ttft": 120.4, "e2e": 2300.0}, "server_rss_bytes": 512 * 2**20}))
    assert "4.50 req/s" in line and "P99 TTFT 120 ms" in line and "E2E 2300 ms" in line
    assert "server RSS 512 MiB" in line
