"""Ending the processes a test started, by their PID."""

from __future__ import annotations

import subprocess


def stop_process(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; nothing when it has exited already."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
