"""Phases as a Locust LoadTestShape, and the master-side timeline: phase events, idle probes, outages.

The schedule is warm-up (steady at the first phase's starting rate), then the configured phases in order,
the last one lasting to the end of the run; no phases means steady at `load.rate_rps`. Ramps and waves are
cut into short constant-rate segments (1 s for ramps, period/32 for waves, rate at each step's midpoint).
`tick()` publishes the segment in force plus any starting within 1.5 s, with absolute start times, and keeps
one dispatcher user per process. Skip windows (probes, pauses) travel in the same message.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import gevent
from locust import LoadTestShape

from soak.config import PhaseSpec, RunConfig
from soak.contracts import EventKind
from soak.errors import ConfigError
from soak.load.hooks import HookCaller
from soak.load.plan import Segment
from soak.load.trace import load_trace

log = logging.getLogger(__name__)

LOOKAHEAD_S = 1.5
RAMP_STEP_S = 1.0
WAVE_STEPS_PER_PERIOD = 32
DRAIN_POLL_S = 0.02
KEEP_CLOSED_S = 300.0
HOOK_FINISH_S = 30.0


@dataclass(frozen=True)
class Phase:
    """One stretch of the schedule in absolute wall time; `index` is the position in `load.phases`."""

    index: int | None
    name: str
    kind: str
    start_t: float
    end_t: float
    rate_rps: float
    to_rate_rps: float
    ramp_s: float
    period_s: float
    amplitude: float
    factor: float
    burst_s: float

    def rate_at(self, t: float) -> float:
        """The continuous planned rate at t (segments approximate ramps and waves by it)."""
        offset = t - self.start_t
        if self.kind == "ramp":
            fraction = min(max(offset / self.ramp_s, 0.0), 1.0) if self.ramp_s > 0 else 1.0
            return self.rate_rps + (self.to_rate_rps - self.rate_rps) * fraction
        if self.kind == "wave":
            return max(self.rate_rps * (1 + self.amplitude * math.sin(2 * math.pi * offset / self.period_s)), 0.0)
        if self.kind == "burst":
            return self.rate_rps * self.factor if offset % self.period_s < self.burst_s else self.rate_rps
        return self.rate_rps

    def segments(self, a: float, b: float) -> list[Segment]:
        """The constant-rate segments of this phase that overlap [a, b)."""
        a, b = max(a, self.start_t), min(b, self.end_t)
        if a >= b:
            return []
        if self.kind == "ramp":
            return list(self._ramp_segments(a, b))
        if self.kind == "wave":
            return list(_stepped(self.start_t, self.end_t, a, b, self.period_s / WAVE_STEPS_PER_PERIOD, self.rate_at))
        if self.kind == "burst":
            return list(self._burst_segments(a, b))
        return [Segment(self.start_t, self.rate_rps)]

    def _ramp_segments(self, a: float, b: float) -> Iterator[Segment]:
        ramp_end_t = min(self.start_t + self.ramp_s, self.end_t)
        if a < ramp_end_t:
            yield from _stepped(self.start_t, ramp_end_t, a, min(b, ramp_end_t), RAMP_STEP_S, self.rate_at)
        if b > ramp_end_t and ramp_end_t < self.end_t:
            yield Segment(ramp_end_t, self.to_rate_rps)

    def _burst_segments(self, a: float, b: float) -> Iterator[Segment]:
        cycle = math.floor((a - self.start_t) / self.period_s)
        while (cycle_t := self.start_t + cycle * self.period_s) < min(b, self.end_t):
            burst_end_t = cycle_t + self.burst_s
            if burst_end_t > a:
                yield Segment(cycle_t, self.rate_rps * self.factor)
            if burst_end_t < min(b, self.end_t):
                yield Segment(burst_end_t, self.rate_rps)
            cycle += 1

    def describe(self) -> dict[str, Any]:
        """The data of this phase's `phase` event."""
        data = asdict(self)
        data["phase_kind"] = data.pop("kind")  # `kind` already names the event itself
        data["end_t"] = None if math.isinf(self.end_t) else self.end_t
        return data


def _stepped(start_t: float, end_t: float, a: float, b: float, step_s: float,
             rate_at: Callable[[float], float]) -> Iterator[Segment]:
    """Steps of `step_s` from `start_t` (aligned, so every process cuts the same), rate at each midpoint."""
    k = max(math.floor((a - start_t) / step_s), 0)
    while (seg_start := start_t + k * step_s) < min(b, end_t):
        seg_end = min(seg_start + step_s, end_t)
        yield Segment(seg_start, rate_at((seg_start + seg_end) / 2))
        k += 1
        if seg_end >= end_t:
            return


