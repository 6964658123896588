"""The load workers of a run, gathered before it opens: a Locust master here, local worker processes
(`load.workers`) and `soak worker` processes on other hosts (`load.expect_workers`).

`gather_workers` binds the master, spawns the local workers and waits until every worker has said hello (a
`soak_hello` with its pid, host and clock). A worker that does not come in time is a TargetError before the run
opens, so the wait takes nothing from the run's planned time and leaves no half-run behind. Workers beyond the
expected number are turned away (`soak_spec {reject}`).
"""

from __future__ import annotations

import atexit
import ipaddress
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.exception import RPCError
from locust.runners import STATE_MISSING

from soak.config import MASTER_PORT, RunConfig, split_address
from soak.errors import TargetError
from soak.load.backend import dispatcher_user_class
from soak.units import format_duration

log = logging.getLogger(__name__)

HELLO_MESSAGE, SPEC_MESSAGE = "soak_hello", "soak_spec"
LOCAL_CONNECT_TIMEOUT_S = 60.0  # local workers only import Locust and connect
WAIT_PROGRESS_S = 5.0
EXIT_WAIT_S = 10.0
POLL_S = 0.05
CLOCK_WARN_S = 0.25
ANY_HOSTS = ("0.0.0.0", "*", "::")

Say = Callable[[str], None]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class SpawnedWorker:
    """One local worker process and the file its stderr goes to."""

    popen: subprocess.Popen
    log_path: Path

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-600:]
        except OSError:
            return ""


@dataclass(frozen=True)
class Member:
    """A worker that said hello: its Locust node id and index, where it runs, and its process when local."""

    node_id: str
    index: int
    host: str
    pid: int
    clock_offset_s: float = 0.0  # its clock minus ours at hello (plus the message's travel time)
    spawned: SpawnedWorker | None = None

    def describe(self) -> str:
        return f"worker {self.index} ({'local' if self.spawned else self.host}, pid {self.pid})"

    def as_data(self) -> dict[str, Any]:
        return {"index": self.index, "host": self.host, "pid": self.pid, "local": self.spawned is not None,
                "clock_offset_s": round(self.clock_offset_s, 3)}


@dataclass
class WorkerPool:
    """The master's environment and the workers that joined it, in worker-index order."""

    environment: Environment
    address: str  # HOST:PORT the master listens on
    expected: int
    spawned: list[SpawnedWorker] = field(default_factory=list)
    members: dict[str, Member] = field(default_factory=dict)
    accepting: bool = True  # until the load starts: a worker arriving later (even to replace a lost one) is refused
    closed: bool = False

    @property
    def runner(self) -> Any:
        return self.environment.runner

    def ordered(self) -> list[Member]:
        return sorted(self.members.values(), key=lambda member: member.index)

    def on_hello(self, environment: Any, msg: Any, **_kw: Any) -> None:
        """A worker joins, unless the run already has all it expects."""
        if msg.node_id in self.members:
            return
        if not self.accepting or len(self.members) >= self.expected:
            why = "has already started" if not self.accepting else f"already has its {self.expected} load workers"
            self.runner.send_message(SPEC_MESSAGE, {"reject": f"the run at {self.address} {why}"},
                                     client_id=msg.node_id)
            return
        pid, host = int(msg.data["pid"]), str(msg.data["host"])
        offset_s = float(msg.data.get("time", time.time())) - time.time()
        spawned = next((w for w in self.spawned if w.popen.pid == pid and host == socket.gethostname()), None)
        self.members[msg.node_id] = Member(msg.node_id, self.runner.get_worker_index(msg.node_id), host, pid,
                                           offset_s, spawned)

    def gone(self, member: Member) -> str | None:
        """Why `member` no longer works for the run, or None while it does."""
        code = member.spawned.popen.poll() if member.spawned else None
        if code is not None:
            return f"its process exited with code {code}"
        node = self.runner.clients.get(member.node_id)
        if node is None:
            return "it left the master"
        if node.state == STATE_MISSING:
            return "its heartbeat stopped"
        return None

    def dead_spawned(self) -> SpawnedWorker | None:
        return next((w for w in self.spawned if w.popen.poll() is not None), None)

    def close(self, reason: str | None = None) -> None:
        """Quit every worker (telling them `reason` first, when the run ends before it began), wait a little for the
        local ones to exit, then kill what is left. Once: the load's stop and the conductor's cleanup both call it."""
        if self.closed:
            return
        self.closed = True
        for member in self.ordered() if reason else ():
            self.runner.send_message(SPEC_MESSAGE, {"reject": reason}, client_id=member.node_id)
        self.runner.quit()
        deadline = time.monotonic() + EXIT_WAIT_S
        while any(w.popen.poll() is None for w in self.spawned) and time.monotonic() < deadline:
            gevent.sleep(POLL_S)
        _kill_all(self.spawned)
        for worker in self.spawned:
            worker.log_path.unlink(missing_ok=True)


