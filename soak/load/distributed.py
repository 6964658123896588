"""The master's side of a run with load workers (local processes or `soak worker`s on other hosts).

The workers were gathered before the run opened (`soak.load.pool`). At the start of the load each gets the
run's spec and its share of the rate (1/total) and answers ready. The master runs the shape and the timeline;
each worker runs one dispatcher at its share with its own seed (worker index), which for Poisson arrivals adds
up exactly to the planned process. Gamma arrivals (burstiness ≠ 1) do not add up that way: then the master runs
the one clock and deals its intended times round-robin to the workers, 1.5 s ahead; so it does for a trace,
each time with the index of its row.

A worker lost mid-run (its process exits, it quits, or its heartbeat stops) is a `worker_lost` event; its share
moves to the remaining workers (`soak_share`, or simply fewer hands for dealt times). When none remains the load
has failed and the conductor ends the run. Messages:
  workers → master  soak_hello {pid, host, time}    soak_ready {} | soak_failed {error}
  master → workers  soak_spec {config, base_url, settings, share} | {reject}    soak_share {share}
                    soak_plan {segments, closed} or {times[, rows]}    soak_stop {drain_timeout_s}
  workers → master  soak_status {in_flight, schedule_t, health}  (every 0.2 s)
                    soak_stopped {records, health}   (after the drain at stop)
Records travel in Locust's periodic worker report (`report_to_master` → `worker_report`) as `soak_records`;
the master hands each to the hooks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import gevent
from locust.env import Environment

from soak.config import RunConfig
from soak.contracts import EventKind
from soak.errors import TargetError
from soak.load.backend import PLAN_MESSAGE, QueueSink
from soak.load.health import ClientHealth, LoadCounters
from soak.load.hooks import HookCaller
from soak.load.locust_stats import keep_stats_bounded
from soak.load.plan import ArrivalClock, GapSampler, RatePlan, arrival_rng
from soak.load.pool import SPEC_MESSAGE, Member, WorkerPool, gather_workers
from soak.load.records import RequestRecord
from soak.load.settings import ClientSettings
from soak.load.shape import LOOKAHEAD_S, LoadController, PhasePlan, SoakShape
from soak.load.trace import TraceClock, TraceSchedule, schedule_trace

log = logging.getLogger(__name__)

STATUS_MESSAGE, STOP_MESSAGE, STOPPED_MESSAGE = "soak_status", "soak_stop", "soak_stopped"
READY_MESSAGE, FAILED_MESSAGE, SHARE_MESSAGE = "soak_ready", "soak_failed", "soak_share"
RECORDS_KEY = "soak_records"
STATUS_EVERY_S = 0.2
READY_TIMEOUT_S = 60.0
STOP_MARGIN_S = 15.0
START_DELAY_S = 0.5
WATCH_EVERY_S = 0.5
POLL_S = 0.05


@dataclass
class WorkerStatuses:
    """The latest status of every worker, what the workers said when they stopped, and the last word of the lost."""

    latest: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopped: dict[str, dict[str, Any]] = field(default_factory=dict)
    lost: dict[str, dict[str, Any]] = field(default_factory=dict)
    seen_t: dict[str, float] = field(default_factory=dict)
    dismissed: set[str] = field(default_factory=set)

    def on_status(self, environment: Any, msg: Any, **_kw: Any) -> None:
        if msg.node_id in self.stopped:  # a status sent before its last word but read after it
            return
        if msg.node_id in self.lost:  # a lost worker came back: its share is gone, so it hands over and leaves
            if msg.node_id not in self.dismissed:
                self.dismissed.add(msg.node_id)
                environment.runner.send_message(SPEC_MESSAGE, {"reject": "it was declared lost (silent too long) "
                                                "and its share moved to the other workers"}, client_id=msg.node_id)
            return
        self.latest[msg.node_id] = msg.data
        self.seen_t[msg.node_id] = time.time()

    def forget(self, node_id: str) -> dict[str, Any]:
        """Set a lost worker aside (its counts still add up); its last status, if any."""
        last = self.latest.pop(node_id, None) or {}
        self.lost[node_id] = last
        return last

    def drain_state(self) -> tuple[int, float]:
        """(in flight over all workers, the earliest schedule position) — see LoadController."""
        if not self.latest:
            return 0, float("-inf")
        return (sum(int(s["in_flight"]) for s in self.latest.values()),
                min(float(s["schedule_t"]) for s in self.latest.values()))

    def health(self) -> ClientHealth:
        total = ClientHealth()
        for status in [*self.latest.values(), *self.stopped.values(), *self.lost.values()]:
            if "health" in status:
                total.merge(ClientHealth.from_wire(status["health"]))
        return total


@dataclass
class ReadyReplies:
    """What each worker answered to its spec: ready, or why it could not prepare the load."""

    ready: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)

    def on_ready(self, environment: Any, msg: Any, **_kw: Any) -> None:
        self.ready.add(msg.node_id)

    def on_failed(self, environment: Any, msg: Any, **_kw: Any) -> None:
        self.failed[msg.node_id] = str(msg.data.get("error", "unknown error"))


def deals_times(config: RunConfig) -> bool:
    """Whether the master deals intended times to the workers (non-Poisson arrivals, or a trace, over workers)."""
    load = config.load
    return load.worker_count > 0 and (load.trace is not None or load.burstiness not in (None, 1.0))


class Dealer:
    """One arrival clock for all workers; its intended times go round-robin, in worker-index order. With a
    trace the clock is the trace's, and each time goes with its row's index (every worker reads the trace)."""

    def __init__(self, phase_plan: PhasePlan, seed: int, burstiness: float | None,
                 members: Callable[[], list[Member]], trace: TraceSchedule | None = None) -> None:
        self.phase_plan = phase_plan
        self.plan = RatePlan()
        self.trace_clock = TraceClock(trace) if trace is not None else None
        self.clock = self.trace_clock or ArrivalClock(self.plan, GapSampler(arrival_rng(seed, 0, 0), burstiness))
        self.members = members
        self.dealt = 0

    def deal(self, runner: Any) -> None:
        """Send every intended time up to the look-ahead horizon (the plan is final that far)."""
        now = time.time()
        horizon_t = now + LOOKAHEAD_S
        self.plan.extend(self.phase_plan.segments(now, horizon_t))
        workers = [member.node_id for member in self.members()]
        if not workers:
            return
        slices: dict[str, list[float]] = {node_id: [] for node_id in workers}
        rows: dict[str, list[int]] = {node_id: [] for node_id in workers}
        while self.clock.peek() <= horizon_t:
            node_id = workers[self.dealt % len(workers)]
            slices[node_id].append(self.clock.take())
            if self.trace_clock is not None:
                rows[node_id].append(self.trace_clock.index)
            self.dealt += 1
        for client_id, times in slices.items():
            if times:
                message = {"times": times, "rows": rows[client_id]} if self.trace_clock else {"times": times}
                runner.send_message(PLAN_MESSAGE, message, client_id=client_id)


@dataclass
class DistributedBackend:
    """The master's side: shape and timeline here, dispatchers in the workers; watches for lost workers."""

    environment: Environment
    controller: LoadController
    statuses: WorkerStatuses
    pool: WorkerPool
    sink: QueueSink
    callers: HookCaller
    stats_trimmer: gevent.Greenlet
    failure: str | None = None  # set when no worker remains: the load cannot go on
    stopping: bool = False

    def in_flight(self) -> int:
        return self.statuses.drain_state()[0]

    def counters(self) -> LoadCounters:
        return replace(self.statuses.health().counters(self.in_flight()), workers=len(self.pool.members))

    def watch(self) -> None:
        """Every half second: a worker whose process, connection or heartbeat is gone is lost."""
        while not self.stopping:
            for member in self.pool.ordered():
                why = self.pool.gone(member)
                if why is not None and not self.stopping:
                    self._lose(member, why)
            gevent.sleep(WATCH_EVERY_S)

    def _lose(self, member: Member, why: str) -> None:
        """Record the loss and hand the lost share to the remaining workers (or fail the load if none remains)."""
        del self.pool.members[member.node_id]
        if member.node_id in self.statuses.stopped:  # a `soak worker` stopped by a signal drains and reports first
            why += " after handing over its last records"
        last = self.statuses.forget(member.node_id)
        remaining = self.pool.ordered()
        share = 1.0 / len(remaining) if remaining else 0.0
        for other in remaining:
            self.pool.runner.send_message(SHARE_MESSAGE, {"share": share}, client_id=other.node_id)
        if not remaining:
            self.failure = f"every load worker was lost (the last: {member.describe()}, {why})"
        seen_t = self.statuses.seen_t.get(member.node_id)
        data = {**member.as_data(), "why": why, "remaining": len(remaining), "share": share,
                "on_loss": "redistributed" if remaining else "run_ended",
                "in_flight": int(last.get("in_flight", 0)), "last_status_t": seen_t,
                "unseen_s": None if seen_t is None else round(time.time() - seen_t, 3)}
        self.callers.event(EventKind.WORKER_LOST, _lost_text(member, why, len(remaining)), data)

    def stop(self, drain_timeout_s: float) -> None:
        self.stopping = True
        runner = self.pool.runner
        runner.send_message(STOP_MESSAGE, {"drain_timeout_s": drain_timeout_s})
        deadline = time.monotonic() + drain_timeout_s + STOP_MARGIN_S
        while not self._all_stopped() and time.monotonic() < deadline:
            gevent.sleep(POLL_S)
        self.stats_trimmer.kill(block=False)
        self.pool.close()
        self.sink.flush()

    def _all_stopped(self) -> bool:
        return all(node_id in self.statuses.stopped or self.pool.gone(member) is not None
                   for node_id, member in self.pool.members.items())