def _phase_from_spec(index: int, spec: PhaseSpec, start_t: float, end_t: float, default_rate: float) -> Phase:
    rate = spec.rate_rps if spec.rate_rps is not None else default_rate
    if spec.kind == "ramp" and spec.to_rate_rps is None:
        raise ConfigError(f"phase {index + 1} (ramp) needs to_rate_rps")
    if spec.kind in ("wave", "burst") and spec.period_s is None:
        raise ConfigError(f"phase {index + 1} ({spec.kind}) needs period_s")
    if spec.kind == "burst" and spec.burst_s >= spec.period_s:
        raise ConfigError(f"phase {index + 1} (burst): burst_s must be shorter than period_s")
    return Phase(index=index, name=spec.kind, kind=spec.kind, start_t=start_t, end_t=end_t, rate_rps=rate,
                 to_rate_rps=spec.to_rate_rps if spec.to_rate_rps is not None else rate,
                 ramp_s=spec.duration_s if spec.duration_s is not None else end_t - start_t,
                 period_s=spec.period_s or 0.0, amplitude=spec.amplitude, factor=spec.factor, burst_s=spec.burst_s)


def _default_rate(config: RunConfig) -> float:
    """--rate; with --trace, the rate the trace is replayed at (its arrivals come from the trace itself)."""
    load = config.load
    if load.trace is None:
        return load.rate_rps
    return load_trace(load.trace, load.trace_format).mean_rate_rps * load.trace_speed


def build_phases(config: RunConfig, t0: float) -> list[Phase]:
    """Warm-up plus the configured phases, in absolute time; the last phase runs to the end of the run."""
    load = config.load
    specs = load.phases or (PhaseSpec(kind="steady"),)
    run_end_t = t0 + config.duration_s
    start_t = t0 + config.warmup_s
    phases = []
    for index, spec in enumerate(specs):
        last = index == len(specs) - 1
        if not last and spec.duration_s is None:
            raise ConfigError(f"phase {index + 1} ({spec.kind}) needs a duration: "
                              "only the last phase may run to the end")
        end_t = run_end_t if last else min(start_t + spec.duration_s, run_end_t)
        if start_t < run_end_t:
            phases.append(_phase_from_spec(index, spec, start_t, end_t, _default_rate(config)))
        start_t = end_t
    if config.warmup_s > 0:
        first = phases[0]
        phases.insert(0, Phase(None, "warmup", "steady", t0, t0 + config.warmup_s, first.rate_rps, first.rate_rps,
                               0.0, 0.0, 0.0, 1.0, 0.0))
    return phases


class PhasePlan:
    """The run's rate plan as a function of time: nothing before `begin_t` or after the run's end."""

    def __init__(self, phases: list[Phase], t0: float, begin_t: float, end_t: float) -> None:
        self.phases = phases
        self.t0 = t0
        self.begin_t = max(begin_t, t0)
        self.end_t = end_t

    def segments(self, a: float, b: float) -> list[Segment]:
        """Segments covering [a, b): the one in force at a, and every one starting before b."""
        out: list[Segment] = []
        if a < self.begin_t:
            out.append(Segment(self.t0, 0.0))
        for phase in self.phases:
            for segment in phase.segments(max(a, self.begin_t), min(b, self.end_t)):
                out.append(Segment(max(segment.start_t, self.begin_t), segment.rate_rps))
        if b > self.end_t:
            out.append(Segment(self.end_t, 0.0))
        return _dedupe(out)

    def phase_at(self, t: float) -> Phase | None:
        return next((p for p in self.phases if p.start_t <= t < p.end_t), None)


def _dedupe(segments: list[Segment]) -> list[Segment]:
    """Keep one segment per start time (the later one wins), in order."""
    by_start = {segment.start_t: segment for segment in segments}
    return [by_start[start] for start in sorted(by_start)]


