"""The vLLM target's pure helpers: command line, served name, executable lookup, restart policy, health, VRAM wait."""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from soak.config import resolve_config
from soak.errors import TargetError
from soak.target import ExternalTarget, make_target
from soak.target.base import probe_up, url_port
from soak.target.vllm import (
    VllmTarget,
    find_vllm,
    option_values,
    probe_host,
    requested_port,
    served_name,
    vllm_command,
    wait_vram_released,
)


def config(tmp_path, **flags):
    return resolve_config({"duration": "1m", "out": str(tmp_path), **flags}, environ={})


def test_option_values_reads_both_spellings_and_the_last_one():
    args = ("--served-model-name", "a", "b", "--max-model-len", "512", "--served-model-name=c")
    assert option_values(args, "--served-model-name") == ["c"]
    assert option_values(args[:3], "--served-model-name") == ["a", "b"]
    assert option_values(args, "--port") is None


def test_served_name_is_the_first_served_model_name_else_the_model():
    assert served_name("Qwen/Qwen2.5-0.5B", ()) == "Qwen/Qwen2.5-0.5B"
    assert served_name("Qwen/Qwen2.5-0.5B", ("--served-model-name", "qwen", "q2")) == "qwen"
    assert served_name("m", ("--served-model-name=short",)) == "short"


def test_command_binds_localhost_on_the_given_port_and_passes_serve_args():
    assert vllm_command("/bin/vllm", "m", 8123, ("--enforce-eager", "--seed", "1")) == [
        "/bin/vllm", "serve", "m", "--host", "127.0.0.1", "--port", "8123", "--enforce-eager", "--seed", "1"]


def test_a_users_own_host_and_port_are_kept():
    args = ("--host", "0.0.0.0", "--port", "9000")
    assert vllm_command("vllm", "m", 8123, args) == ["vllm", "serve", "m", "--host", "0.0.0.0", "--port", "9000"]
    assert requested_port(args) == 9000
    assert probe_host(args) == "127.0.0.1"  # a wildcard bind is reached on localhost
    assert probe_host(("--host", "10.0.0.5")) == "10.0.0.5"
    with pytest.raises(TargetError, match="not a port number"):
        requested_port(("--port", "http"))


def test_find_vllm_prefers_vllm_bin_then_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "vllm"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # no vllm beside this interpreter
    monkeypatch.setenv("PATH", str(bin_dir))
    assert find_vllm(None) == str(exe)
    assert find_vllm(str(exe)) == str(exe)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(TargetError, match="--target URL"):
        find_vllm(None)
    exe.chmod(0o644)
    with pytest.raises(TargetError, match="not an executable file"):
        find_vllm(str(exe))


@pytest.mark.parametrize(("policy", "max_restarts", "done", "allowed"), [
    ("never", 3, 0, False), ("on-crash", 3, 0, True), ("on-crash", 3, 2, True), ("on-crash", 3, 3, False),
    ("on-crash", 0, 0, False),
])
def test_restart_policy(tmp_path, policy, max_restarts, done, allowed):
    target = make_target(config(tmp_path, model="m", restart=policy, max_restarts=max_restarts), tmp_path)
    assert isinstance(target, VllmTarget)
    target.restarts = done
    assert target.may_restart() is allowed


def test_an_external_target_is_never_restarted(tmp_path):
    target = ExternalTarget(config(tmp_path, target="http://127.0.0.1:9", restart="on-crash"), tmp_path)
    assert not target.may_restart()
    with pytest.raises(TargetError, match="cannot restart"):
        target.restart()


def test_a_managed_target_that_never_started_reads_down(tmp_path):
    target = make_target(config(tmp_path, model="m"), tmp_path)
    assert target.health() == "down" and target.exit_code() is None and target.stop() is None


class StatusHandler(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):
        self.send_response(type(self).status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        return


@pytest.fixture
def status_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StatusHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("status", "reading"), [(200, "up"), (503, "down"), (500, "down"), (404, "up")])
def test_probe_up_reads_health_status(status_server, monkeypatch, status, reading):
    monkeypatch.setattr(StatusHandler, "status", status)
    url = f"http://127.0.0.1:{status_server.server_address[1]}"
    assert probe_up(url) == reading
    assert url_port(url) == status_server.server_address[1]


@pytest.mark.timeout(20)
def test_probe_up_is_down_when_nothing_listens(status_server):
    port = status_server.server_address[1]
    status_server.shutdown()
    status_server.server_close()
    assert probe_up(f"http://127.0.0.1:{port}") == "down"


class FakeSampler:
    def __init__(self, available=True, held_for=0):
        self.available, self.held_for, self.polls = available, held_for, 0

    def holding(self, pids):
        self.polls += 1
        return {pids[0]: None} if self.polls <= self.held_for else {}


@pytest.mark.timeout(20)
def test_wait_vram_released():
    assert wait_vram_released(None, [1], 1.0)
    assert wait_vram_released(FakeSampler(available=False, held_for=99), [1], 1.0)
    assert wait_vram_released(FakeSampler(held_for=99), [], 1.0)
    released = FakeSampler(held_for=3)
    assert wait_vram_released(released, [1], 5.0, poll_s=0.01) and released.polls == 4
    assert not wait_vram_released(FakeSampler(held_for=10**6), [1], 0.2, poll_s=0.01)


def test_the_vllm_beside_soaks_own_python_comes_before_the_one_on_path(tmp_path, monkeypatch):
    own, other = tmp_path / "venv" / "bin", tmp_path / "elsewhere"
    for folder in (own, other):
        folder.mkdir(parents=True)
        (folder / "vllm").write_text("#!/bin/sh\n")
        (folder / "vllm").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(own / "python"))  # a virtual environment, not activated
    monkeypatch.setenv("PATH", str(other))
    assert find_vllm(None) == str(own / "vllm")
