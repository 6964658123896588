"""Per-process readings of the server's process tree (re-read at every sample) and of soak itself."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil

from soak.samples import ProcessStats

T = TypeVar("T")


def swap_bytes(pid: int) -> int | None:
    """The process's memory pushed out to swap (VmSwap of /proc/PID/status); None where that cannot be read
    (not Linux, the process gone, a kernel thread).

    Read at every sample beside RSS, from the same cheap file the kernel keeps its counters in: a leak written
    once and never read again is swapped out on a host with swap, and RSS alone then looks flat.
    """
    try:
        status = Path(f"/proc/{pid}/status").read_bytes()
    except OSError:
        return None
    at = status.find(b"\nVmSwap:")
    if at < 0:
        return None
    return int(status[at + 8:status.index(b"\n", at + 1)].split()[0]) * 1024  # the kernel writes it in kB


def off_loop(call: Callable[[], T]) -> T:
    """`call()` on a real OS thread when this process runs gevent (the load's arrival clock keeps ticking
    meanwhile), a plain call otherwise.

    For PSS the kernel walks every page table of a process while the read waits: 40–70 ms for each process
    of a CPU vLLM on a busy 2-core machine. On a greenlet that read held every other greenlet, and the
    arrival clock stalled for 0.1–0.4 s at each PSS sample (docs/benchmarks.md, "CPU vLLM").
    """
    if "gevent" in sys.modules:
        from gevent import monkey

        if monkey.is_module_patched("threading"):
            import gevent

            return gevent.get_hub().threadpool.apply(call)
    return call()


def _read_process(process: psutil.Process, with_pss: bool = True) -> ProcessStats | None:
    """RSS, swap, PSS/USS (from smaps_rollup, when asked), fds, threads and CPU % of one process; None once
    gone."""
    try:
        with process.oneshot():
            return ProcessStats(
                pid=process.pid, ppid=process.ppid(), name=process.name()[:128],
                rss_bytes=process.memory_info().rss, swap_bytes=swap_bytes(process.pid),
                threads=process.num_threads(), cpu_percent=process.cpu_percent(None),
                **_optional_readings(process, with_pss))
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None


def _optional_readings(process: psutil.Process, with_pss: bool) -> dict[str, int | None]:
    """Readings that may be denied for another user's process; a denial leaves them empty, not the sample."""
    found: dict[str, int | None] = {"pss_bytes": None, "uss_bytes": None, "fds": None}
    try:
        if with_pss:
            full = process.memory_full_info()
            found["pss_bytes"], found["uss_bytes"] = getattr(full, "pss", None), full.uss
    except psutil.AccessDenied:
        pass
    try:
        found["fds"] = process.num_fds()
    except psutil.AccessDenied:
        pass
    return found


