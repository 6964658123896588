"""The open-loop dispatcher: one per process, it sends on its own arrival clock and never waits for replies.

For every planned arrival it either skips it (inside a probe or outage window, counted) or picks a scenario
task by weight and runs it in a new greenlet of a group the dispatcher owns. An optional semaphore caps
concurrency; the wait on it is recorded as queue time and still counted in latency.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
from gevent.event import Event
from gevent.lock import BoundedSemaphore
from gevent.pool import Group
from locust.exception import RescheduleTask, StopUser

from soak.load.client import Arrival, set_arrival
from soak.load.health import ClientHealth, LoadCounters, LoopLagMonitor
from soak.load.plan import ArrivalClock, DealtClock, GapSampler, RatePlan, Segment, arrival_rng
from soak.load.records import CANCELLED, RequestRecord
from soak.load.scenarios import LoadedScenario, weighted_tasks
from soak.load.settings import ClientSettings
from soak.load.trace import TraceClock, TraceSchedule

log = logging.getLogger(__name__)

MAX_IDLE_WAIT_S = 5.0
# The loop's timers wake up to ~1 ms late (epoll waits in whole ms): launch that much early, and the client
# holds the send until the intended time itself (`soak.load.client.hold_until`), so lag is not the timer's slop.
LAUNCH_EARLY_S = 0.001
LOGGED_TASK_ERRORS = 5
KILL_WAIT_S = 5.0


class PlanBoard:
    """What the shape publishes to this process: rate segments (scaled to this process's share) and windows
    in which planned arrivals are skipped (idle probes, server outages)."""

    def __init__(self, share: float = 1.0) -> None:
        self.share = share
        self.plan = RatePlan()
        self.dealt = DealtClock()
        self.closed: list[tuple[float, float | None]] = []
        self._changed = Event()

    @property
    def changed(self) -> Event:
        """An event set at the next update; capture it before reading the plan, then wait on it."""
        return self._changed

    def update(self, message: dict[str, Any]) -> None:
        """Apply a published plan message: {"segments": [[start_t, rate_rps], …], "closed": [[start, end|None], …]},
        or dealt intended times {"times": […]} (with a trace, also the index of each one's row, {"rows": […]})."""
        segments = [Segment(float(s), float(r) * self.share) for s, r in message.get("segments", ())]
        self.plan.extend(segments)
        if "closed" in message:
            self.closed = [(float(s), None if e is None else float(e)) for s, e in message["closed"]]
        rows = message.get("rows")
        self.dealt.add([float(t) for t in message.get("times", ())], [int(k) for k in rows] if rows else None)
        self.poke()

    def poke(self) -> None:
        """Wake whoever waits for a change."""
        changed, self._changed = self._changed, Event()
        changed.set()

    def is_closed(self, t: float) -> bool:
        return any(start <= t and (end is None or t < end) for start, end in self.closed)


@dataclass
class DispatchSettings:
    """The per-process knobs of a dispatcher."""

    seed: int = 0
    worker_index: int = 0
    burstiness: float | None = None
    max_concurrency: int | None = None
    dealt: bool = False  # take intended times from the master instead of running a clock
    trace: TraceSchedule | None = None  # replay a trace's arrivals instead of the rate plan
    client: ClientSettings = ClientSettings()  # handed to every scenario instance


class Dispatcher:
    """Plans arrivals from the board's rate plan and launches scenario tasks on time, in its own group."""

    def __init__(self, environment: Any, scenarios: list[LoadedScenario], board: PlanBoard,
                 settings: DispatchSettings, sink: Callable[[RequestRecord], None]) -> None:
        self.environment = environment
        self.board = board
        self.sink = sink
        self.client_settings = settings.client
        gaps = GapSampler(arrival_rng(settings.seed, settings.worker_index, 0), settings.burstiness)
        self.clock = board.dealt if settings.dealt else ArrivalClock(board.plan, gaps)
        if settings.trace is not None:
            self.clock = TraceClock(settings.trace)
        self._choice_rng = random.Random(int(arrival_rng(settings.seed, settings.worker_index, 1).integers(2**63)))
        self.group = Group()
        self.semaphore = BoundedSemaphore(settings.max_concurrency) if settings.max_concurrency else None
        self.health = ClientHealth()
        self.in_flight = 0
        self.schedule_t = -math.inf
        self.task_errors = 0
        self._stopping = False
        self._running = False
        self._tasks = self._instantiate(scenarios)
        self._cumulative = list(itertools.accumulate(entry[3] for entry in self._tasks))

    def _instantiate(self, scenarios: list[LoadedScenario]) -> list[tuple[str, Any, Any, float]]:
        """One instance per scenario class in this process; each task keeps its combined weight."""
        instances: dict[type, Any] = {}
        tasks = []
        for name, cls, task, weight in weighted_tasks(scenarios):
            if cls not in instances:
                instances[cls] = cls(self.environment, self.client_settings)
                instances[cls].record_sink = self.sink
            tasks.append((name, instances[cls], task, weight))
        self.instances = list(instances.values())
        return tasks

    def retarget(self, base_url: str) -> None:
        """Every scenario instance sends to `base_url` from its next request on (the server moved)."""
        self.environment.host = base_url
        for instance in self.instances:
            instance.host = base_url
            retarget = getattr(instance.client, "retarget", None)  # a scenario's own client cannot be moved
            if retarget is not None:
                retarget(base_url)

    # -- the loop ---------------------------------------------------------------------------------------
    def run(self) -> None:
        """Dispatch until `stop_arrivals`; returns at once if another greenlet already runs it."""
        if self._running:
            return
        self._running = True
        self._start_instances()
        loop_lag = LoopLagMonitor(self.health).start()  # while arrivals run: start-up and the drain stay out
        try:
            self._dispatch()
        finally:
            loop_lag.stop()

    def _dispatch(self) -> None:
        while not self._stopping:
            intended_t = self._wait_next()
            if intended_t is None:
                break
            if self.board.is_closed(intended_t):
                self.health.skipped += 1
            else:
                self._launch(intended_t)

    def _start_instances(self) -> None:
        for instance in self.instances:
            try:
                instance.on_start()
            except Exception:  # a scenario's on_start must not stop the load
                log.exception("on_start of %s failed", type(instance).__name__)

    def _wait_next(self) -> float | None:
        """Sleep until the next intended time (recomputed whenever the plan changes) and consume it."""
        while not self._stopping:
            changed = self.board.changed
            intended_t = self.clock.peek()
            self.schedule_t = intended_t
            delay_s = intended_t - LAUNCH_EARLY_S - time.time()
            if delay_s <= 0:
                self.clock.take()
                return intended_t
            changed.wait(timeout=min(delay_s, MAX_IDLE_WAIT_S))
        return None

    def _launch(self, intended_t: float) -> None:
        index = bisect.bisect_right(self._cumulative, self._choice_rng.random() * self._cumulative[-1])
        scenario, instance, task, _ = self._tasks[min(index, len(self._tasks) - 1)]
        arrival = Arrival(scenario, intended_t, random.Random(self._choice_rng.getrandbits(64)),
                          on_first_send=self.health.record_lag, item=getattr(self.clock, "row", None))
        self.health.sends += 1
        self.in_flight += 1
        self.group.spawn(self._run_task, instance, task, arrival)

    def _run_task(self, instance: Any, task: Any, arrival: Arrival) -> None:
        """Run one task for one arrival; whatever it raises stays here."""
        acquired = False
        wait_start = time.time()
        try:
            if self.semaphore is not None:
                self.semaphore.acquire()
                acquired = True
                arrival.queue_ms = (time.time() - wait_start) * 1000.0
            set_arrival(arrival)
            task(instance)
        except gevent.GreenletExit:
            if not arrival.used:
                arrival.queue_ms = arrival.queue_ms or (time.time() - wait_start) * 1000.0
                self.sink(_cancelled_before_send(arrival))
        except (StopUser, RescheduleTask):
            pass
        except Exception:  # a broken scenario must not take the dispatcher down
            self._task_failed(arrival)
        finally:
            set_arrival(None)
            if acquired:
                self.semaphore.release()
            self.in_flight -= 1

    def _task_failed(self, arrival: Arrival) -> None:
        self.task_errors += 1
        if self.task_errors <= LOGGED_TASK_ERRORS:
            log.exception("scenario %s raised (the first %d are logged)", arrival.scenario, LOGGED_TASK_ERRORS)

    # -- stopping -----------------------------------------------------------------------------------------
    def stop_arrivals(self) -> None:
        self._stopping = True
        self.board.poke()

    def drain(self, timeout_s: float) -> int:
        """Wait up to `timeout_s` for in-flight tasks, then kill the rest (recorded as cancelled); how many."""
        self.group.join(timeout=max(timeout_s, 0.0))
        remaining = len(self.group)
        if remaining:
            self.group.kill(block=True, timeout=KILL_WAIT_S)
        return remaining

    def close(self) -> None:
        """Stop scenario instances and close their connection pools."""
        for instance in self.instances:
            try:
                instance.on_stop()
            except Exception:
                log.exception("on_stop of %s failed", type(instance).__name__)
            instance.http.client.close()

    def counters(self) -> LoadCounters:
        return self.health.counters(self.in_flight)


def _cancelled_before_send(arrival: Arrival) -> RequestRecord:
    """A record for an arrival killed at stop while still queued on the concurrency cap."""
    now = time.time()
    return RequestRecord(scenario=arrival.scenario, kind="chat", intended_t=arrival.intended_t, sent_t=now,
                         first_token_t=None, finish_t=now, ttft_ms=None,
                         e2e_ms=(now - arrival.intended_t) * 1000.0, itl_ms=(), queue_ms=arrival.queue_ms,
                         lag_ms=0.0, output_tokens=0, prompt_tokens=None, error_class=CANCELLED,
                         error_message="cancelled at stop before sending")
