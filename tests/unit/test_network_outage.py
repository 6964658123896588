"""A lost route to the server is a network outage, not the server's: the conductor's health watch records it, the
analysis leaves its windows, health gaps, drain timeouts and errors out, and the report names it. A server that
accepts connections and answers nothing is a hang."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from soak.analysis.canary import check_canary
from soak.analysis.error_checks import check_budget
from soak.analysis.findings import FAIL, PASS, SUSPECT
from soak.analysis.gates import Gates
from soak.analysis.inputs import Event, ProcessSeries, ServerSeries, WindowRequests
from soak.analysis.liveness import check_crashes, check_hang
from soak.analysis.loader import INTERVAL_KINDS, _intervals, build_windows
from soak.analysis.memory import check_rss
from soak.contracts import EventKind
from soak.report.markers import build_markers, event_class
from soak.report.sections import network_facts
from soak.run import conductor as conductor_module
from soak.run.conductor import DOWN_CHECKS, Conductor, RunState
from soak.store.records import StoredRun
from soak.target import ServerInfo
from soak.target.reachability import Blame, Connect, Reachability
from support.synthetic import bare_run

RUN_S = 600.0


def _reach(blame: Blame, connect: Connect = Connect.TIMEOUT, answered: bool | None = None) -> Reachability:
    return Reachability(blame, "10.0.0.2:8000", connect, True, True, answered)


class FakeTarget:
    def __init__(self) -> None:
        self.up = True

    def health(self) -> str:
        return "up" if self.up else "down"

    def process_alive(self) -> bool | None:
        return True


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict]] = []
        self.now_s = 0.0

    def event(self, kind: str, message: str = "", data: dict[str, Any] | None = None) -> None:
        self.events.append((str(kind), message, data or {}))

    def elapsed_s(self) -> float:
        return self.now_s


class FakeLoad:
    def __init__(self) -> None:
        self.paused = 0
        self.resumed = 0

    def pause(self) -> None:
        self.paused += 1

    def resume(self) -> None:
        self.resumed += 1


@pytest.fixture
def watch(monkeypatch):
    """A conductor with fake target, recorder and load, whose route probe answers what `watch.found` says."""
    conductor = Conductor.__new__(Conductor)
    conductor.config = type("Config", (), {"target": type("Target", (), {"api_key_env": None})()})()
    conductor.state = RunState(conductor.config, "r", None, FakeTarget(),
                               info=ServerInfo(kind="external", base_url="http://10.0.0.2:8000", model="m"),
                               recorder=FakeRecorder(), load=FakeLoad())
    conductor.found = _reach(Blame.NETWORK)
    monkeypatch.setattr(conductor_module, "probe_reachability", lambda *_args: conductor.found)
    return conductor


def _checks(conductor: Conductor, up: bool, times: int, at_s: float) -> None:
    state = conductor.state
    for _ in range(times):
        state.target.up, state.health_checked_at, state.recorder.now_s = up, -1e9, at_s
        conductor._watch_health()
    state.loopback = None  # the fake probe never opened one


def test_a_lost_route_is_a_network_outage_from_the_last_health_that_answered(watch):
    _checks(watch, True, 1, at_s=40.0)
    _checks(watch, False, DOWN_CHECKS + 2, at_s=48.0)
    _checks(watch, True, 1, at_s=110.0)
    kinds = [kind for kind, _, _ in watch.state.recorder.events]
    assert kinds == ["network_outage_start", "network_outage_end"]
    start = watch.state.recorder.events[0]
    assert start[2]["since_s"] == 40.0 and start[2]["blame"] == "network" and "10.0.0.2:8000" in start[1]
    assert (watch.state.load.paused, watch.state.load.resumed) == (1, 1)


def test_a_server_that_answers_nothing_is_a_server_outage_as_before(watch):
    watch.found = _reach(Blame.SERVER, Connect.OK, answered=False)
    _checks(watch, False, DOWN_CHECKS, at_s=30.0)
    _checks(watch, True, 1, at_s=90.0)
    events = watch.state.recorder.events
    assert [kind for kind, _, _ in events] == ["outage_start", "outage_end"]
    assert events[0][2]["answered"] is False and events[0][1] == "server /health down; arrivals paused"


def test_a_route_that_comes_back_to_a_server_still_down_ends_one_outage_and_opens_the_other(watch):
    _checks(watch, False, DOWN_CHECKS, at_s=30.0)
    watch.found = _reach(Blame.SERVER, Connect.REFUSED)
    _checks(watch, False, DOWN_CHECKS - 1, at_s=60.0)  # the server gets the checks a new outage would
    assert [kind for kind, _, _ in watch.state.recorder.events] == ["network_outage_start"]
    _checks(watch, False, 1, at_s=62.0)
    _checks(watch, True, 1, at_s=70.0)
    assert [kind for kind, _, _ in watch.state.recorder.events] == [
        "network_outage_start", "network_outage_end", "outage_start", "outage_end"]
    assert (watch.state.load.paused, watch.state.load.resumed) == (1, 1)


def test_a_server_catching_up_once_the_route_is_back_is_not_blamed_for_the_networks_outage(watch):
    _checks(watch, False, DOWN_CHECKS, at_s=30.0)
    watch.found = _reach(Blame.SERVER, Connect.OK, answered=False)  # its first /health after the partition is slow
    _checks(watch, False, 1, at_s=60.0)
    _checks(watch, True, 1, at_s=61.0)
    assert [kind for kind, _, _ in watch.state.recorder.events] == ["network_outage_start", "network_outage_end"]


def _outage_events(start_s: float = 100.0, end_s: float = 160.0, since_s: float = 93.0) -> tuple[Event, ...]:
    return (Event(start_s, EventKind.NETWORK_OUTAGE_START, "server out of reach", {"since_s": since_s}),
            Event(end_s, EventKind.NETWORK_OUTAGE_END, "server reachable again"))


def _stored(run_s: float = RUN_S) -> StoredRun:
    return StoredRun(id="r", status="completed", started_at="", t0_epoch_s=0.0, planned_duration_s=run_s,
                     warmup_s=20.0, window_s=10.0, out_dir="", target_kind="external", duration_s=run_s)


def test_windows_from_the_last_health_that_answered_to_the_end_are_left_out_as_network():
    events = list(_outage_events())
    assert _intervals(events, *INTERVAL_KINDS["network"], RUN_S) == [(93.0, 160.0)]
    excluded = {w.index: w.excluded for w in build_windows(_stored(), RUN_S, events)}
    assert [i for i, why in excluded.items() if why == "network"] == [7, 8, 9, 10, 11, 12, 13]
    probe = [Event(95.0, "probe_start"), Event(99.0, "probe_end")]  # a network outage outranks a probe's label
    assert {w.index: w.excluded for w in build_windows(_stored(), RUN_S, events + probe)}[7] == "network"


def _network_run(**fields) -> Any:
    return bare_run(RUN_S, warmup_s=20.0, window_s=10.0, network_outages=((93.0, 160.0),), **fields)


def _request_windows(run) -> tuple[WindowRequests, ...]:
    """20 requests a window, none failed but those the lost route failed (connect errors) in windows 7 to 13."""
    return tuple(WindowRequests(w.index, w.start_s, w.end_s, 20, {"connect": 10} if w.excluded == "network" else {})
                 for w in run.windows if w.index >= 0)


def test_connect_errors_in_a_network_outage_are_not_the_servers():
    plain = _network_run()
    run = replace(plain, windows=tuple(replace(w, excluded="network") if 7 <= w.index <= 13 else w
                                       for w in plain.windows))
    run = replace(run, request_windows=_request_windows(run))
    finding = check_budget(run, Gates())
    assert finding.verdict == PASS and finding.details["errors"] == 0, finding.evidence
    assert "7 window(s) over a network outage left out" in finding.evidence


def _health(t_s: np.ndarray) -> np.ndarray:
    return np.where((t_s >= 95.0) & (t_s < 160.0), 0.0, 1.0)


def test_health_failing_in_a_network_outage_is_no_crash_and_the_finding_says_why():
    t_s = np.arange(0.0, RUN_S, 1.0)
    server = ServerSeries(t_s=t_s, health_ok=_health(t_s))
    without = check_crashes(bare_run(RUN_S, warmup_s=20.0, window_s=10.0, server=server), Gates())
    assert without.verdict == SUSPECT  # the same gap with no network outage recorded, as before
    finding = check_crashes(_network_run(server=server, events=_outage_events()), Gates())
    assert finding.verdict == PASS, finding.evidence
    assert "route to the server was lost 1 time(s) (network outage, longest 67 s" in finding.evidence


def test_a_drain_timeout_in_a_network_outage_is_out_of_reach_not_a_hang():
    timeout = (Event(110.0, EventKind.PROBE_START, "", {"index": 0}),
               Event(150.0, EventKind.PROBE_DRAIN_TIMEOUT, "idle probe 0: 2 still in flight", {"index": 0}))
    finding = check_hang(_network_run(events=_outage_events() + timeout), Gates())
    assert finding.verdict == PASS and "in a network outage: out of reach, not stuck" in finding.evidence
    assert check_hang(bare_run(RUN_S, warmup_s=20.0, window_s=10.0, events=timeout), Gates()).verdict == FAIL


def _server_outage(answered: bool | None, process_alive: bool | None = True, end_s: float = 160.0) -> tuple:
    data = {"connect": "ok" if answered is not None else "refused", "answered": answered,
            "process_alive": process_alive}
    return (Event(100.0, EventKind.OUTAGE_START, "server /health down; arrivals paused", data),
            Event(end_s, EventKind.OUTAGE_END, "server /health up again"))


def test_a_server_that_accepts_and_answers_nothing_fails_hang():
    finding = check_hang(bare_run(RUN_S, events=_server_outage(answered=False)), Gates())
    assert finding.verdict == FAIL and finding.value == 60.0
    assert finding.evidence.startswith("The server accepted connections but answered nothing for 60 s from ")
    for events in (_server_outage(answered=True), _server_outage(answered=None), _server_outage(False, False),
                   _server_outage(False, end_s=105.0)):  # answered 503; refused; its process gone; shorter than the limit
        assert check_hang(bare_run(RUN_S, events=events), Gates()).verdict != FAIL, events


def test_the_report_marks_and_names_a_network_outage():
    events = list(_outage_events())
    assert event_class("network_outage_start") == event_class("network_outage_end") == "network"
    spans = [m for m in build_markers(events, 20.0, RUN_S) if m.marker_class == "network"]
    assert [(m.t_s, m.end_s) for m in spans] == [(93.0, 160.0)]
    assert network_facts(events, RUN_S).startswith("1 network outage(s), the server out of reach rather than down: "
                                                   "1m7s from 1m33s")
    assert network_facts([], RUN_S) is None


def test_a_canary_that_timed_out_in_a_network_outage_judges_nothing():
    canaries = (Event(50.0, EventKind.CANARY, "reference", {"index": 0, "reference": True, "text": "x"}),
                Event(130.0, EventKind.CANARY_TIMEOUT, "no answer", {"index": 1, "elapsed_s": 20.0}),
                Event(150.0, EventKind.CANARY_TIMEOUT, "no answer", {"index": 2, "elapsed_s": 20.0}),
                *(Event(200.0 + i, EventKind.CANARY, "same", {"index": 3 + i}) for i in range(2)))
    assert check_canary(_network_run(events=_outage_events() + canaries), Gates()).verdict == PASS
    assert check_canary(bare_run(RUN_S, events=canaries), Gates()).verdict == FAIL  # two in a row, as before


def test_a_leak_that_grows_with_requests_reads_one_line_across_a_network_outage():
    """Arrivals paused for 61 s of a 200 s run: on the wall clock the flat stretch bends the line until the slope's
    interval crosses zero (SUSPECT, as the e2e run first read); on the load clock it is the planted 2 MiB/s."""
    gap = (50.0, 111.0)
    t_s = np.arange(0.0, 200.0, 1.0)
    load_s = t_s - np.clip(t_s - gap[0], 0.0, gap[1] - gap[0])
    rss = 2**30 + 2 * 2**20 * load_s + np.random.default_rng(0).normal(0.0, 2**20, t_s.size)
    plain = bare_run(200.0, warmup_s=15.0, window_s=5.0,
                     processes=(ProcessSeries(pid=1, name="server", t_s=t_s, rss_bytes=rss),))
    windows = tuple(replace(w, excluded="network") if w.index >= 0 and w.start_s < gap[1] and w.end_s > gap[0] else w
                    for w in plain.windows)
    on_wall_clock = check_rss(replace(plain, windows=windows), Gates())
    finding = check_rss(replace(plain, windows=windows, network_outages=(gap,)), Gates())
    assert on_wall_clock.verdict == SUSPECT and on_wall_clock.ci[0] < 0
    # the CI is in bytes per hour: about the planted 7 GiB/h
    assert finding.verdict == FAIL and 6.5 * 2**30 < finding.ci[0] < finding.ci[1] < 7.5 * 2**30, finding.evidence
    clock = replace(plain, network_outages=(gap,)).load_clock
    assert clock(np.array([40.0, 80.0, 150.0])).tolist() == [40.0, 50.0, 89.0]
