"""Helpers shared by the embedded-vLLM tests (a module of its own: conftest files are not for importing)."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

FAKE_VLLM = Path(__file__).with_name("fake_vllm.py")
CHILD_LINE = re.compile(r"FAKE_VLLM child pid=(\d+)")


def child_pids(target) -> list[int]:
    """PIDs of children the fake vLLM said it forked (from the server log)."""
    log_path = target.run_dir / "server.log"
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return [int(pid) for pid in CHILD_LINE.findall(text)]


def kill_if_ours(pid: int) -> None:
    """SIGKILL a PID a test started, unless it is already gone."""
    if alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def alive(pid: int) -> bool:
    """Running and not a zombie (an unreaped orphan is dead for our purposes)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def poll_until(condition: Callable[[], object], timeout_s: float, poll_s: float = 0.05) -> object:
    """The first truthy value of `condition()`, or a test failure after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll_s)
    pytest.fail(f"condition not met within {timeout_s}s")
