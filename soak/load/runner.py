"""`start_load`: the one entry point of the load stage, and the `LoadHandle` the conductor drives.

Without load workers everything runs in this process with Locust's local runner; with them (`load.workers`
local processes, `load.expect_workers` on other hosts) a master runs here and the workers gathered by
`soak.load.pool.gather_workers` send the requests (see `soak.load.distributed`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Protocol

import gevent
from locust.env import Environment

from soak.config import RunConfig
from soak.contracts import EventKind
from soak.errors import TargetError
from soak.load.backend import (
    PLAN_MESSAGE,
    QueueSink,
    api_key_from,
    dispatch_settings,
    dispatcher_user_class,
    make_client_settings,
    raise_fd_limit,
    settle_heap,
)
from soak.load.context import resolve_context
from soak.load.dispatcher import Dispatcher, PlanBoard
from soak.load.distributed import start_distributed
from soak.load.health import LoadCounters
from soak.load.hooks import HookCaller, LoadHooks
from soak.load.locust_stats import keep_stats_bounded
from soak.load.lora import check_lora
from soak.load.pool import WorkerPool
from soak.load.scenarios import LoadedScenario, check_dataset, effective_specs, load_scenarios
from soak.load.settings import ClientSettings
from soak.load.shape import LoadController, PhasePlan, SoakShape, build_phases
from soak.load.trace import load_trace, schedule_trace

log = logging.getLogger(__name__)

START_DELAY_S = 0.2


def client_settings(config: RunConfig, base_url: str, model: str, callers: HookCaller) -> ClientSettings:
    """What every scenario instance needs, including the context length (recorded as a `context_length` event)."""
    context = resolve_context(base_url, model, api_key_from(config), config.load.max_context)
    callers.event(EventKind.CONTEXT_LENGTH, context.describe(),
                  {"tokens": context.tokens, "source": context.source, "stated": context.stated})
    return make_client_settings(config, model, context.tokens)


class _Backend(Protocol):
    controller: LoadController
    environment: Environment

    def in_flight(self) -> int: ...
    def counters(self) -> LoadCounters: ...
    def stop(self, drain_timeout_s: float) -> None: ...


class LoadHandle:
    """What the conductor holds while load runs: stop, pause/resume (outages), in-flight count, counters."""

    def __init__(self, backend: _Backend) -> None:
        self._backend = backend
        self.stopped = False

    @property
    def environment(self) -> Environment:
        """The (master's) Locust environment, for its statistics."""
        return self._backend.environment

    @property
    def phase_plan(self) -> PhasePlan:
        """The rate plan in absolute time: its phases, `begin_t` (first possible arrival) and `end_t`."""
        return self._backend.controller.phase_plan

    @property
    def in_flight(self) -> int:
        """Requests started and not yet finished, over all processes."""
        return self._backend.in_flight()

    @property
    def failure(self) -> str | None:
        """Why the load cannot go on (every load worker was lost), or None while it runs."""
        return getattr(self._backend, "failure", None)

    def counters(self) -> LoadCounters:
        """Sends, skips, schedule and loop lag, requests in flight and idle probes so far."""
        return dataclasses.replace(self._backend.counters(), probes=self._backend.controller.probes_done)

    def retarget(self, base_url: str) -> None:
        """Send every request from now on to `base_url` (the server moved: a replaced pod); those in flight end
        where they are. In-process load only: a fleet's replicas, which can move, have no load workers."""
        dispatcher = getattr(self._backend, "dispatcher", None)
        if dispatcher is None:
            raise TargetError("the load workers cannot follow the server to a new address")
        dispatcher.retarget(base_url)

    def pause(self) -> None:
        """Server outage: planned arrivals from now on are skipped (and counted) until `resume`."""
        self._backend.controller.pause()

    def resume(self) -> None:
        self._backend.controller.resume()

    def stop(self, drain_timeout_s: float) -> None:
        """Stop arrivals, let in-flight requests finish for up to `drain_timeout_s`, cancel the rest."""
        if self.stopped:
            return
        self.stopped = True
        self._backend.controller.stop()
        self._backend.stop(drain_timeout_s)

    def wait(self, seconds: float) -> None:
        """Sleep cooperatively (the load keeps running)."""
        gevent.sleep(seconds)


class NoLoad:
    """The load of a run that sends none (a replica observed behind a --router): nothing in flight, no counters,
    pausing and stopping do nothing."""

    stopped = False
    failure: str | None = None
    in_flight = 0

    def counters(self) -> LoadCounters:
        return LoadCounters()

    def pause(self) -> None:
        """Nothing to pause."""

    def resume(self) -> None:
        """Nothing to resume."""

    def stop(self, drain_timeout_s: float) -> None:
        self.stopped = True


@dataclass
class LocalBackend:
    """Everything in this process: Locust's local runner, one dispatcher, records straight to the hooks."""

    environment: Environment
    controller: LoadController
    dispatcher: Dispatcher
    sink: QueueSink
    stats_trimmer: gevent.Greenlet

    def in_flight(self) -> int:
        return self.dispatcher.in_flight

    def counters(self) -> LoadCounters:
        return dataclasses.replace(self.dispatcher.counters(), task_errors=self.dispatcher.task_errors)

    def stop(self, drain_timeout_s: float) -> None:
        self.dispatcher.stop_arrivals()
        cancelled = self.dispatcher.drain(drain_timeout_s)
        self.sink.flush()
        self.environment.runner.quit()
        self.stats_trimmer.kill(block=False)
        self.dispatcher.close()
        log.info("load stopped: %s (%d cancelled at stop)", self.dispatcher.counters(), cancelled)


def check_load(config: RunConfig, t0: float | None = None) -> list[LoadedScenario]:
    """Read what the load needs from files and the config — scenarios, the dataset, the trace, the phases — so
    a bad one is a ConfigError before anything starts (the conductor asks before it starts the server; each
    is read once a process)."""
    specs = effective_specs(config.load)
    scenarios = load_scenarios(specs)
    check_dataset(specs, config.load.dataset)
    check_lora([spec.name for spec in specs], config.load)
    if config.load.trace is not None:
        load_trace(config.load.trace, config.load.trace_format)
    build_phases(config, time.time() if t0 is None else t0)
    return scenarios


def start_load(config: RunConfig, base_url: str, model: str, t0: float, hooks: LoadHooks | None = None,
               workers: WorkerPool | None = None) -> LoadHandle:
    """Start open-loop load against `base_url` on the plan of `config`, measured from wall time `t0`, on the
    load workers already gathered (`workers`; gathered here when the config has some and none are given).

    Raises ConfigError (before any request) for unknown scenarios, a missing dataset, a bad trace or bad phases;
    TargetError when load workers do not join or cannot prepare the run.
    """
    scenarios = check_load(config, t0)
    callers = HookCaller(hooks)
    settings = client_settings(config, base_url, model, callers)
    raise_fd_limit()
    settle_heap()
    if config.load.worker_count > 0:
        return LoadHandle(start_distributed(config, base_url, t0, settings, callers, workers))
    return LoadHandle(_start_local(config, base_url, t0, settings, scenarios, callers))


def _start_local(config: RunConfig, base_url: str, t0: float, settings: ClientSettings,
                 scenarios: list[LoadedScenario], callers: HookCaller) -> LocalBackend:
    board = PlanBoard()
    sink = QueueSink(callers.request)
    holder: dict[str, Dispatcher] = {}
    environment = Environment(user_classes=[dispatcher_user_class(lambda _env: holder["dispatcher"])],
                              host=base_url, stop_timeout=config.load.request_timeout_s)
    begin_t = time.time() + START_DELAY_S
    dispatch = dataclasses.replace(dispatch_settings(config, settings), trace=schedule_trace(config, t0, begin_t, callers))
    dispatcher = holder["dispatcher"] = Dispatcher(environment, scenarios, board, dispatch, sink.put)
    controller = LoadController(
        config, t0, begin_t, callers,
        send=lambda message: environment.runner.send_message(PLAN_MESSAGE, message),
        drain_state=lambda: (dispatcher.in_flight, dispatcher.schedule_t))
    environment.shape_class = SoakShape(controller, users=1)
    runner = environment.create_local_runner()
    runner.register_message(PLAN_MESSAGE, lambda environment, msg, **_kw: board.update(msg.data))
    controller.publish()
    runner.start_shape()
    controller.start()
    return LocalBackend(environment, controller, dispatcher, sink, keep_stats_bounded(environment))

