"""The vLLM target driving soak's real CPU reference server (behind the stand-in `vllm`), and the reference
target's own restart: real completions, a real crash, a restart on the same URL."""

from __future__ import annotations

import json
import urllib.request

import pytest
from vllm_helpers import poll_until

from soak.config import resolve_config
from soak.target import make_target
from soak.target.reference import ReferenceTarget

pytestmark = pytest.mark.timeout(90)


def chat(base_url: str, model: str) -> dict:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
    request = urllib.request.Request(base_url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def metrics_text(base_url: str) -> str:
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as response:
        return response.read().decode()


def test_vllm_target_serves_real_completions(vllm_config, tmp_path, targets, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_BACKEND", "refserver")
    target = make_target(vllm_config(), tmp_path / "run")
    targets.append(target)
    info = target.start()
    assert info.model == "fake/model-7b"
    assert chat(info.base_url, info.model)["usage"]["completion_tokens"] >= 1
    assert "vllm:num_requests_running" in metrics_text(info.base_url)
    assert target.health() == "up"


def test_vllm_target_sees_a_real_crash_and_restarts_on_the_same_url(vllm_config, tmp_path, targets, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_BACKEND", "refserver")
    monkeypatch.setenv("FAKE_VLLM_REFSERVER_ARGS", "--fault crash-after=1s")
    target = make_target(vllm_config(restart="on-crash", max_restarts=2), tmp_path / "run")
    targets.append(target)
    url = target.start().base_url
    poll_until(lambda: target.exit_code() is not None, 20)
    assert target.exit_code() == 70 and target.health() == "exited"
    assert "crash-after" in target.log_tail()
    monkeypatch.delenv("FAKE_VLLM_REFSERVER_ARGS")
    assert target.may_restart()
    info = target.restart()
    assert info.base_url == url and target.health() == "up"
    assert chat(url, info.model)["choices"]


def test_reference_target_restarts_on_the_same_url(tmp_path):
    config = resolve_config({"duration": "1m", "out": str(tmp_path / "out"), "restart": "on-crash"}, environ={})
    target = make_target(config, tmp_path / "run")
    assert isinstance(target, ReferenceTarget)
    try:
        info = target.start()
        old_pid = target.process.pid
        restarted = target.restart(grace_s=5.0)
        assert restarted.base_url == info.base_url and target.process.pid != old_pid
        assert target.health() == "up" and target.restarts == 1
        assert chat(info.base_url, restarted.model)["choices"]
    finally:
        target.stop(5.0)
