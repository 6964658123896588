"""Cross-process locks on the output folder: one embedded-server run at a time, one daemon per folder.

`flock` locks belong to the open file, so the kernel drops them when the holder dies, even by SIGKILL: a
stale lock file never blocks anyone. The file itself is never deleted (deleting a lock file races with a
process that has just opened it); it only carries the holder's PID for messages.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from soak.errors import EXIT_USAGE, SoakError

RUN_LOCK_NAME = ".soak.lock"
DAEMON_LOCK_NAME = ".soak-daemon.lock"


class LockHeldError(SoakError):
    """Another process holds the lock; carries the holder's PID when it could be read."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, path: Path, holder_pid: int | None):
        super().__init__(message)
        self.path = path
        self.holder_pid = holder_pid


class RunLockHeldError(LockHeldError):
    """Another soak run with an embedded server is using this output folder."""


class DaemonLockHeldError(LockHeldError):
    """Another `soak daemon` already serves this output folder."""


def run_lock_path(out_dir: str | Path) -> Path:
    """`<out>/.soak.lock`, held by a run with an embedded server."""
    return Path(out_dir) / RUN_LOCK_NAME


def daemon_lock_path(out_dir: str | Path) -> Path:
    """`<out>/.soak-daemon.lock`, held by the one daemon of this folder."""
    return Path(out_dir) / DAEMON_LOCK_NAME


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _try_flock(fd: int, operation: int) -> bool:
    """True when the lock was taken; False when another open file holds a conflicting one."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _open_lock_file(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)


@contextmanager
def hold_lock(path: Path, error: type[LockHeldError] = LockHeldError, what: str = "this lock") -> Iterator[Path]:
    """Hold an exclusive `flock` on `path` for the block; raise `error` at once if someone else holds it."""
    fd = _open_lock_file(path)
    try:
        if not _try_flock(fd, fcntl.LOCK_EX):
            holder_pid = _read_pid(path)
            by = f" (pid {holder_pid})" if holder_pid else ""
            raise error(f"{what}{by} holds {path}", path, holder_pid)
        # Written after the lock is ours, so a reader never sees a half-written PID of a loser.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def hold_run_lock(out_dir: str | Path):  # a context manager yielding the lock path
    """Hold `<out>/.soak.lock` while a run with an embedded server runs; RunLockHeldError if another holds it."""
    return hold_lock(run_lock_path(out_dir), RunLockHeldError, "another soak run")


def hold_daemon_lock(out_dir: str | Path):  # a context manager yielding the lock path
    """Hold `<out>/.soak-daemon.lock` for the daemon's lifetime; DaemonLockHeldError if another daemon holds it."""
    return hold_lock(daemon_lock_path(out_dir), DaemonLockHeldError, "another soak daemon")


def lock_holder(path: Path) -> int | None:
    """The PID holding the lock at `path` (0 when held but unreadable), or None when nobody holds it.

    Probes with a shared lock, which never blocks another prober and is released at once.
    """
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _try_flock(fd, fcntl.LOCK_SH):
            return None
        return _read_pid(path) or 0
    finally:
        os.close(fd)


def run_lock_holder(out_dir: str | Path) -> int | None:
    """Who holds `<out>/.soak.lock`: its PID (0 if unreadable), or None when it is free."""
    return lock_holder(run_lock_path(out_dir))
