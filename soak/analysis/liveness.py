"""Liveness: `hang` (silent stall) and `crashes` (engine death).

A hang is a span with requests running and no new token, or a server outage during which the server accepted
connections and answered nothing (a frozen server: its kernel still accepts, its process does not run). An idle
probe whose drain timed out is a hang signal only while nothing moved: when tokens kept flowing during the drain — the
server's generation-token counter rose, or the client received chunks (`probe_drain_streaming`) — the requests were
slow, not stuck. A network outage (the route to the server lost, its process alive) is neither: what could not be
seen or drained then was out of reach, not stuck or dead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from soak.analysis.findings import FAIL, PASS, SUSPECT, Finding, skipped
from soak.analysis.fmt import duration_text
from soak.analysis.gates import Gates
from soak.analysis.inputs import Event, RunData, ServerSeries
from soak.analysis.server_kind import tokens_at_finish
from soak.contracts import EventKind

HANG_EVENTS = (EventKind.PROBE_DRAIN_TIMEOUT,)
STREAMING_EVENTS = (EventKind.PROBE_DRAIN_STREAMING,)
PROBE_START_EVENTS = (EventKind.PROBE_START,)
SERVER_EVENTS = (EventKind.SERVER_START, EventKind.CRASH, EventKind.RESTART)
OUTAGE_KINDS = (EventKind.OUTAGE_START, EventKind.OUTAGE_END)


@dataclass(frozen=True)
class Span:
    start_s: float
    end_s: float

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


def find_stalls(server: ServerSeries, min_length_s: float) -> tuple[list[Span], float]:
    """Spans where running > 0 but generation_tokens_total did not move, longer than min_length_s;
    also the longest such span of any length. A failed scrape (nan) ends a span: no evidence."""
    if server.running is None or server.generation_tokens_total is None:
        return [], 0.0
    spans, longest_s, start = [], 0.0, None
    for i, (running, tokens) in enumerate(zip(server.running, server.generation_tokens_total)):
        busy = np.isfinite(running) and np.isfinite(tokens) and running > 0
        if start is not None and busy and tokens == server.generation_tokens_total[start]:
            continue
        if start is not None:
            span = Span(float(server.t_s[start]), float(server.t_s[i - 1]))
            longest_s = max(longest_s, span.length_s)
            spans += [span] if span.length_s > min_length_s else []
        start = i if busy else None
    if start is not None:
        span = Span(float(server.t_s[start]), float(server.t_s[-1]))
        longest_s = max(longest_s, span.length_s)
        spans += [span] if span.length_s > min_length_s else []
    return spans, longest_s


def _tokens_rose(server: ServerSeries | None, start_s: float | None, end_s: float) -> bool:
    """Whether the generation-token counter rose between the last sample before `start_s` and `end_s`."""
    if server is None or server.generation_tokens_total is None or start_s is None:
        return False
    t_s, tokens = server.t_s, server.generation_tokens_total
    first = max(int(np.searchsorted(t_s, start_s, side="right")) - 1, 0)
    last = int(np.searchsorted(t_s, end_s, side="right"))
    seen = tokens[first:last][np.isfinite(tokens[first:last])]
    return seen.size >= 2 and float(seen.max()) > float(seen[0])


def streaming_timeouts(run: RunData, timeouts: list[Event]) -> list[Event]:
    """The drain timeouts during which tokens kept flowing: the server's counter rose, or the client got chunks."""
    starts = {e.data.get("index"): e.t_s for e in run.events if e.kind in PROBE_START_EVENTS}
    chunks = {e.data.get("index") for e in run.events if e.kind in STREAMING_EVENTS}
    return [e for e in timeouts if e.data.get("index") in chunks
            or _tokens_rose(run.server, starts.get(e.data.get("index")), e.t_s)]


def unreachable_timeouts(run: RunData, timeouts: list[Event]) -> list[Event]:
    """The drain timeouts whose drain a network outage overlapped: the requests waited on were out of reach."""
    starts = {e.data.get("index"): e.t_s for e in run.events if e.kind in PROBE_START_EVENTS}
    return [e for e in timeouts if in_network_outage(run, starts.get(e.data.get("index"), e.t_s), e.t_s)]


def in_network_outage(run: RunData, start_s: float, end_s: float) -> bool:
    """Whether `[start_s, end_s]` overlaps a network outage of the run."""
    return any(a <= end_s and b >= start_s for a, b in run.network_outages)


def frozen_outages(run: RunData, min_length_s: float) -> list[Span]:
    """Server outages longer than `min_length_s` that began with the server accepting connections and answering
    nothing while its process lived (the conductor's probes, in the outage_start event's data)."""
    spans, opened = [], None
    for event in (e for e in run.events if e.kind in OUTAGE_KINDS):
        if event.kind == EventKind.OUTAGE_START and opened is None:
            opened = event
        elif event.kind == EventKind.OUTAGE_END and opened is not None:
            spans.append((opened, Span(opened.t_s, event.t_s)))
            opened = None
    if opened is not None:
        spans.append((opened, Span(opened.t_s, run.actual_duration_s)))
    return [span for start, span in spans if span.length_s > min_length_s and _frozen(start)]


