"""A fleet run (`soak start` with several targets): one ordinary run per replica, each in a child `soak replica`
process, under one fleet run row; then the fleet's verdict from theirs (soak/run/fleet_summary.py).

Why child processes and not several conductors in this one: a conductor owns process-wide things — the SIGINT
and SIGTERM handlers, the root logger's file in its run folder, Locust's gevent patching and its master port —
and a replica's crash, stall or storage failure must not reach its peers. The children write to the same
database (each through its own single writer; SQLite's WAL and busy timeout let their short commits take turns).
Their arrivals stay open-loop: splitting a Poisson process by weight gives independent Poisson processes with
the rates split the same way, which is what each child draws with a seed of its own.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import delete, update

from soak.config import (
    ROUTER_NAME,
    LoadSettings,
    ReplicaSpec,
    RunConfig,
    TargetSettings,
    name_replicas,
    parse_targets_file,
)
from soak.contracts import FleetSummary
from soak.errors import ConfigError, StorageError, TargetError
from soak.run.environment import dumps
from soak.run.fleet_summary import finalise_fleet
from soak.run.metrics import serve_fleet
from soak.store import Store
from soak.store.models import Run, RunLabel
from soak.store.recorder import new_run_id, utc_now_iso

log = logging.getLogger(__name__)

FLEET_KIND = "fleet"  # the target_kind of a fleet's own row
OUTPUT_TAIL_LINES = 20
HEARTBEAT_S = 5.0  # as often as a run's own heartbeat


def refuse_unsupported(config: RunConfig) -> None:
    """Settings a fleet cannot honour yet: one ConfigError line naming the first one given."""
    given = [(config.web, "--web"), (config.load.worker_count, "--workers and --expect-workers"),
             (config.load.trace, "--trace"), (config.baseline, "--baseline"),
             (config.target.server_pids, "--server-pid (each replica's processes are found by its port)"),
             (config.target.server_log, "--server-log")]
    if config.target.router and config.load.loras:
        raise ConfigError("--lora cannot be combined with --router yet: soak loads adapters on the server it sends "
                          "load to, and a router is not where adapters live")
    flag = next((flag for value, flag in given if value), None)
    if flag:
        raise ConfigError(f"{flag} cannot be combined with several targets (a fleet run) yet")


def resolve_replicas(target: TargetSettings) -> tuple[ReplicaSpec, ...]:
    """Every --target, then every line of --targets-file, each named; behind a --router, none named `router`
    and none at the router's URL. Or the pods --k8s-selector found."""
    if target.k8s_pods:
        return target.replicas
    listed = list(target.all_replicas) + (parse_targets_file(target.targets_file) if target.targets_file else [])
    if target.router and not listed:
        raise ConfigError("--router needs the replicas behind it: --target NAME=URL (or --replica, "
                          "--targets-file), each observed for its own evidence")
    replicas = name_replicas(listed)
    if target.router and any(r.name == ROUTER_NAME for r in replicas):
        raise ConfigError(f"a replica behind --router cannot be named {ROUTER_NAME!r}: that is the router's run")
    if target.router and any(r.url == target.router for r in replicas):
        raise ConfigError(f"--router {target.router} is also given as a replica: name the replicas behind it")
    return replicas


def find_pods(target: TargetSettings) -> TargetSettings:
    """With --k8s-selector, the target with the pods found (soak/target/k8s.py): each a replica named after its
    pod, their names and namespace kept, so each replica's run can watch its own."""
    if not target.k8s_selector or target.k8s_pods:
        return target
    from soak.target.k8s import discover

    found = discover(target.k8s_selector, target.k8s_namespace, target.k8s_port)
    return target.model_copy(update={"replicas": found.replicas, "k8s_namespace": found.namespace,
                                     "k8s_pods": tuple(spec.name for spec in found.replicas)})


def replica_load(load: LoadSettings, share: float, index: int) -> LoadSettings:
    """The load of one replica: every rate (and the concurrency cap) times its share, a seed of its own."""
    phases = tuple(phase.model_copy(update={name: getattr(phase, name) * share for name in ("rate_rps", "to_rate_rps")
                                            if getattr(phase, name) is not None}) for phase in load.phases)
    cap = None if load.max_concurrency is None else max(1, math.ceil(load.max_concurrency * share))
    return load.model_copy(update={"rate_rps": load.rate_rps * share, "phases": phases, "max_concurrency": cap,
                                   "seed": load.seed + index})


