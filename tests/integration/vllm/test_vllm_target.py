"""The embedded vLLM target against a stand-in `vllm` executable: start, readiness, crashes, stops, restarts."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

import pytest
from vllm_helpers import alive, child_pids, poll_until

from soak.errors import TargetError
from soak.target import base as target_base
from soak.target import make_target
from soak.target.vllm import VllmTarget, live_group_members

pytestmark = pytest.mark.timeout(60)


def start_target(config, tmp_path, targets, mode: str, monkeypatch) -> VllmTarget:
    monkeypatch.setenv("FAKE_VLLM_MODE", mode)
    target = make_target(config, tmp_path / "run")
    targets.append(target)
    target.start()
    return target


def test_start_gives_ready_server_info(vllm_config, tmp_path, targets, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234,1")
    config = vllm_config(serve_arg=["--served-model-name", "chat", "--max-model-len", "512"])
    target = start_target(config, tmp_path, targets, "ok", monkeypatch)
    info = target.info
    port = int(info.base_url.rsplit(":", 1)[1])
    assert isinstance(target, VllmTarget)
    assert info.kind == "vllm" and info.base_url == f"http://127.0.0.1:{port}"
    assert info.model == "chat"  # the --served-model-name, not the path
    assert info.root_pids == [target.process.pid] == target.root_pids()
    assert info.pgid == target.process.pid == os.getpgid(target.process.pid)
    assert info.cmd[1:] == ["serve", "fake/model-7b", "--host", "127.0.0.1", "--port", str(port),
                            "--served-model-name", "chat", "--max-model-len", "512"]
    assert info.metrics_urls[0] == info.base_url + "/metrics"
    assert info.log_path == tmp_path / "run" / "server.log"
    assert "CUDA_VISIBLE_DEVICES=GPU-1234,1" in info.log_path.read_text()  # the environment passes through
    assert target.health() == "up" and target.exit_code() is None


def test_missing_executable_names_the_ways_out(vllm_config, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # none beside the interpreter either
    target = make_target(vllm_config(vllm_bin=None), tmp_path / "run")
    with pytest.raises(TargetError) as raised:
        target.start()
    message = str(raised.value)
    assert "\n" not in message
    assert "--target URL" in message and "reference server" in message and "omit --model" in message


def test_vllm_bin_that_is_not_executable_is_a_target_error(vllm_config, tmp_path):
    target = make_target(vllm_config(vllm_bin=str(tmp_path / "nowhere" / "vllm")), tmp_path / "run")
    with pytest.raises(TargetError, match="--target URL"):
        target.start()


def test_never_ready_times_out_quoting_the_log(vllm_config, tmp_path, targets, monkeypatch):
    started_s = time.monotonic()
    with pytest.raises(TargetError) as raised:
        start_target(vllm_config(startup_timeout="2s"), tmp_path, targets, "never_ready", monkeypatch)
    message = str(raised.value)
    assert "not ready within 2s" in message
    assert "server log tail:" in message and "FAKE_VLLM serving fake/model-7b" in message
    assert time.monotonic() - started_s < 15
    pgid = targets[0].process.pid
    assert live_group_members(pgid) == []  # a failed start leaves nothing running


def test_crash_at_start_reports_exit_code_and_log(vllm_config, tmp_path, targets, monkeypatch):
    with pytest.raises(TargetError) as raised:
        start_target(vllm_config(), tmp_path, targets, "crash_at_start", monkeypatch)
    assert "exited with code 3 during startup" in str(raised.value)
    assert "model weights not found" in str(raised.value)


def test_crash_after_start_sets_exit_code_and_health_exited(vllm_config, tmp_path, targets, monkeypatch):
    target = start_target(vllm_config(), tmp_path, targets, "crash_after=0.5", monkeypatch)
    assert poll_until(lambda: target.exit_code() is not None, 10)
    assert target.exit_code() == 7
    assert target.health() == "exited"
    assert "illegal memory access" in target.log_tail()


def test_dead_engine_behind_live_api_server_reads_down(vllm_config, tmp_path, targets, monkeypatch):
    target = start_target(vllm_config(), tmp_path, targets, "unhealthy_after=0.5", monkeypatch)
    assert poll_until(lambda: target.health() == "down", 10)
    assert target.exit_code() is None


def test_health_is_down_when_nothing_answers(vllm_config, tmp_path, targets, monkeypatch):
    target = start_target(vllm_config(), tmp_path, targets, "ok", monkeypatch)
    os.kill(target.process.pid, signal.SIGSTOP)  #: alive, but no answer within the 2 s probe
    try:
        started_s = time.monotonic()
        assert target.health() == "down"
        assert time.monotonic() - started_s < 3.5
    finally:
        os.kill(target.process.pid, signal.SIGCONT)  # the teardown stop is an ordinary one


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored(vllm_config, tmp_path, targets, monkeypatch):
    target = start_target(vllm_config(), tmp_path, targets, "ignore_sigterm", monkeypatch)
    pid = target.process.pid
    started_s = time.monotonic()
    code = target.stop(grace_s=1.0)
    assert code == -9
    assert time.monotonic() - started_s < 4
    assert not alive(pid)


def test_stop_kills_a_forked_child_through_the_group(vllm_config, tmp_path, targets, monkeypatch):
    target = start_target(vllm_config(), tmp_path, targets, "fork_child", monkeypatch)
    (child,) = child_pids(target)
    assert os.getpgid(child) == target.process.pid and alive(child)
    target.root_pids()  # as a telemetry sample would: the tree is re-read and remembered
    assert child in target.tree.pids()
    target.stop(grace_s=1.0)
    assert not alive(child)
    assert live_group_members(target.process.pid) == []
    assert child in target.stopped_pids


def test_stop_kills_a_child_that_left_the_group(vllm_config, tmp_path, targets, monkeypatch):
    target = start_target(vllm_config(), tmp_path, targets, "fork_escaped", monkeypatch)
    (child,) = child_pids(target)
    poll_until(lambda: os.getpgid(child) != target.process.pid, 5)  # setsid done
    target.root_pids()  # a telemetry sample sees the tree
    target.stop(grace_s=1.0)
    assert not alive(child)


def test_restart_comes_back_on_the_same_url(vllm_config, tmp_path, targets, monkeypatch):
    config = vllm_config(restart="on-crash", max_restarts=1)
    target = start_target(config, tmp_path, targets, "crash_after=0.5", monkeypatch)
    old_url, old_pid = target.info.base_url, target.process.pid
    poll_until(lambda: target.health() == "exited", 10)
    assert target.may_restart()
    monkeypatch.setenv("FAKE_VLLM_MODE", "ok")
    info = target.restart()
    assert info.base_url == old_url and target.info is info
    assert target.process.pid != old_pid and info.root_pids == [target.process.pid]
    assert target.health() == "up" and target.exit_code() is None
    assert target.restarts == 1 and not target.may_restart()
    assert (tmp_path / "run" / "server.log").read_text().count("===== soak: starting vLLM") == 2


def test_restart_of_a_live_server_stops_it_first(vllm_config, tmp_path, targets, monkeypatch):
    target = start_target(vllm_config(), tmp_path, targets, "fork_child", monkeypatch)
    (first_child,) = child_pids(target)
    target.restart(grace_s=1.0)
    assert not alive(first_child)
    assert target.health() == "up"


def test_restart_moves_to_a_new_port_when_the_old_one_is_taken(vllm_config, tmp_path, targets, monkeypatch):
    monkeypatch.setattr(target_base, "PORT_REUSE_WAIT_S", 0.3)
    target = start_target(vllm_config(), tmp_path, targets, "ok", monkeypatch)
    old_port = int(target.info.base_url.rsplit(":", 1)[1])
    target.stop(grace_s=1.0)
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the old server's port is in TIME_WAIT
        squatter.bind(("127.0.0.1", old_port))
        squatter.listen()
        info = target.restart()
    assert info.base_url != f"http://127.0.0.1:{old_port}"
    assert target.health() == "up"


class HoldingSampler:
    """Stands in for GpuSampler: the given PIDs hold VRAM for the first `polls` readings."""

    available = True

    def __init__(self, polls: int):
        self.polls = polls
        self.closed = False

    def holding(self, pids):
        self.polls -= 1
        return {pids[0]: 1 << 30} if self.polls >= 0 else {}

    def close(self):
        self.closed = True


@pytest.mark.parametrize(("polls", "released"), [(2, True), (10_000, False)])
def test_stop_waits_for_vram_release(vllm_config, tmp_path, targets, monkeypatch, polls, released):
    samplers = []
    monkeypatch.setenv("FAKE_VLLM_MODE", "ok")
    target = VllmTarget(vllm_config(), tmp_path / "run",
                        gpu_sampler_factory=lambda: samplers.append(HoldingSampler(polls)) or samplers[-1])
    target.vram_release_timeout_s = 1.5
    targets.append(target)
    target.start()
    target.stop(grace_s=1.0)
    assert target.vram_released is released
    assert samplers[0].closed
