"""The idle-probe drain timeout follows the latency observed so far, and a request that kept streaming through a
timed-out drain is recorded as such (what `hang` reads to tell a slow request from a stuck one)."""

from __future__ import annotations

from soak.config import resolve_config
from soak.contracts import EventKind
from soak.load.hooks import HookCaller, LoadHooks
from soak.load.records import RequestRecord
from soak.run.server_watch import DrainWatch, chunk_times, drain_timeout_hook


class EventLog:
    """Keeps what is recorded as events: (kind, message, data)."""

    def __init__(self):
        self.events: list[tuple[str, str, dict]] = []

    def event(self, kind: str, message: str = "", data: dict | None = None) -> None:
        self.events.append((kind, message, data or {}))


def _config(tmp_path, **flags):
    return resolve_config({"out": str(tmp_path), **flags}, environ={})


def test_the_drain_timeout_is_three_p99s_and_never_below_a_minute_on_long_runs(tmp_path):
    config = _config(tmp_path, duration="24h")
    assert config.drain_timeout_for(None) == 60.0
    assert config.drain_timeout_for(6.0) == 60.0  # 3 × 6 s is under the floor
    assert config.drain_timeout_for(25.0) == 75.0  # P95 18 s, P99 25 s: the drain waits 75 s, not 10 s


def test_short_runs_keep_their_window_floor_but_still_wait_out_slow_requests(tmp_path):
    config = _config(tmp_path, duration="2m", window="5s")
    assert config.drain_timeout_for(None) == 10.0
    assert config.drain_timeout_for(20.0) == 60.0  # the bug: 10 s cut short requests streaming for 18 s


def test_drain_timeout_setting_overrides_the_observed_latency(tmp_path):
    config = _config(tmp_path, duration="24h", drain_timeout="15s")
    assert config.drain_timeout_for(120.0) == 15.0


def test_the_load_asks_the_hook_and_falls_back_to_the_config(tmp_path):
    config = _config(tmp_path, duration="24h")
    p99_ms = {"e2e": 30_000.0}
    hooks = HookCaller(LoadHooks(drain_timeout_s=drain_timeout_hook(config, lambda: p99_ms["e2e"])))
    assert hooks.drain_timeout_s(config.probe_drain_timeout_s) == 90.0
    p99_ms["e2e"] = 0.0  # nothing measured yet
    assert hooks.drain_timeout_s(config.probe_drain_timeout_s) == 60.0
    assert HookCaller(LoadHooks()).drain_timeout_s(42.0) == 42.0


def _record(first_token_t, gaps_ms, finish_t):
    return RequestRecord(scenario="chat_long", kind="chat", intended_t=first_token_t - 1, sent_t=first_token_t - 1,
                         first_token_t=first_token_t, finish_t=finish_t, ttft_ms=1000.0, e2e_ms=1000.0,
                         itl_ms=tuple(gaps_ms), queue_ms=0.0, lag_ms=0.0, output_tokens=len(gaps_ms) + 1,
                         prompt_tokens=10)


def test_chunk_times_start_at_the_first_token_and_add_each_gap():
    assert chunk_times(_record(100.0, [500.0, 250.0], 101.0)) == [100.0, 100.5, 100.75]


def _timed_out_probe(watch: DrainWatch, on_event) -> None:
    hook = watch.watching(on_event)
    hook("probe_start", "idle probe 3: arrivals stopped", {"index": 3, "t": 1000.0})
    hook("probe_drain_timeout", "idle probe 3: 1 still in flight after 10.0s", {"index": 3, "drain_s": 10.0})


def test_a_request_streaming_through_a_timed_out_drain_is_recorded_once():
    log = EventLog()
    watch = DrainWatch(log)
    _timed_out_probe(watch, log.event)
    assert [kind for kind, _, _ in log.events] == ["probe_start", "probe_drain_timeout"]  # handed on
    watch.add(_record(995.0, [1000.0] * 20, 1015.0))  # a chunk a second from 995 s to 1015 s
    watch.add(_record(996.0, [1000.0] * 20, 1016.0))
    streaming = [(message, data) for kind, message, data in log.events if kind == EventKind.PROBE_DRAIN_STREAMING]
    assert len(streaming) == 1
    message, data = streaming[0]
    assert data == {"index": 3, "chunks": 11, "drain_s": 10.0} and "still streaming" in message


def test_a_request_silent_during_the_drain_is_not_streaming():
    log = EventLog()
    watch = DrainWatch(log)
    _timed_out_probe(watch, log.event)
    watch.add(_record(990.0, [500.0, 500.0], 991.0))  # done before the probe
    watch.add(_record(980.0, [1000.0, 30_000.0], 1011.0))  # a chunk at 981 s, the next at 1011 s: stuck in the drain
    assert all(kind != EventKind.PROBE_DRAIN_STREAMING for kind, _, _ in log.events)


def test_a_run_that_can_sample_no_server_process_says_what_to_pass():
    from soak.run.server_watch import record_server_processes
    from soak.target import ServerInfo

    log = EventLog()
    text = record_server_processes(log, ServerInfo(kind="external", base_url="http://gpu-host:8000", model="m"))
    assert text.startswith("no server process can be sampled: http://gpu-host:8000 is not on this host")
    assert "pass --server-pid PID" in text
    [(kind, message, data)] = log.events
    assert kind == EventKind.SERVER_PROCESSES and message == text and data == {"pids": [], "how": None}


def test_a_process_found_by_its_port_is_announced():
    from soak.run.server_watch import record_server_processes
    from soak.target import ServerInfo

    log = EventLog()
    info = ServerInfo(kind="external", base_url="http://127.0.0.1:8000", model="m", root_pids=[4242],
                      processes_from="listening on port 8000")
    assert record_server_processes(log, info) == "sampling server process(es) 4242, listening on port 8000"
    started = ServerInfo(kind="reference", base_url="http://127.0.0.1:8000", model="m", root_pids=[7],
                         processes_from="started by soak")
    assert record_server_processes(log, started) is None  # nothing new to tell
