"""Fixtures for the embedded-vLLM tests: a stand-in `vllm` executable and targets that are always stopped."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from vllm_helpers import FAKE_VLLM, child_pids, kill_if_ours

from soak.config import resolve_config


@pytest.fixture
def fake_vllm_bin(tmp_path: Path) -> Path:
    """A `vllm` wrapper in its own bin folder that runs fake_vllm.py with this interpreter (exec keeps the PID)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "vllm"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_VLLM}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.fixture
def vllm_config(tmp_path: Path, fake_vllm_bin: Path) -> Callable[..., object]:
    """Build a RunConfig for the vLLM target; keyword arguments are flat settings (flag names)."""
    def build(**flags: object):
        base = {"duration": "1m", "out": str(tmp_path / "out"), "model": "fake/model-7b",
                "vllm_bin": str(fake_vllm_bin), "startup_timeout": "20s"}
        return resolve_config({**base, **flags}, environ={})
    return build


@pytest.fixture
def targets():
    """Targets a test started; each is stopped at the end, and children the fake reported are killed."""
    started: list = []
    yield started
    for target in started:
        try:
            target.stop(1.0)
        finally:
            for pid in child_pids(target):
                kill_if_ours(pid)