def _frozen(start: Event) -> bool:
    data = start.data
    return data.get("connect") == "ok" and data.get("answered") is False and data.get("process_alive") is not False


def _unexcused_probes(run: RunData, timeouts: list[Event], excused: list[Event]) -> list:
    """Undrained probe readings whose drain timeout (the last one before the reading) was not excused."""
    undrained = []
    for probe in (p for p in run.probes if not p.drained):
        before = [e for e in timeouts if e.t_s <= probe.t_s]
        if not before or before[-1] not in excused:
            undrained.append(probe)
    return undrained


def longest_e2e_s(run: RunData) -> float:
    """The largest per-window E2E P99 of the run, in seconds (0 without one)."""
    values = [w.e2e.p99_ms for w in run.latency_windows if w.e2e is not None and np.isfinite(w.e2e.p99_ms)]
    return max(values, default=0.0) / 1000.0


def stall_limit_s(run: RunData, limit_s: float) -> float:
    """How long the token counter may stay still while requests run: the gate's limit, plus the longest E2E P99
    when the counter moves only as requests finish (a long request keeps it still while streaming)."""
    return limit_s + longest_e2e_s(run) if tokens_at_finish(run) else limit_s


def check_hang(run: RunData, gates: Gates) -> Finding:
    limit_s = stall_limit_s(run, gates.hang.effective_after_s(run.planned_duration_s))
    stalls, longest_s = find_stalls(run.server, limit_s) if run.server else ([], 0.0)
    frozen = frozen_outages(run, gates.hang.effective_after_s(run.planned_duration_s))
    all_timeouts = [e for e in run.events if e.kind in HANG_EVENTS]
    streaming = streaming_timeouts(run, all_timeouts)
    unreachable = [e for e in unreachable_timeouts(run, all_timeouts) if e not in streaming]
    timeouts = [e for e in all_timeouts if e not in streaming and e not in unreachable]
    undrained = _unexcused_probes(run, all_timeouts, streaming + unreachable)
    has_gauges = run.server is not None and run.server.running is not None \
        and run.server.generation_tokens_total is not None
    if not (has_gauges or run.probes or all_timeouts or frozen):
        return skipped("hang", "No server gauges (running, generated tokens) or idle probes to judge a hang by.")
    details = {"limit_s": limit_s, "longest_stall_s": longest_s,
               "stalls": [{"start_s": s.start_s, "end_s": s.end_s} for s in stalls],
               "timeouts": [{"t_s": e.t_s, "kind": e.kind, "message": e.message} for e in timeouts],
               "undrained_probes": [p.t_s for p in undrained],
               "streaming_drains": [{"t_s": e.t_s, "index": e.data.get("index")} for e in streaming],
               "unreachable_drains": [{"t_s": e.t_s, "index": e.data.get("index")} for e in unreachable],
               "frozen": [{"start_s": s.start_s, "end_s": s.end_s} for s in frozen]}
    if stalls or timeouts or undrained or frozen:
        evidence = _hang_text(stalls, timeouts, undrained, limit_s) if stalls or timeouts or undrained else ""
        return Finding(check="hang", verdict=FAIL, value=max([longest_s, *(s.length_s for s in frozen)]), unit="s",
                       threshold=limit_s, evidence=(evidence + " " + _frozen_text(frozen)).strip(), details=details)
    out_of_reach = f" {len(unreachable)} drain(s) timed out in a network outage: out of reach, not stuck." \
        if unreachable else ""
    return Finding(check="hang", verdict=PASS, value=longest_s, unit="s", threshold=limit_s,
                   evidence=_no_hang_text(has_gauges, longest_s, limit_s, len(run.probes), len(streaming)) + out_of_reach,
                   details=details)


def _hang_text(stalls: list[Span], timeouts: list[Event], undrained: list, limit_s: float) -> str:
    parts = []
    if stalls:
        worst = max(stalls, key=lambda s: s.length_s)
        parts.append(f"requests were running but no token was generated for {worst.length_s:.0f} s "
                     f"from {duration_text(worst.start_s)} (limit {limit_s:.0f} s; "
                     f"{len(stalls)} such stall(s))")
    if timeouts:
        parts.append(f"{len(timeouts)} probe drain(s) timed out, first at {duration_text(timeouts[0].t_s)}")
    if undrained and not timeouts:
        parts.append(f"{len(undrained)} idle probe(s) did not drain, first at {duration_text(undrained[0].t_s)}")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def _frozen_text(frozen: list[Span]) -> str:
    if not frozen:
        return ""
    worst = max(frozen, key=lambda s: s.length_s)
    return (f"The server accepted connections but answered nothing for {worst.length_s:.0f} s from "
            f"{duration_text(worst.start_s)}, its process alive: frozen ({len(frozen)} such outage(s)).")


