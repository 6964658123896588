"""The target stage: a server soak starts and owns (reference, vLLM) or one it only attaches to (external)."""

from __future__ import annotations

import logging
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

from soak.config import RunConfig
from soak.errors import TargetError
from soak.target.openai import choose_model, list_models
from soak.target.process import ServerProcess, log_tail
from soak.telemetry.process import is_local_host, listening_pids

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 2.0  # one cheap GET per check; a server too busy to answer in 2 s counts as down


@dataclass
class ServerInfo:
    """What the later stages need to know of the server under test."""

    kind: str
    base_url: str
    model: str
    root_pids: list[int] = field(default_factory=list)
    metrics_urls: list[str] = field(default_factory=list)
    pgid: int | None = None
    cmd: list[str] = field(default_factory=list)
    log_path: Path | None = None
    processes_from: str = ""  # how root_pids were found: started by soak, --server-pid, the port, or "" (none)
    server_environment: dict[str, Any] = field(default_factory=dict)  # the server's vLLM/torch, placement
    notes: list[str] = field(default_factory=list)  # what the user should hear before the load starts


@dataclass(frozen=True)
class ServerChange:
    """What a target watching a server it did not start saw from outside: a `crash` (its processes ended, or a
    pod's container restarted), the server `back` (new processes serve its port), or a server that `moved` to
    `base_url` (its pod was replaced), which the run follows."""

    kind: Literal["crash", "back", "moved"]
    message: str
    data: dict[str, Any] = field(default_factory=dict)
    base_url: str | None = None


def auth_headers(config: RunConfig) -> dict[str, str]:
    """An Authorization header from the environment variable named by --api-key-env (never stored)."""
    return bearer_headers(config.target.api_key_env)


def bearer_headers(key_env: str | None) -> dict[str, str]:
    """An Authorization header from the environment variable `key_env` names; none when it is unset or empty."""
    key = os.environ.get(key_env) if key_env else None
    return {"Authorization": f"Bearer {key}"} if key else {}