def _lost_text(member: Member, why: str, remaining: int) -> str:
    if not remaining:
        return f"load {member.describe()} lost ({why}); no worker remains, so the run ends"
    return (f"load {member.describe()} lost ({why}); its share of the rate moved to the {remaining} remaining "
            f"worker{'s' if remaining > 1 else ''}")


def _deliver_records(sink: QueueSink, data: dict[str, Any]) -> None:
    for wire in data.get(RECORDS_KEY) or ():
        sink.put(RequestRecord.from_wire(wire))


def worker_view(config: RunConfig) -> str:
    """The config as a worker is sent it: without the database URL, which may hold a password (workers never
    write to the database, and anyone who can join the master can read what it sends)."""
    return config.model_copy(update={"db_url": ""}).model_dump_json()


def hand_out_specs(pool: WorkerPool, config: RunConfig, base_url: str, settings: ClientSettings) -> None:
    """Send every worker the run and its share; TargetError unless all answer ready in time."""
    pool.accepting = False
    replies = ReadyReplies()
    pool.runner.register_message(READY_MESSAGE, replies.on_ready)
    pool.runner.register_message(FAILED_MESSAGE, replies.on_failed)
    spec = {"config": worker_view(config), "base_url": base_url, "share": 1.0 / len(pool.members),
            "settings": {"model": settings.model, "max_model_len": settings.max_model_len}}
    for member in pool.ordered():
        pool.runner.send_message(SPEC_MESSAGE, spec, client_id=member.node_id)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while len(replies.ready) + len(replies.failed) < len(pool.members):
        gone = next((m for m in pool.ordered() if pool.gone(m) is not None), None)
        if gone is not None or time.monotonic() > deadline:
            late = gone or next(m for m in pool.ordered() if m.node_id not in replies.ready)
            raise TargetError(f"load {late.describe()} did not get ready for the run "
                              f"({pool.gone(late) or f'no answer in {READY_TIMEOUT_S:g}s'})")
        gevent.sleep(POLL_S)
    if replies.failed:
        node_id, error = next(iter(replies.failed.items()))
        raise TargetError(f"load {pool.members[node_id].describe()} could not prepare the run: {error}")


