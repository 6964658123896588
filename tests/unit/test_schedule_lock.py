"""The run lock: one embedded-server run per output folder, visible to other processes, gone with its holder."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from soak.errors import SoakError
from soak.run.locking import (
    DaemonLockHeldError,
    RunLockHeldError,
    hold_daemon_lock,
    hold_run_lock,
    run_lock_holder,
    run_lock_path,
)

pytestmark = pytest.mark.timeout(60)

HOLD_IN_CHILD = """
import sys
from soak.run.locking import hold_run_lock
with hold_run_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_hold_writes_the_pid_and_releases(tmp_path):
    assert run_lock_holder(tmp_path) is None
    with hold_run_lock(tmp_path) as path:
        assert path == run_lock_path(tmp_path) == tmp_path / ".soak.lock"
        assert run_lock_holder(tmp_path) == os.getpid()
    assert run_lock_holder(tmp_path) is None
    assert path.exists()  # never deleted: deleting a lock file races with the next opener


def test_a_second_holder_is_refused_with_a_soak_error(tmp_path):
    with hold_run_lock(tmp_path):
        with pytest.raises(RunLockHeldError) as caught:
            with hold_run_lock(tmp_path):
                pass
    assert isinstance(caught.value, SoakError) and caught.value.exit_code == 2
    assert caught.value.holder_pid == os.getpid()
    assert str(os.getpid()) in str(caught.value) and ".soak.lock" in str(caught.value)


def test_the_lock_is_seen_across_processes_and_dies_with_its_holder(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", HOLD_IN_CHILD, str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        assert run_lock_holder(tmp_path) == child.pid
        with pytest.raises(RunLockHeldError):
            with hold_run_lock(tmp_path):
                pass
    finally:
        child.kill()  # SIGKILL: no cleanup code runs, the kernel drops the flock
        child.wait(timeout=10)
    assert run_lock_holder(tmp_path) is None
    with hold_run_lock(tmp_path):
        pass


def test_the_folder_is_created(tmp_path):
    with hold_run_lock(tmp_path / "new" / "out"):
        assert (tmp_path / "new" / "out" / ".soak.lock").exists()


def test_one_daemon_per_folder(tmp_path):
    with hold_daemon_lock(tmp_path):
        with pytest.raises(DaemonLockHeldError, match="another soak daemon"):
            with hold_daemon_lock(tmp_path):
                pass
        assert run_lock_holder(tmp_path) is None  # a daemon does not hold the run lock
