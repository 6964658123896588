"""One process's forensics window on real processes: memray attached through gdb to a Python process that keeps
what it allocates names the line that keeps it; each reason it cannot is one line, and the mappings are still read."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from soak.telemetry.forensics import ProcessWindow, WatchedProcess

pytestmark = pytest.mark.timeout(180)

LEAKER = """\
import sys, time
held = []
def keep(size):
    held.append(bytearray(b"\\xa5") * size)
def serve():
    keep(64 * 1024)
print("ready", flush=True)
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    serve()
    time.sleep(0.005)
"""
KEEP_LINE = 4  # the line of LEAKER that allocates what is kept


@pytest.fixture
def start_process(tmp_path):
    """Start a child (ended by its PID afterwards); a leaker is waited for until it says it is ready."""
    started: list[subprocess.Popen] = []

    def start(*command: str) -> subprocess.Popen:
        child = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        started.append(child)
        if any(part.endswith("leaker.py") for part in command):
            assert child.stdout.readline().strip() == "ready"
        return child

    (tmp_path / "leaker.py").write_text(LEAKER)
    yield start
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait()


def watch(pid: int, tmp_path: Path, for_s: float) -> ProcessWindow:
    """Run one window to its end (bounded) and return it."""
    window = ProcessWindow(WatchedProcess(pid, "leaker", "process"), for_s, tmp_path / "forensics", tmp_path,
                           time.time())
    window.start()
    deadline = time.monotonic() + for_s + 120
    while not window.poll():
        assert time.monotonic() < deadline, f"the window never finished (phase {window.phase})"
        time.sleep(0.2)
    return window


def test_memray_names_the_line_that_keeps_what_it_allocates(tmp_path, start_process, debugger):
    leaker = start_process(sys.executable, str(tmp_path / "leaker.py"), "60")
    found = watch(leaker.pid, tmp_path, for_s=4).found
    assert found.method == "memray" and not found.refusals, found.refusals
    top = found.held["top"][0]
    assert (top["function"], Path(top["file"]).name, top["line"]) == ("keep", "leaker.py", KEEP_LINE)
    assert top["caller_function"] == "serve"
    assert top["bytes"] / found.held["held_bytes"] > 0.8  # 64 KiB every ~5 ms is nearly all it kept
    assert (tmp_path / found.flamegraph).stat().st_size > 0 and found.capture.startswith("forensics/")
    assert found.smaps is not None and found.smaps.growth_bytes > 0
    assert found.memory_after > found.memory_before


def test_a_server_without_memray_in_its_interpreter_says_what_to_install(tmp_path, start_process, debugger):
    leaker = start_process(sys.executable, "-S", str(tmp_path / "leaker.py"), "60")  # -S: no site-packages
    found = watch(leaker.pid, tmp_path, for_s=2).found
    assert found.method == "smaps" and found.smaps is not None
    assert found.refusals == ["memray is not importable in the server's interpreter: install it there (pip install "
                              "memray; soak's vllm and vllm-cpu extras bring it for a vLLM soak starts)"]


def test_a_process_that_is_not_python_is_classified_by_mapping(tmp_path, start_process):
    sleeper = start_process("sleep", "60")
    found = watch(sleeper.pid, tmp_path, for_s=1).found
    assert found.method == "smaps" and found.held is None and found.smaps is not None
    assert found.refusals == ["not a Python process: its growth is classified by mapping only"]


def test_a_process_that_exits_in_the_window_is_said_to_have_exited(tmp_path, start_process, debugger):
    leaker = start_process(sys.executable, str(tmp_path / "leaker.py"), "2")
    found = watch(leaker.pid, tmp_path, for_s=30).found
    assert "the process exited during the window" in found.refusals
    assert found.held is None


def test_no_debugger_names_the_package_to_install(tmp_path, start_process, monkeypatch):
    leaker = start_process(sys.executable, str(tmp_path / "leaker.py"), "60")
    monkeypatch.setenv("PATH", str(tmp_path))  # neither gdb nor lldb found
    found = watch(leaker.pid, tmp_path, for_s=1).found
    assert found.method == "smaps"
    assert found.refusals[0].startswith("memray attaches through gdb or lldb and neither is on this host: install gdb")


def test_a_hung_attach_is_given_up_and_leaves_the_process_running(tmp_path, start_process, debugger, monkeypatch):
    # a process blocked in a system call never reaches the point where gdb can start the tracker
    import soak.telemetry.forensics as forensics

    monkeypatch.setattr(forensics, "ATTACH_TIMEOUT_S", 5.0)
    blocked = start_process(sys.executable, "-c", "import sys, time; time.sleep(0.2); sys.stdin.read()")
    time.sleep(1.0)
    found = watch(blocked.pid, tmp_path, for_s=1).found
    assert found.refusals[0].startswith("memray attach did not finish within 5 s"), found.refusals
    state = Path(f"/proc/{blocked.pid}/status").read_text().split("State:")[1].split()[0]
    assert state not in ("t", "T"), state  # neither traced nor stopped: the debugger went and the process runs


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one usable core: no other core to move to")
def test_the_debugger_runs_on_the_servers_cores_not_soaks(start_process):
    from soak.telemetry.forensics import beside

    server = start_process("sleep", "60")
    core = max(os.sched_getaffinity(0))
    os.sched_setaffinity(server.pid, {core})  # the server's cores, as a CPU vLLM's placement leaves them
    child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)), os.nice(0))"],
                           capture_output=True, text=True, preexec_fn=beside(server.pid, nice=10), check=True)
    assert child.stdout.split() == [f"[{core}]", str(os.nice(0) + 10)]