def start_distributed(config: RunConfig, base_url: str, t0: float, settings: ClientSettings,
                      callers: HookCaller, pool: WorkerPool | None = None) -> DistributedBackend:
    """Start the load on the gathered workers (gathering them now when `pool` is None); returns once it runs."""
    pool = pool or gather_workers(config, base_url)
    try:
        hand_out_specs(pool, config, base_url, settings)
    except BaseException as exc:
        pool.close(f"the run did not start: {exc}")
        raise
    runner, environment = pool.runner, pool.environment
    statuses, sink = WorkerStatuses(), QueueSink(callers.request)
    runner.register_message(STATUS_MESSAGE, statuses.on_status)
    runner.register_message(STOPPED_MESSAGE, lambda environment, msg, **_kw: _on_stopped(statuses, sink, msg))
    environment.events.worker_report.add_listener(lambda client_id, data, **_kw: _deliver_records(sink, data))
    callers.event(EventKind.WORKERS_JOINED, f"{len(pool.members)} load workers at {pool.address}: " +
                  ", ".join(member.describe() for member in pool.ordered()),
                  {"address": pool.address, "workers": [member.as_data() for member in pool.ordered()]})
    controller = _start_shape(config, t0, callers, pool, statuses)
    backend = DistributedBackend(environment, controller, statuses, pool, sink, callers,
                                 keep_stats_bounded(environment))
    gevent.spawn(backend.watch)
    return backend


def _start_shape(config: RunConfig, t0: float, callers: HookCaller, pool: WorkerPool,
                 statuses: WorkerStatuses) -> LoadController:
    runner = pool.runner
    dealer: list[Dealer] = []

    def publish(message: dict[str, Any]) -> None:
        runner.send_message(PLAN_MESSAGE, message)
        if dealer:
            dealer[0].deal(runner)

    begin_t = time.time() + START_DELAY_S
    trace = schedule_trace(config, t0, begin_t, callers)
    controller = LoadController(config, t0, begin_t, callers, send=publish, drain_state=statuses.drain_state)
    if deals_times(config):
        dealer.append(Dealer(controller.phase_plan, config.load.seed, config.load.burstiness, pool.ordered, trace))
    # Locust places one user per worker; on a worker the user does nothing (the dispatcher runs on its own from
    # the first plan), so Locust re-dealing users when a worker comes or goes changes nothing there.
    pool.environment.shape_class = SoakShape(controller, users=len(pool.members))
    pool.environment.shape_class.runner = runner
    controller.publish()
    runner.start_shape()
    controller.start()
    return controller


def _on_stopped(statuses: WorkerStatuses, sink: QueueSink, msg: Any) -> None:
    _deliver_records(sink, msg.data)
    statuses.stopped[msg.node_id] = msg.data
    statuses.latest.pop(msg.node_id, None)
    statuses.lost.pop(msg.node_id, None)  # a lost worker that came back: its final counts supersede its last status
