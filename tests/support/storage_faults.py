"""Real storage faults for the end-to-end tests: a PostgreSQL server of the test's own that it restarts and stops, a
SQLite database held by another process's exclusive lock, and a small file system that fills up.

A private PostgreSQL cluster rather than the machine's: stopping the shared one would fail every other test using
it at the same time (CI runs the slow tests three at a time).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POSTGRES_LIBS = Path("/usr/lib/postgresql")


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian's layout), or None."""
    versions = sorted((p for p in POSTGRES_LIBS.glob("*/bin") if (p / "pg_ctl").exists()),
                      key=lambda p: float(p.parent.name) if p.parent.name.replace(".", "").isdigit() else 0.0)
    return versions[-1] if versions else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivatePostgres:
    """A throwaway PostgreSQL cluster on 127.0.0.1, run as the `postgres` user when the test runs as root."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="soak-test-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to postgres
            shutil.chown(self.root, "postgres", "postgres")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/soak"

    def _run(self, tool: str, *args: str, timeout_s: float = 120) -> None:
        command = [str(self.bin_dir / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=timeout_s, cwd=self.root)

    def create(self) -> None:
        """initdb, start, and a `soak` database."""
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "soak")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"), "-m", "fast",
                  "-w", "restart")

    def remove(self) -> None:
        try:
            self.stop("immediate")
        except subprocess.SubprocessError:
            pass  # already stopped
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A running private cluster, removed afterwards; OSError/SubprocessError when one cannot be made here."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise FileNotFoundError(f"no PostgreSQL under {POSTGRES_LIBS}")
    cluster = PrivatePostgres(bin_dir)
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.remove()


HOLD_LOCK = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("ROLLBACK")
"""


def hold_exclusive_lock(db_path: Path, seconds: float) -> subprocess.Popen:
    """Another process holding `BEGIN EXCLUSIVE` on the SQLite database for `seconds`; returns once it holds it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(db_path), str(seconds)], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


@contextmanager
def small_volume(size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted on a fresh folder, unmounted and removed afterwards; PermissionError (or
    CalledProcessError) when this machine refuses the mount."""
    folder = Path(tempfile.mkdtemp(prefix="soak-test-volume-"))
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder)], check=True,
                       capture_output=True, timeout=30)
    except (subprocess.SubprocessError, OSError):
        folder.rmdir()
        raise
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


def fill(volume: Path) -> Path:
    """Write a file until the volume has no room left; the file (remove it to free the room)."""
    filler = volume / "filler.bin"
    with open(filler, "wb", buffering=0) as handle:  # unbuffered: a refused write leaves nothing to flush at close
        for size in (1 << 20, 4096, 512):  # megabytes, then the last pages
            try:
                while True:
                    handle.write(b"\0" * size)
            except OSError:
                pass
    return filler
