"""What the server left unmeasured, and which scraped source carries its gauges."""

from __future__ import annotations

from soak.analysis.inputs import Event
from soak.analysis.loader import followed_sources, gauge_source
from soak.analysis.server_kind import not_measured
from soak.contracts import EventKind
from soak.store.models import ServerSample
from soak.telemetry.dialects import DIALECTS
from soak.telemetry.sampler import not_measured as dialect_lacks


def _row(source, running=None, tokens=None, t_s=0.0):
    return ServerSample(source=source, running=running, generation_tokens_total=tokens, t_s=t_s)


def test_the_servers_own_metrics_carry_the_gauges_unless_only_another_source_does():
    own, triton = "http://h:9000/metrics", "http://h:8002/metrics"
    assert gauge_source([_row(own, 1, 10), _row(triton, 2, 20)]) == own
    assert gauge_source([_row(own), _row(triton, 2, 20), _row(own)]) == triton  # Triton's metrics port
    assert gauge_source([_row(own), _row(triton)]) == own


def test_a_server_followed_to_a_new_address_continues_its_series_and_a_port_read_beside_it_does_not():
    old, new, beside = "http://10.0.0.5:8000/metrics", "http://10.0.0.9:8000/metrics", "http://h:8002/metrics"
    moved = [_row(old, 1, 10, t) for t in range(5)] + [_row(new, 2, 3, t) for t in range(6, 10)]
    assert followed_sources(moved, gauge_source(moved)) == [old, new]
    alongside = [_row(old, 1, 10, t) for t in range(5)] + [_row(beside, 2, 20, t) for t in range(5)]
    assert followed_sources(alongside, gauge_source(alongside)) == [old]
    assert followed_sources([_row(old, t_s=1), _row(beside, 2, 20, t_s=2)], beside) == [beside]


def test_each_dialect_says_what_it_never_exposes():
    assert dialect_lacks(DIALECTS["vllm"]) == []
    assert dialect_lacks(DIALECTS["tgi"]) == ["preemptions"]
    assert dialect_lacks(DIALECTS["llamacpp"]) == ["preemptions"]  # KV: older builds only, seen at run


def test_not_measured_names_the_gauges_and_the_missing_processes():
    events = [Event(1.0, EventKind.SERVER_PROCESSES, "none", {"pids": [], "how": None}),
              Event(2.0, EventKind.SERVER_DIALECT, "llamacpp", {"dialect": "llamacpp", "server": "llama.cpp llama-server",
                                                                "not_measured": ["KV-cache usage"]})]
    lines = not_measured(events)
    assert lines[0] == "KV-cache usage (llama.cpp llama-server exposes no such series on /metrics)"
    assert "pass --server-pid PID" in lines[1]
    assert not_measured([Event(1.0, EventKind.SERVER_PROCESSES, "found", {"pids": [7], "how": "started by soak"})]) == []


def test_memory_checks_without_any_server_process_name_the_flag():
    from soak.analysis.gates import Gates
    from soak.analysis.memory import check_fds, check_rss
    from support.synthetic import bare_run

    for check in (check_rss, check_fds):
        finding = check(bare_run(3600.0), Gates())
        assert finding.verdict == "SKIPPED" and "pass --server-pid PID" in finding.evidence
