"""Shared test helpers: run the `soak` CLI as a real subprocess, bounded in time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_soak(*args: str, timeout_s: float = 240, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`soak ARGS…` in a fresh interpreter; stdout/stderr captured as text."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "soak", *args], capture_output=True, text=True,
                          timeout=timeout_s, env=full_env, cwd=cwd or REPO)


@pytest.fixture(scope="session")
def soak_cli():
    """The `run_soak` helper as a fixture."""
    return run_soak

