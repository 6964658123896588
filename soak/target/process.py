"""A server started as a child process in its own process group: log capture, readiness wait, clean stop."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 30


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log file ("" when there is none)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class ServerProcess:
    """A child process started with `start_new_session`, so its whole group can be signalled."""

    cmd: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    cpus: tuple[int, ...] | None = None  # the cores it may run on (None: those of the caller)
    popen: subprocess.Popen | None = field(default=None, repr=False)

    def start(self) -> None:
        """Start the process; stdout and stderr go to the log file."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self.popen = subprocess.Popen(  # the command is built by soak, not a shell
                self.cmd, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True,
            )
        if self.cpus:  # set before the server starts any thread of its own (they inherit it)
            os.sched_setaffinity(self.popen.pid, set(self.cpus))
        log.info("started %s (pid %s)", " ".join(self.cmd), self.popen.pid)

    @property
    def pid(self) -> int:
        """PID of the started process (also its process-group id)."""
        assert self.popen is not None, "not started"
        return self.popen.pid

    def exit_code(self) -> int | None:
        """The exit code once it has ended, else None."""
        return None if self.popen is None else self.popen.poll()

    def wait_for(self, ready: Callable[[], bool], timeout_s: float, poll_s: float = 0.1) -> str:
        """Poll until `ready()`; returns "ready", "exited" or "timeout"."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.exit_code() is not None:
                return "exited"
            if ready():
                return "ready"
            time.sleep(poll_s)
        return "timeout"

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM to the process group, SIGKILL after `grace_s`; returns the exit code."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            _signal_group(self.pid, signal.SIGTERM)
            if not self._wait(grace_s):
                log.warning("server group %s ignored SIGTERM for %.0fs; sending SIGKILL", self.pid, grace_s)
                _signal_group(self.pid, signal.SIGKILL)
                self._wait(5.0)
        else:
            _signal_group(self.pid, signal.SIGKILL)  # children the leader left behind
        return self.popen.poll()

    def _wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None and not _group_alive(self.pid):
                return True
            time.sleep(0.05)
        return False


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in the group (where PID 1 does not reap orphans, zombies linger)."""
    import psutil

    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return False