def probe_up(base_url: str, headers: dict[str, str] | None = None, timeout_s: float = HEALTH_TIMEOUT_S) -> str:
    """"up" when GET /health answers 200 (or 404: the server has no /health but answers), else "down"."""
    request = urllib.request.Request(base_url + "/health", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return "up" if response.status == 200 else "down"
    except urllib.error.HTTPError as exc:
        return "up" if exc.code == 404 else "down"
    except (OSError, ValueError):
        return "down"


def url_port(base_url: str) -> int | None:
    """The port a base URL names, or its scheme's default; None for a malformed URL."""
    try:
        parts = urllib.parse.urlsplit(base_url)
        return parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None


# Programs that listen for a container's published port: the server itself runs inside the container.
PORT_PROXIES = ("docker-proxy", "rootlessport", "slirp4netns", "pasta", "conmon")


def local_listeners(base_url: str) -> list[int]:
    """The processes listening on the URL's port when its host is this machine; [] otherwise, when unseen, or
    when the listener is a container runtime's port proxy rather than the server."""
    port = url_port(base_url)
    if port is None or not is_local_host(urllib.parse.urlsplit(base_url).hostname):
        return []
    return [pid for pid in listening_pids(port) if _process_name(pid) not in PORT_PROXIES]


def _process_name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return ""


def port_free(port: int) -> bool:
    """Whether 127.0.0.1:`port` can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # servers set it too; TIME_WAIT is no obstacle
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port the OS says is free on 127.0.0.1 now (for servers that cannot take --port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


PORT_REUSE_WAIT_S = 5.0


def wait_port_free(port: int, timeout_s: float) -> bool:
    """Poll until the port can be bound (a dying server may hold it briefly)."""
    deadline = time.monotonic() + timeout_s
    while not port_free(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


class Target:
    """Base of every target: `start()` gives ServerInfo, `exit_code()` tells a death, `stop()` ends it."""

    kind = "external"

    def __init__(self, config: RunConfig, run_dir: Path):
        self.config = config
        self.run_dir = run_dir
        self.info: ServerInfo | None = None

    def start(self) -> ServerInfo:
        """Make the server ready (or check it is) and describe it."""
        raise NotImplementedError

    def exit_code(self) -> int | None:
        """The server's exit code once it died; None while alive (or not ours to watch)."""
        return None

    def health(self) -> str:
        """"exited" once the process ended, else "up" or "down" from one GET /health (2 s timeout)."""
        if self.exit_code() is not None:
            return "exited"
        if self.info is None:
            return "down"
        return probe_up(self.info.base_url, auth_headers(self.config))

    def changes(self) -> list[ServerChange]:
        """What was seen of the server from outside since the last call (the conductor asks every tick); none
        for a server soak started (its exit code tells)."""
        return []

    def may_restart(self) -> bool:
        """Whether policy allows another restart now; never for a server soak did not start."""
        return False

    def restart(self) -> ServerInfo:
        """Start the server again; only targets soak started can."""
        raise TargetError(f"soak cannot restart a {self.kind} target it did not start")

    def stop(self) -> int | None:
        """Stop what soak started; attach-only targets do nothing."""
        return None

    def root_pids(self) -> list[int]:
        """Roots of the server's process tree, read by telemetry at every sample."""
        return list(self.info.root_pids) if self.info else list(self.config.target.server_pids)

    def process_alive(self) -> bool | None:
        """Whether a process of the server still runs; None when soak knows none (a server on another host)."""
        pids = self.root_pids()
        return _any_alive(pids) if pids else None

    def log_tail(self) -> str:
        """The tail of the server log, when soak captured one."""
        return log_tail(self.info.log_path) if self.info and self.info.log_path else ""

    def _describe(self, base_url: str, pids: list[int], process: ServerProcess | None = None,
                  processes_from: str = "") -> ServerInfo:
        headers = auth_headers(self.config)
        models = list_models(base_url, headers)
        model = choose_model(models, self.config.target.served_model or self._expected_model(), base_url)
        metrics = [base_url + "/metrics", *self.config.target.metrics_urls]
        given = list(self.config.target.server_pids)
        return ServerInfo(
            kind=self.kind, base_url=base_url, model=model, root_pids=pids + given,
            metrics_urls=metrics, pgid=process.pid if process else None, cmd=process.cmd if process else [],
            log_path=process.log_path if process else None,
            processes_from=processes_from or ("started by soak" if process else "--server-pid" if given else ""),
        )

    def _expected_model(self) -> str | None:
        return None


class ExternalTarget(Target):
    """A server someone else runs; soak only checks it answers and learns its model.

    Its processes are sampled when `--server-pid` names them or, without it, when the URL's host is this
    machine and the process listening on its port can be seen (found again if that process is replaced).
    """

    kind = "external"
    REFIND_EVERY_S = 10.0
    _found_at = float("-inf")
    _watched: tuple[int, ...] = ()  # the processes last seen serving; all gone = the server died
    _gone = False

    def start(self) -> ServerInfo:
        url = self.config.target.url
        assert url is not None
        found = [] if self.config.target.server_pids else local_listeners(url)
        self._found_at = time.monotonic()
        port_text = f"listening on port {url_port(url)}" if found else ""
        self.info = self._describe(url, found, processes_from=port_text)
        self.info.server_environment = external_server_record(url, self.info.root_pids, auth_headers(self.config))
        self._watched = tuple(self.info.root_pids)
        return self.info

    def changes(self) -> list[ServerChange]:
        """A crash when every process seen serving has ended (soak cannot read the exit code of a server it did
        not start), and the server back when processes found by port serve it again (a supervisor restarted it)."""
        if self.info is None or not self._watched:
            return []
        how = self.info.processes_from or "given"
        changes = []
        if not self._gone and not _any_alive(list(self._watched)):
            self._gone = True
            changes.append(ServerChange("crash", f"server process(es) {_pid_list(self._watched)} ({how}) ended; "
                                        "soak did not start this server, so it waits for it to come back",
                                        {"pids": list(self._watched)}))
        if self._gone:
            back = tuple(pid for pid in self.root_pids() if pid not in self._watched and _alive(pid))
            if back:
                self._watched, self._gone = back, False
                changes.append(ServerChange("back", f"server back: process(es) {_pid_list(back)} ({how})",
                                            {"pids": list(back)}))
        return changes

    def root_pids(self) -> list[int]:
        """The recorded roots; those found by port are looked for again (every 10 s) once none is alive."""
        info = self.info
        if info is None or not info.processes_from.startswith("listening") or _any_alive(info.root_pids):
            return super().root_pids()
        if time.monotonic() - self._found_at >= self.REFIND_EVERY_S:
            self._found_at = time.monotonic()
            info.root_pids = local_listeners(info.base_url) or info.root_pids
        return list(info.root_pids)


def external_server_record(url: str, pids: list[int], headers: dict[str, str]) -> dict[str, Any]:
    """What soak can learn of a running server's versions: GET /version (vLLM answers it) and, when one of its
    processes runs on this machine, its interpreter's vLLM and torch."""
    from soak.target.vllm_build import query_versions, served_version

    record: dict[str, Any] = {"served_version": served_version(url, headers)}
    for pid in pids:
        try:
            python = psutil.Process(pid).exe()
        except psutil.Error:
            continue
        if "python" in Path(python).name:
            record |= query_versions(python, media_probe=False)
            break
    return record


def _pid_list(pids: tuple[int, ...]) -> str:
    return ", ".join(str(pid) for pid in pids)


def _any_alive(pids: list[int]) -> bool:
    """Whether any of the PIDs still runs (a zombie has ended: only its parent has not reaped it yet)."""
    return any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class ManagedTarget(Target):
    """A server soak starts in its own process group and stops at the end."""

    process: ServerProcess | None = None
    restart_port: int | None = None  # set by restart(): the port start() should bind again
    restarts: int = 0

    def exit_code(self) -> int | None:
        return self.process.exit_code() if self.process else None

    def stop(self, grace_s: float = 15.0) -> int | None:
        return self.process.stop(grace_s) if self.process else None

    def may_restart(self) -> bool:
        """--restart on-crash and fewer than --max-restarts restarts so far (`self.restarts`)."""
        target = self.config.target
        return target.restart == "on-crash" and self.restarts < target.max_restarts

    def restart(self, grace_s: float | None = None) -> ServerInfo:
        """Stop what is left of the old process group, then start again on the same port when it is free.

        The base URL stays valid unless another program took the port meanwhile; then a new port is used and
        the returned ServerInfo (also `self.info`) says so. A failed start raises TargetError, as `start()` does.
        """
        old_port = url_port(self.info.base_url) if self.info else None
        self.stop() if grace_s is None else self.stop(grace_s)  # each target knows its own default grace
        self.restart_port = old_port if old_port and wait_port_free(old_port, PORT_REUSE_WAIT_S) else None
        if old_port and self.restart_port is None:
            log.warning("port %s is still taken after the stop; the restarted server gets a new one", old_port)
        self.restarts += 1
        return self.start()

    def fail_start(self, what: str) -> TargetError:
        """A TargetError quoting the server log's tail."""
        tail = log_tail(self.process.log_path) if self.process else ""
        if self.process:
            self.process.stop(5.0)
        return TargetError(f"{what}; server log tail:\n{tail}" if tail else what)