def _alive(process: psutil.Process) -> bool:
    """Running and not a zombie (an exited child nobody has reaped yet still "runs" for psutil)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class ProcessTreeSampler:
    """Samples every process under the given root PIDs.

    Finding descendants means reading every process of the machine (psutil builds a parent map from all of
    /proc), which on a busy host costs more than the readings themselves, so the tree is re-read every
    `tree_every_s`, and at once when the roots change or a known process has gone: a new child is counted
    within `tree_every_s`.
    """

    def __init__(self, root_pids: list[int] | tuple[int, ...] = (), pss_every_s: float = 10.0,
                 tree_every_s: float = 10.0):
        self.root_pids = list(root_pids)
        self.pss_every_s = pss_every_s
        self.tree_every_s = tree_every_s
        self._known: dict[int, psutil.Process] = {}
        self._last_pss = float("-inf")
        self._tree_read_at = float("-inf")

    def set_roots(self, root_pids: list[int]) -> None:
        """Follow a new tree (e.g. after a server restart)."""
        if list(root_pids) != self.root_pids:
            self.root_pids = list(root_pids)
            self._tree_read_at = float("-inf")

    def tree_pids(self) -> list[int]:
        """PIDs of the roots and all their descendants that exist now."""
        return [process.pid for process in self._tree()]

    def _tree(self) -> list[psutil.Process]:
        now = time.monotonic()
        if now - self._tree_read_at < self.tree_every_s:
            known = list(self._known.values())
            if all(_alive(process) for process in known):
                return known
        self._tree_read_at = now
        return self._read_tree()

    def _read_tree(self) -> list[psutil.Process]:
        found: dict[int, psutil.Process] = {}
        for pid in self.root_pids:
            root = self._process(pid)
            if root is None or not _alive(root):
                continue
            found[pid] = root
            try:
                children = root.children(recursive=True)
            except psutil.NoSuchProcess:
                children = []
            for child in children:
                found.setdefault(child.pid, self._process(child.pid) or child)
        self._known = {pid: self._known.get(pid, proc) for pid, proc in found.items()}
        return list(self._known.values())

    def _process(self, pid: int) -> psutil.Process | None:
        """A cached Process object, so CPU % is measured since the previous sample."""
        if pid in self._known:
            return self._known[pid]
        try:
            process = psutil.Process(pid)
            process.cpu_percent(None)  # prime the CPU counter
            return process
        except psutil.NoSuchProcess:
            return None

    def sample(self) -> list[ProcessStats]:
        """One reading per live process of the tree; PSS/USS at most every `pss_every_s`.

        The kernel walks every page table entry to produce smaps_rollup (≈5 ms for a 300 MB process), so at
        1 Hz PSS alone would cost more than the whole sampler's budget; RSS (from statm) is read every time.
        """
        now = time.monotonic()
        with_pss = now - self._last_pss >= self.pss_every_s
        if with_pss:
            self._last_pss = now
        rows = [_read_process(process, with_pss) for process in self._tree()]
        return [row for row in rows if row is not None]


class SelfSampler:
    """soak's own CPU % and memory, to tell when the client itself is the bottleneck."""

    def __init__(self) -> None:
        self._process = psutil.Process(os.getpid())
        self._process.cpu_percent(None)

    def sample(self) -> ProcessStats:
        """One reading of this process."""
        row = _read_process(self._process, with_pss=False)  # soak's own RSS is enough to see it grow
        assert row is not None  # this process is alive while it runs
        return row


LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


def local_addresses() -> set[str]:
    """Every address of this machine's interfaces (and the loopback names)."""
    found = {"127.0.0.1", "::1", "0.0.0.0", "::"}
    for addresses in psutil.net_if_addrs().values():
        found.update(address.address.split("%", 1)[0] for address in addresses if address.address)
    return found


def is_local_host(host: str | None) -> bool:
    """Whether a URL's host is this machine: a loopback name or address, one of its interfaces' addresses, or a
    name that resolves to one (this machine's own host name)."""
    if not host:
        return False
    host = host.strip("[]").lower()
    local = local_addresses()
    if host in LOCAL_NAMES or host.startswith("127.") or host in local:
        return True
    return bool(_resolved(host) & local) if not _is_address(host) else False


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _resolved(name: str) -> set[str]:
    """The addresses a host name resolves to; none when it does not resolve."""
    try:
        return {info[4][0].split("%", 1)[0] for info in socket.getaddrinfo(name, None)}
    except (OSError, UnicodeError):
        return set()


def _listening_pids(connections: list) -> list[int]:
    """PIDs of the TCP sockets in LISTEN state among `connections`."""
    return sorted({c.pid for c in connections if c.status == psutil.CONN_LISTEN and c.pid})


def _listens_on(process: psutil.Process, port: int) -> bool:
    try:
        return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                   for c in process.net_connections(kind="tcp"))
    except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


def listening_pids(port: int) -> list[int]:
    """PIDs of the processes listening on TCP `port` on this machine, topmost first; [] when none can be seen.

    The machine-wide table is read first; where it is denied (macOS without root) each process this user may
    inspect is asked in turn. A process of another user whose sockets cannot be read is not found. Of a
    listener and its own child both holding the socket (uvicorn workers, a forked server), only the parent is
    kept: its children are sampled with it.
    """
    try:
        pids = _listening_pids([c for c in psutil.net_connections(kind="tcp") if c.laddr and c.laddr.port == port])
    except psutil.AccessDenied:
        pids = sorted(p.pid for p in psutil.process_iter() if _listens_on(p, port))
    return [pid for pid in pids if not _has_ancestor_in(pid, set(pids))]


def _has_ancestor_in(pid: int, pids: set[int]) -> bool:
    try:
        return any(parent.pid in pids for parent in psutil.Process(pid).parents())
    except psutil.Error:
        return False
