"""Master + N local worker processes (`load.workers = N`).

The master (this process) runs the shape and the timeline; each worker runs one dispatcher at rate/N with
its own seed (worker index), which for Poisson arrivals adds up exactly to the planned process. Gamma
arrivals (burstiness ≠ 1) do not add up that way: then the master runs the one clock and deals its
intended times round-robin to the workers, 1.5 s ahead. Messages:
  master → workers  soak_plan {segments, closed} or {times}    soak_stop {drain_timeout_s}
  workers → master  soak_status {in_flight, schedule_t, health}  (every 0.2 s)
                    soak_stopped {records, health}   (after the drain at stop)
Records travel in Locust's periodic worker report (`report_to_master` → `worker_report`) as `soak_records`;
the master hands each to the hooks.
"""

from __future__ import annotations

import atexit
import json
import logging
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment

from soak.config import RunConfig
from soak.errors import TargetError
from soak.load.backend import PLAN_MESSAGE, QueueSink, dispatcher_user_class
from soak.load.health import ClientHealth
from soak.load.hooks import HookCaller
from soak.load.locust_stats import keep_stats_bounded
from soak.load.plan import ArrivalClock, GapSampler, RatePlan, arrival_rng
from soak.load.records import RequestRecord
from soak.load.settings import ClientSettings
from soak.load.shape import LOOKAHEAD_S, LoadController, PhasePlan, SoakShape

log = logging.getLogger(__name__)

STATUS_MESSAGE, STOP_MESSAGE, STOPPED_MESSAGE = "soak_status", "soak_stop", "soak_stopped"
RECORDS_KEY = "soak_records"
STATUS_EVERY_S = 0.2
CONNECT_TIMEOUT_S = 60.0
STOP_MARGIN_S = 15.0
EXIT_WAIT_S = 10.0
START_DELAY_S = 0.5


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class WorkerStatuses:
    """The latest status of every worker, and what the workers said when they stopped."""

    latest: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopped: dict[str, dict[str, Any]] = field(default_factory=dict)

    def on_status(self, environment: Any, msg: Any, **_kw: Any) -> None:
        self.latest[msg.node_id] = msg.data

    def drain_state(self) -> tuple[int, float]:
        """(in flight over all workers, the earliest schedule position) — see LoadController."""
        if not self.latest:
            return 0, float("-inf")
        return (sum(int(s["in_flight"]) for s in self.latest.values()),
                min(float(s["schedule_t"]) for s in self.latest.values()))

    def health(self) -> ClientHealth:
        total = ClientHealth()
        for status in {**self.latest, **self.stopped}.values():
            total.merge(ClientHealth.from_wire(status["health"]))
        return total


def deals_times(config: RunConfig) -> bool:
    """Whether the master deals intended times to the workers (non-Poisson arrivals over several workers)."""
    return config.load.workers > 0 and config.load.burstiness not in (None, 1.0)


class Dealer:
    """One arrival clock for all workers; its intended times go round-robin, in worker-index order."""

    def __init__(self, phase_plan: PhasePlan, seed: int, burstiness: float | None) -> None:
        self.phase_plan = phase_plan
        self.plan = RatePlan()
        self.clock = ArrivalClock(self.plan, GapSampler(arrival_rng(seed, 0, 0), burstiness))
        self.dealt = 0

    def deal(self, runner: Any) -> None:
        """Send every intended time up to the look-ahead horizon (the plan is final that far)."""
        now = time.time()
        horizon_t = now + LOOKAHEAD_S
        self.plan.extend(self.phase_plan.segments(now, horizon_t))
        workers = sorted(runner.clients.all, key=lambda node: runner.get_worker_index(node.id))
        if not workers:
            return
        slices: dict[str, list[float]] = {node.id: [] for node in workers}
        while self.clock.peek() <= horizon_t:
            slices[workers[self.dealt % len(workers)].id].append(self.clock.take())
            self.dealt += 1
        for client_id, times in slices.items():
            if times:
                runner.send_message(PLAN_MESSAGE, {"times": times}, client_id=client_id)


def _write_spec(config: RunConfig, settings: ClientSettings, base_url: str, t0: float, port: int) -> Path:
    """The worker's instructions, in a private temp file (the API key stays in the environment)."""
    spec = {"config": config.model_dump_json(), "base_url": base_url, "t0": t0, "master_port": port,
            "workers": config.load.workers,
            "settings": {"model": settings.model, "max_model_len": settings.max_model_len}}
    handle = tempfile.NamedTemporaryFile("w", prefix="soak-worker-", suffix=".json", delete=False)
    with handle:
        json.dump(spec, handle)
    return Path(handle.name)


@dataclass(frozen=True)
class SpawnedWorker:
    """One spawned worker and the file its stderr goes to."""

    popen: subprocess.Popen
    log_path: Path

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-600:]
        except OSError:
            return ""