def replica_config(config: RunConfig, replica: ReplicaSpec, share: float, index: int, fleet_id: str,
                   observe_only: bool = False) -> RunConfig:
    """The config of one replica's run: its URL alone, its share of the load (none when only observed), its
    folder inside the fleet's."""
    target = config.target.model_copy(update={"url": replica.url, "replicas": (), "replica_gpus": (),
                                              "targets_file": None, "router": None, "gpus": replica.gpus})
    # A replica's page listens on loopback at a free port; the fleet's own page (--metrics-bind) gathers them all.
    metrics = config.metrics.model_copy(update={"bind": "127.0.0.1:0" if config.metrics.bind else None})
    return config.model_copy(update={
        "target": target, "load": replica_load(config.load, share, index), "fleet_id": fleet_id,
        "replica": replica.name, "out_dir": config.out_dir / fleet_id, "json_output": False,
        "observe_only": observe_only, "metrics": metrics})


@dataclass(frozen=True)
class FleetPlan:
    """A fleet run before it starts: its id, its own config (replicas resolved) and each replica's config."""

    fleet_id: str
    config: RunConfig
    replicas: tuple[tuple[ReplicaSpec, RunConfig], ...]

    @property
    def folder(self) -> Path:
        return self.config.out_dir / self.fleet_id


def plan_fleet(config: RunConfig, fleet_id: str | None = None) -> FleetPlan:
    """Check what a fleet cannot do, read the replicas and split the load by weight."""
    refuse_unsupported(config)
    config = config.model_copy(update={"target": find_pods(config.target)})
    replicas = resolve_replicas(config.target)
    fleet_id = fleet_id or new_run_id()
    own = config.model_copy(update={"target": config.target.model_copy(update={"replicas": replicas,
                                                                               "replica_gpus": (),
                                                                               "targets_file": None})})
    if config.target.router:  # the router's run carries all the load; each replica's run only observes
        members = own.target.members()
        return FleetPlan(fleet_id, own, tuple((spec, replica_config(config, spec, 1.0, n, fleet_id,
                                                                    observe_only=n > 0))
                                              for n, spec in enumerate(members)))
    total = sum(replica.weight for replica in replicas)
    return FleetPlan(fleet_id, own, tuple((replica, replica_config(config, replica, replica.weight / total, n,
                                                                   fleet_id)) for n, replica in enumerate(replicas)))


@dataclass
class ReplicaProcess:
    """A replica's `soak replica` child and the last lines it wrote."""

    name: str
    process: subprocess.Popen
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=OUTPUT_TAIL_LINES))
    pump: threading.Thread | None = None

    def error_line(self) -> str:
        """What the child said when it failed: its `soak: error:` line, else its last line."""
        errors = [line.removeprefix("soak: error: ") for line in self.tail if line.startswith("soak: error:")]
        return (errors or list(self.tail) or [f"exit code {self.process.returncode}"])[-1]