def gather_workers(config: RunConfig, base_url: str, say: Say | None = None,
                   cancelled: Callable[[], bool] | None = None) -> WorkerPool | None:
    """Bind the master and wait for every load worker of `config`; None when the run has none.

    TargetError when the master cannot listen, a local worker dies, the workers do not all join in time, or
    `cancelled()` turns true (a stop signal) while they are awaited; the workers that joined are told why.
    """
    load = config.load
    if load.worker_count == 0:
        return None
    say = say or (lambda _message: None)
    cancelled = cancelled or (lambda: False)
    environment = Environment(user_classes=[dispatcher_user_class(lambda _env: None)], host=base_url,
                              stop_timeout=load.request_timeout_s)
    host, port = _bind_address(config)
    _bind_master(environment, host, port)
    pool = WorkerPool(environment, f"{host}:{port}", load.worker_count)
    pool.runner.register_message(HELLO_MESSAGE, pool.on_hello)
    try:
        pool.spawned = _spawn_workers(load.workers, f"{_dial_host(host)}:{port}")
        if load.expect_workers:
            _warn_unreachable_target(host, base_url, say)
        _wait_for_members(pool, config, say, cancelled)
        _warn_clock_offsets(pool, say)
    except BaseException as exc:
        pool.close(f"the run did not start: {exc}" if isinstance(exc, TargetError) else "the run did not start")
        raise
    return pool


def _bind_address(config: RunConfig) -> tuple[str, int]:
    """`--master-bind` when workers on other hosts are expected; else a free loopback port."""
    if config.load.expect_workers:
        return split_address(config.load.master_bind, MASTER_PORT)
    return "127.0.0.1", free_port()


def _bind_master(environment: Environment, host: str, port: int) -> None:
    try:
        environment.create_master_runner(host, port)
    except SystemExit:  # Locust exits when the port is taken
        raise TargetError(f"cannot listen for load workers on {host}:{port}: the port is in use") from None
    except RPCError as exc:
        raise TargetError(f"cannot listen for load workers on {host}:{port}: {exc}") from None


def _dial_host(bind_host: str) -> str:
    """Where a local worker reaches a master bound to `bind_host`."""
    return "127.0.0.1" if bind_host in ANY_HOSTS else bind_host


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _warn_unreachable_target(bind_host: str, base_url: str, say: Say) -> None:
    """Workers on other hosts send to the same URL: a loopback target is only reachable from this host."""
    target_host = urllib.parse.urlsplit(base_url).hostname or ""
    if _is_loopback(target_host) and not _is_loopback(bind_host):
        say(f"note: the target {base_url} is a loopback address; workers on other hosts cannot reach it "
            "(give --target a URL they can reach)")


def _spawn_workers(count: int, master: str) -> list[SpawnedWorker]:
    workers = []
    for index in range(count):
        with tempfile.NamedTemporaryFile(prefix=f"soak-worker-{index}-", suffix=".log", delete=False) as log_file:
            popen = subprocess.Popen([sys.executable, "-m", "soak.load.worker", master, str(os.getpid())],
                                     stdout=subprocess.DEVNULL, stderr=log_file)
        workers.append(SpawnedWorker(popen, Path(log_file.name)))
    atexit.register(_kill_all, workers)
    return workers


def _kill_all(workers: list[SpawnedWorker]) -> None:
    for worker in workers:
        if worker.popen.poll() is None:
            worker.popen.kill()


def _wait_for_members(pool: WorkerPool, config: RunConfig, say: Say, cancelled: Callable[[], bool]) -> None:
    """Until every worker said hello; progress every few seconds while remote workers are awaited."""
    load = config.load
    wait_s = load.worker_wait_s if load.expect_workers else LOCAL_CONNECT_TIMEOUT_S
    deadline = time.monotonic() + wait_s
    next_say = time.monotonic()
    while len(pool.members) < pool.expected:
        dead = pool.dead_spawned()
        if dead is not None:
            raise TargetError(f"a local load worker exited with code {dead.popen.poll()} before joining "
                              f"({len(pool.members)}/{pool.expected} joined): {dead.log_tail().strip()}")
        if time.monotonic() > deadline:
            raise TargetError(_missing_text(pool, config, wait_s))
        if cancelled():
            raise TargetError(f"stopped while waiting for load workers ({len(pool.members)}/{pool.expected} "
                              "joined); no run was opened")
        if load.expect_workers and time.monotonic() >= next_say:
            say(f"waiting for load workers: {len(pool.members)}/{pool.expected} joined; run `soak worker "
                f"--master {pool.address}` on each worker host")
            next_say = time.monotonic() + WAIT_PROGRESS_S
        gevent.sleep(POLL_S)


def _warn_clock_offsets(pool: WorkerPool, say: Say) -> None:
    """The plan is in absolute time, read on each worker's clock: a worker whose clock is off sends that much
    early or late (its latencies stay right, they are timed on its own clock)."""
    for member in pool.ordered():
        if abs(member.clock_offset_s) > CLOCK_WARN_S:
            say(f"note: the clock of load {member.describe()} is {member.clock_offset_s:+.2f} s off this host's; "
                "its arrivals run that much early or late (synchronise the clocks, e.g. with NTP)")


def _missing_text(pool: WorkerPool, config: RunConfig, wait_s: float) -> str:
    if not config.load.expect_workers:
        return f"load workers did not start ({len(pool.members)}/{pool.expected} joined in {wait_s:g}s)"
    return (f"only {len(pool.members)} of {pool.expected} load workers joined within {format_duration(wait_s)} "
            f"(the master listened on {pool.address}); start `soak worker --master {pool.address}` on each "
            "worker host, or allow longer with --worker-wait")