def _no_hang_text(has_gauges: bool, longest_s: float, limit_s: float, probes: int, streaming: int = 0) -> str:
    parts = []
    if has_gauges:
        parts.append(f"longest span with running requests and no new tokens was {longest_s:.0f} s "
                     f"(limit {limit_s:.0f} s)")
    if probes and streaming:
        parts.append(f"{streaming} of {probes} idle-probe drains timed out while tokens kept flowing (slow "
                     "requests still streaming, not a hang); the others finished")
    elif probes:
        parts.append(f"all {probes} idle-probe drains finished")
    text = "No hang: " + "; ".join(parts)
    return text + "."


def _deaths(run: RunData) -> list[Event]:
    """The crash events during the run, in time order (the conductor records one per server death)."""
    return sorted((e for e in run.events if e.kind == EventKind.CRASH and e.t_s <= run.actual_duration_s + 1e-9),
                  key=lambda e: e.t_s)


def health_gaps(server: ServerSeries | None, min_length_s: float) -> list[Span]:
    """Spans where /health kept failing for longer than min_length_s."""
    if server is None or server.health_ok is None:
        return []
    bad = np.isfinite(server.health_ok) & (server.health_ok < 0.5)
    gaps, start = [], None
    for i, is_bad in enumerate(np.append(bad, False)):
        if is_bad and start is None:
            start = i
        elif not is_bad and start is not None:
            end_i = min(i, len(server.t_s) - 1)
            span = Span(float(server.t_s[start]), float(server.t_s[end_i]))
            gaps += [span] if span.length_s > min_length_s else []
            start = None
    return gaps


def check_crashes(run: RunData, gates: Gates) -> Finding:
    deaths = _deaths(run)
    restarts = [e for e in run.events if e.kind == EventKind.RESTART]
    count = len(deaths) or len(restarts)
    has_health = run.server is not None and run.server.health_ok is not None
    watched = has_health or run.processes or any(e.kind in SERVER_EVENTS for e in run.events)
    if not watched:
        target = "External target" if not run.server_managed else "Embedded server"
        return skipped("crashes", f"{target} with no health checks, process samples or server "
                       "events: crashes could not be observed.")
    details = {"crashes": count, "restarts": len(restarts),
               "events": [_event_dict(e) for e in deaths or restarts]}
    if count:
        return Finding(check="crashes", verdict=FAIL, value=count, unit="crashes", threshold=0,
                       evidence=_crash_text(deaths or restarts, len(restarts)), details=details)
    # /health failing while the route to the server was lost says nothing of the server.
    gaps = [g for g in health_gaps(run.server, gates.hang.effective_after_s(run.planned_duration_s))
            if not in_network_outage(run, g.start_s, g.end_s)]
    if gaps:
        worst = max(gaps, key=lambda s: s.length_s)
        details["health_gaps"] = [{"start_s": g.start_s, "end_s": g.end_s} for g in gaps]
        return Finding(check="crashes", verdict=SUSPECT, value=0, unit="crashes", threshold=0,
                       evidence=(f"No exit seen, but /health failed for {worst.length_s:.0f} s from "
                                 f"{duration_text(worst.start_s)} ({len(gaps)} such gap(s))."),
                       details=details)
    if run.network_outages:
        details["network_outages"] = [{"start_s": a, "end_s": b} for a, b in run.network_outages]
    return Finding(check="crashes", verdict=PASS, value=0, unit="crashes", threshold=0,
                   evidence=f"No crash, exit or restart in {duration_text(run.actual_duration_s)}."
                   + network_outage_text(run), details=details)


def network_outage_text(run: RunData) -> str:
    """A sentence on the run's network outages: the server out of reach, not down (empty without one)."""
    if not run.network_outages:
        return ""
    longest = max(b - a for a, b in run.network_outages)
    first = run.network_outages[0][0]
    return (f" The route to the server was lost {len(run.network_outages)} time(s) (network outage, longest "
            f"{longest:.0f} s, first from {duration_text(first)}): the server was out of reach, which is not counted as "
            "down, and those windows are left out.")


def _crash_text(deaths: list[Event], restarts: int) -> str:
    last = deaths[-1]
    text = f"{len(deaths)} server death(s); last at {duration_text(last.t_s)}"
    code = last.data.get("exit_code", last.data.get("returncode"))
    if code is not None:
        text += f" with exit code {code}"
    if restarts:
        text += f"; {restarts} restart(s)"
    if last.message:
        text += f": {last.message}"
    tail = str(last.data.get("log_tail", "")).strip().splitlines()
    if tail:
        text += f"; log tail: …{tail[-1][-160:]}"
    return text + "."


def _event_dict(event: Event) -> dict:
    return {"t_s": event.t_s, "kind": event.kind, "message": event.message,
            "exit_code": event.data.get("exit_code", event.data.get("returncode")),
            "log_tail": event.data.get("log_tail")}