def _spawn_workers(count: int, spec_path: Path) -> list[SpawnedWorker]:
    workers = []
    for index in range(count):
        with tempfile.NamedTemporaryFile(prefix=f"soak-worker-{index}-", suffix=".log", delete=False) as log_file:
            popen = subprocess.Popen([sys.executable, "-m", "soak.load.worker", str(spec_path)],
                                     stdout=subprocess.DEVNULL, stderr=log_file)
        workers.append(SpawnedWorker(popen, Path(log_file.name)))
    atexit.register(_kill_all, workers)
    return workers


def _kill_all(workers: list[SpawnedWorker]) -> None:
    for worker in workers:
        if worker.popen.poll() is None:
            worker.popen.kill()


def _wait_for_workers(runner: Any, workers: list[SpawnedWorker], count: int) -> None:
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while runner.worker_count < count:
        dead = [w for w in workers if w.popen.poll() is not None]
        if dead or time.monotonic() > deadline:
            _kill_all(workers)
            tail = dead[0].log_tail() if dead else ""
            raise TargetError(f"load workers did not start ({runner.worker_count}/{count} connected): {tail}")
        gevent.sleep(0.05)


@dataclass
class DistributedBackend:
    """The master's side: shape and timeline here, dispatchers in the worker processes."""

    environment: Environment
    controller: LoadController
    statuses: WorkerStatuses
    workers: list[SpawnedWorker]
    sink: QueueSink
    spec_path: Path
    stats_trimmer: gevent.Greenlet

    def in_flight(self) -> int:
        return self.statuses.drain_state()[0]

    def counters(self) -> dict[str, Any]:
        return {**self.statuses.health().counters(self.in_flight()), "workers": len(self.workers)}

    def stop(self, drain_timeout_s: float) -> None:
        runner = self.environment.runner
        runner.send_message(STOP_MESSAGE, {"drain_timeout_s": drain_timeout_s})
        deadline = time.monotonic() + drain_timeout_s + STOP_MARGIN_S
        while len(self.statuses.stopped) < runner.worker_count and time.monotonic() < deadline:
            gevent.sleep(0.05)
        runner.quit()
        self.stats_trimmer.kill(block=False)
        self.sink.flush()
        self._reap()

    def _reap(self) -> None:
        deadline = time.monotonic() + EXIT_WAIT_S
        while any(w.popen.poll() is None for w in self.workers) and time.monotonic() < deadline:
            gevent.sleep(0.05)
        _kill_all(self.workers)
        self.spec_path.unlink(missing_ok=True)
        for worker in self.workers:
            worker.log_path.unlink(missing_ok=True)


def _deliver_records(sink: QueueSink, data: dict[str, Any]) -> None:
    for wire in data.get(RECORDS_KEY) or ():
        sink.put(RequestRecord.from_wire(wire))


def start_distributed(config: RunConfig, base_url: str, t0: float, settings: ClientSettings,
                      callers: HookCaller) -> DistributedBackend:
    """Start a master here and `config.load.workers` worker processes; returns once all are connected."""
    count = config.load.workers
    statuses, sink, port = WorkerStatuses(), QueueSink(callers.request), free_port()
    environment = Environment(user_classes=[dispatcher_user_class(lambda _env: None)], host=base_url,
                              stop_timeout=config.load.request_timeout_s)
    runner = environment.create_master_runner("127.0.0.1", port)
    runner.register_message(STATUS_MESSAGE, statuses.on_status)
    runner.register_message(STOPPED_MESSAGE, lambda environment, msg, **_kw: _on_stopped(statuses, sink, msg))
    environment.events.worker_report.add_listener(lambda client_id, data, **_kw: _deliver_records(sink, data))
    spec_path = _write_spec(config, settings, base_url, t0, port)
    workers = _spawn_workers(count, spec_path)
    _wait_for_workers(runner, workers, count)
    dealer: list[Dealer] = []

    def publish(message: dict[str, Any]) -> None:
        runner.send_message(PLAN_MESSAGE, message)
        if dealer:
            dealer[0].deal(runner)

    controller = LoadController(config, t0, time.time() + START_DELAY_S, callers, send=publish,
                                drain_state=statuses.drain_state)
    if deals_times(config):
        dealer.append(Dealer(controller.phase_plan, config.load.seed, config.load.burstiness))
    environment.shape_class = SoakShape(controller, users=count)
    environment.shape_class.runner = runner
    controller.publish()
    runner.start_shape()
    controller.start()
    return DistributedBackend(environment, controller, statuses, workers, sink, spec_path,
                              keep_stats_bounded(environment))


def _on_stopped(statuses: WorkerStatuses, sink: QueueSink, msg: Any) -> None:
    _deliver_records(sink, msg.data)
    statuses.stopped[msg.node_id] = msg.data
    statuses.latest.pop(msg.node_id, None)