def start_replica(name: str, config: RunConfig, folder: Path, say: Callable[[str], None]) -> ReplicaProcess:
    """Start `soak replica CONFIG` in a session of its own (a terminal's Ctrl-C reaches it through the fleet, once),
    echoing its lines prefixed with the replica's name."""
    config_path = folder / f"{name}.config.json"
    config_path.write_text(config.model_dump_json(), encoding="utf-8")
    process = subprocess.Popen([sys.executable, "-m", "soak", "replica", str(config_path)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    child = ReplicaProcess(name, process)
    child.pump = threading.Thread(target=_pump, args=(child, say), name=f"replica-{name}", daemon=True)
    child.pump.start()
    return child


def _pump(child: ReplicaProcess, say: Callable[[str], None]) -> None:
    for line in child.process.stdout:
        child.tail.append(line.rstrip())
        say(f"[{child.name}] {line.rstrip()}")


class FleetConductor:
    """Runs a fleet: the fleet row, a child per replica, signals passed on, then the fleet's verdict."""

    def __init__(self, config: RunConfig, say: Callable[[str], None]):
        self.plan = plan_fleet(config)
        self.say = say
        self.children: list[ReplicaProcess] = []
        self.stopped_by = ""

    def execute(self) -> FleetSummary:
        """Run every replica to its end and return the fleet's summary; TargetError when none could start."""
        plan = self.plan
        plan.folder.mkdir(parents=True, exist_ok=True)
        page = serve_fleet(plan.config, plan.folder, [spec.name for spec, _ in plan.replicas])  # a taken port: now
        if page is not None:
            self.say(f"metrics for Prometheus, every replica: {page.url}")
        try:
            store = Store.open(plan.config.db_url)
        except Exception:
            if page is not None:
                page.close()
            raise
        previous = {signum: signal.signal(signum, self._pass_on) for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            started = time.time()
            self._insert_row(store, started)
            self.say(f"fleet {plan.fleet_id}: {len(plan.replicas)} replicas, one run each ({plan.folder})")
            self.children = [start_replica(spec.name, config, plan.folder, self.say) for spec, config in plan.replicas]
            self._wait(store)
            return self._finish(store, started)
        finally:
            self._end_children()  # none left, unless the fleet itself failed: then its replicas stop too
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if page is not None:
                page.close()
            store.close()

    def _wait(self, store: Store) -> None:
        """Wait for every replica to end, beating the fleet row's heartbeat meanwhile (a reader on another host
        takes a fleet without one for aborted)."""
        for child in self.children:
            while True:
                try:
                    child.process.wait(timeout=HEARTBEAT_S)
                    break
                except subprocess.TimeoutExpired:
                    self._beat(store)
            child.pump.join()

    def _beat(self, store: Store) -> None:
        """One UPDATE, no read first: a read transaction turned writer fails at once, busy timeout or not, when a
        replica's writer committed meanwhile. A beat the database refuses is only late; the next one tries again."""
        try:
            self._update_row(store, heartbeat_at=utc_now_iso())
        except StorageError as exc:
            log.warning("fleet heartbeat not stored: %s", exc)

    def _update_row(self, store: Store, **values: object) -> None:
        with store.writing() as session:
            session.execute(update(Run).where(Run.id == self.plan.fleet_id).values(**values))

    def _end_children(self) -> None:
        for child in self.children:
            if child.process.poll() is None:
                child.process.terminate()

    def _pass_on(self, signum: int, _frame: object) -> None:
        """A stop signal goes to every replica still running (a second one forces them, as for one run)."""
        self.stopped_by = signal.Signals(signum).name
        for child in self.children:
            if child.process.poll() is None:
                os.kill(child.process.pid, signum)

    def _insert_row(self, store: Store, started: float) -> None:
        plan, config = self.plan, self.plan.config
        row = {"id": plan.fleet_id, "status": "running", "started_at": utc_now_iso(), "t0_epoch_s": started,
               "heartbeat_at": utc_now_iso(), "planned_duration_s": config.duration_s, "warmup_s": config.warmup_s,
               "window_s": config.window_s, "soak_pid": os.getpid(), "out_dir": str(plan.folder),
               "target_kind": FLEET_KIND, "target_url": " ".join(spec.url for spec, _ in plan.replicas),
               "config_json": config.model_dump_json(), "environment_json": dumps({"host": socket.gethostname()})}
        with store.writing() as session:
            session.add(Run(**row))
            session.add_all(RunLabel(run_id=plan.fleet_id, key=key, value=value) for key, value in config.labels.items())

    def _finish(self, store: Store, started: float) -> FleetSummary:
        """End the fleet row and build its verdict; with no replica run at all, remove the row and say why."""
        opened = {run.replica for run in store.fleet_runs(self.plan.fleet_id)}
        errors = {child.name: child.error_line() for child in self.children if child.name not in opened}
        if not opened:
            with store.writing() as session:  # a fleet that never started leaves no run behind, like one run
                session.execute(delete(RunLabel).where(RunLabel.run_id == self.plan.fleet_id))
                session.execute(delete(Run).where(Run.id == self.plan.fleet_id))
            first = self.children[0]
            raise TargetError(f"no replica of the fleet started; replica {first.name}: {errors[first.name]}")
        status = "aborted" if self.stopped_by else "completed"
        self._update_row(store, status=status, ended_at=utc_now_iso(), duration_s=time.time() - started)
        return finalise_fleet(store, self.plan.fleet_id, errors)
