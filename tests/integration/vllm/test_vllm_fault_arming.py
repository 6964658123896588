"""--vllm-fault against a stand-in `vllm` that loads no plugins: the start fails, saying why, rather than run a
soak with no fault in it. (The plugin in a real vLLM: test_real_vllm_faults.py.)"""

from __future__ import annotations

import pytest

from soak.errors import TargetError
from soak.target import make_target

pytestmark = pytest.mark.timeout(60)


def test_faults_vllm_did_not_load_fail_the_start(vllm_config, tmp_path, targets, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_MODE", "ok")
    target = make_target(vllm_config(vllm_fault=["rss-leak=1MiB"]), tmp_path / "run")
    targets.append(target)
    with pytest.raises(TargetError, match="did not load soak's fault plugin: install soak in the Python vLLM runs in"):
        target.start()
    assert target.process.exit_code() is not None  # the server it started is stopped again


def test_without_faults_the_same_server_starts(vllm_config, tmp_path, targets, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_MODE", "ok")
    target = make_target(vllm_config(), tmp_path / "run")
    targets.append(target)
    assert target.start().kind == "vllm"
