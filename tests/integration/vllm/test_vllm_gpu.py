"""Real vLLM on a real GPU: start, VRAM seen per process of the tree, engine death, restart on the same URL,
stop with the VRAM released. Runs only where NVML sees a GPU, `vllm` is installed and a model is at hand:

    SOAK_TEST_VLLM_MODEL=Qwen/Qwen2.5-0.5B-Instruct pytest -m gpu tests/integration/vllm/test_vllm_gpu.py

The model must already be in the Hugging Face cache (or be a local folder): the test never downloads.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import urllib.request
from pathlib import Path

import pytest
from vllm_helpers import alive, poll_until

from soak.config import resolve_config
from soak.target.vllm import VllmTarget, live_group_members
from soak.telemetry.gpu import GpuSampler
from soak.telemetry.process import ProcessTreeSampler

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(1200)]

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
SERVE_ARGS = ["--gpu-memory-utilization", "0.3", "--max-model-len", "1024", "--max-num-seqs", "8",
              "--enforce-eager", "--seed", "0"]


def hf_cached(model: str) -> bool:
    """Whether a Hub model id is in the local Hugging Face cache (or `model` is a local folder)."""
    if Path(model).is_dir():
        return True
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")
    return (Path(hub) / ("models--" + model.replace("/", "--")) / "snapshots").is_dir()


@pytest.fixture
def gpu_sampler():
    sampler = GpuSampler()
    if not sampler.available:
        pytest.skip(f"no GPU: {sampler.reason}")
    yield sampler
    sampler.close()


@pytest.fixture
def vllm_setup(tmp_path):
    vllm_bin = os.environ.get("SOAK_VLLM_BIN") or shutil.which("vllm")
    if not vllm_bin:
        pytest.skip("no `vllm` on PATH (set SOAK_VLLM_BIN)")
    model = os.environ.get("SOAK_TEST_VLLM_MODEL", DEFAULT_MODEL)
    if not hf_cached(model):
        pytest.skip(f"model {model} is not in the local Hugging Face cache (set SOAK_TEST_VLLM_MODEL)")
    return resolve_config({"duration": "10m", "out": str(tmp_path / "out"), "model": model, "vllm_bin": vllm_bin,
                           "serve_arg": SERVE_ARGS, "startup_timeout": "10m", "restart": "on-crash"}, environ={})


def chat(base_url: str, model: str) -> dict:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8})
    request = urllib.request.Request(base_url + "/v1/chat/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def tree_vram(sampler: GpuSampler, root_pids: list[int]) -> dict[int, int | None]:
    return sampler.holding(ProcessTreeSampler(root_pids).tree_pids())


def test_vllm_lifecycle_on_a_gpu(gpu_sampler, vllm_setup, tmp_path):
    target = VllmTarget(vllm_setup, tmp_path / "run")
    try:
        info = target.start()
        assert target.health() == "up" and chat(info.base_url, info.model)["choices"]
        held = poll_until(lambda: tree_vram(gpu_sampler, info.root_pids), 60)
        assert held, ("NVML lists no VRAM for the server's PIDs; in a container without the host PID namespace "
                      "NVML reports host PIDs, which soak cannot match")
        gpu_rows, _ = gpu_sampler.sample([])
        assert all(row.mem_used_bytes and row.mem_total_bytes for row in gpu_rows)

        engine_pid = max(held, key=lambda pid: held[pid] or 0)  # the EngineCore holds the GPU memory
        os.kill(engine_pid, signal.SIGKILL)
        poll_until(lambda: target.health() != "up", 120)  # vLLM shuts its API server down, or /health fails

        restarted = target.restart()
        assert restarted.base_url == info.base_url and target.health() == "up"
        assert chat(restarted.base_url, restarted.model)["choices"]

        pgid = target.process.pid
        target.stop()
        assert target.vram_released is True, f"VRAM still held after stop by {target.stopped_pids}"
        assert live_group_members(pgid) == [] and not any(alive(pid) for pid in target.stopped_pids)
    finally:
        target.stop()