class LoadController:
    """The master's timeline: publishes the plan, announces phases, runs idle probes, pauses for outages.

    `send(message)` delivers a plan message to every dispatcher; `drain_state()` returns (in_flight,
    schedule_t) over all of them, schedule_t being the time before which every arrival has been handled.
    """

    def __init__(self, config: RunConfig, t0: float, begin_t: float, hooks: HookCaller,
                 send: Callable[[dict[str, Any]], None], drain_state: Callable[[], tuple[int, float]]) -> None:
        self.config = config
        self.t0 = t0
        self.phase_plan = PhasePlan(build_phases(config, t0), t0, begin_t, t0 + config.duration_s)
        self.hooks = hooks
        self._send = send
        self._drain_state = drain_state
        self.closed: list[list[float | None]] = []
        self._pause: list[float | None] | None = None
        self._greenlets: list[gevent.Greenlet] = []
        self._in_hook = False
        self.probes_done = 0

    def publish(self) -> None:
        """Send the segments in force and starting within the look-ahead, plus the skip windows."""
        now = time.time()
        self.closed = [w for w in self.closed if w[1] is None or w[1] > now - KEEP_CLOSED_S]
        segments = self.phase_plan.segments(now, now + LOOKAHEAD_S)
        self._send({"segments": [[s.start_t, s.rate_rps] for s in segments], "closed": [list(w) for w in self.closed]})

    def start(self) -> None:
        self._greenlets = [gevent.spawn(self._announce_phases), gevent.spawn(self._run_probes)]

    def stop(self) -> None:
        """End the timeline; a probe hook in progress may finish (the conductor is sampling)."""
        if self._in_hook and len(self._greenlets) > 1:
            self._greenlets[1].join(timeout=HOOK_FINISH_S)
        for greenlet in self._greenlets:
            greenlet.kill(block=True, timeout=5.0)

    # -- outages ----------------------------------------------------------------------------------------
    def pause(self) -> None:
        """Skip planned arrivals from now on (server outage), until `resume`."""
        if self._pause is not None:
            return
        self._pause = [time.time(), None]
        self.closed.append(self._pause)
        self.publish()
        self.hooks.event(EventKind.LOAD_PAUSED, "arrivals paused", {"t": self._pause[0]})

    def resume(self) -> None:
        if self._pause is None:
            return
        self._pause[1] = time.time()
        paused_s = self._pause[1] - self._pause[0]
        self._pause = None
        self.publish()
        self.hooks.event(EventKind.LOAD_RESUMED, f"arrivals resumed after {paused_s:.1f}s", {"paused_s": paused_s})

    # -- phases -----------------------------------------------------------------------------------------
    def _announce_phases(self) -> None:
        warmup_end_t = self.t0 + self.config.warmup_s
        marks = [(p.start_t, "phase", p) for p in self.phase_plan.phases] + [(warmup_end_t, "warmup_end", None)]
        for at_t, kind, phase in sorted(marks, key=lambda m: (m[0], m[1] != "warmup_end")):
            _sleep_until(at_t)
            if kind == "warmup_end":
                self.hooks.event(EventKind.WARMUP_END, "warm-up over", {"t": warmup_end_t})
            else:
                self.hooks.event(EventKind.PHASE, f"phase {phase.name} at {phase.rate_rps:g} req/s", phase.describe())

    # -- idle probes ------------------------------------------------------------------------------------
    def _run_probes(self) -> None:
        every_s = self.config.probe_every_s
        if not every_s:
            return
        hold_s = self.config.probe_hold_s
        start_t = self.t0 + self.config.warmup_s + every_s
        index = 0
        while start_t + hold_s < self.phase_plan.end_t:
            end_t = self._probe(index, start_t, hold_s)
            index += 1
            start_t = max(start_t + every_s, end_t + every_s / 2)

    def _probe(self, index: int, start_t: float, hold_s: float) -> float:
        """Close arrivals at start_t (published ahead), drain, hold, call the hook, reopen; returns the end."""
        _sleep_until(start_t - LOOKAHEAD_S)
        window: list[float | None] = [start_t, None]
        self.closed.append(window)
        self.publish()
        _sleep_until(start_t)
        self.hooks.event(EventKind.PROBE_START, f"idle probe {index}: arrivals stopped", {"index": index, "t": start_t})
        drained, drain_s, in_flight = self._wait_drained(start_t)
        if drained:
            self.hooks.event(EventKind.PROBE_DRAINED, f"idle probe {index}: drained in {drain_s:.2f}s",
                             {"index": index, "drain_s": drain_s})
        else:
            self.hooks.event(EventKind.PROBE_DRAIN_TIMEOUT, f"idle probe {index}: {in_flight} still in flight after "
                             f"{drain_s:.1f}s", {"index": index, "drain_s": drain_s, "in_flight": in_flight})
        gevent.sleep(hold_s)
        self._in_hook = True
        try:
            self.hooks.idle_probe(index, drained)
        finally:
            self._in_hook = False
        window[1] = time.time()
        self.publish()
        self.probes_done += 1
        self.hooks.event(EventKind.PROBE_END, f"idle probe {index}: arrivals resumed",
                         {"index": index, "drained": drained, "hold_s": hold_s, "duration_s": window[1] - start_t})
        return window[1]

    def _wait_drained(self, start_t: float) -> tuple[bool, float, int]:
        deadline_t = start_t + self.hooks.drain_timeout_s(self.config.probe_drain_timeout_s)
        while True:
            in_flight, schedule_t = self._drain_state()
            now = time.time()
            if in_flight == 0 and schedule_t >= start_t:
                return True, now - start_t, 0
            if now >= deadline_t:
                return False, now - start_t, in_flight
            gevent.sleep(DRAIN_POLL_S)


def _sleep_until(wall_t: float) -> None:
    delay_s = wall_t - time.time()
    if delay_s > 0:
        gevent.sleep(delay_s)


class SoakShape(LoadTestShape):
    """Publishes the plan on every tick (about once a second) and keeps one dispatcher user per process."""

    def __init__(self, controller: LoadController, users: int = 1) -> None:
        super().__init__()
        self.controller = controller
        self.users = users

    def tick(self) -> tuple[int, float]:
        self.controller.publish()
        return self.users, float(self.users)
