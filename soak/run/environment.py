"""The environment a run tested, recorded with the run so the report can be rebuilt from the database alone."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import socket
from typing import Any

import psutil

from soak import __version__
from soak.config import RunConfig
from soak.load.scenarios import scenario_sources


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def config_hash(config: RunConfig) -> str:
    """A short hash of the resolved config and its scenarios' sources, to tell two runs' setups apart.

    It reads nothing of the machine, so one setup hashes the same on a GPU host and a CPU one; labels and
    --json say what to call a run and what to print, not how it runs, so they are left out.
    """
    digest = hashlib.sha256(config.model_dump_json(exclude={"labels", "json_output"}).encode())
    for text in scenario_sources(config.load.scenarios):
        digest.update(text.encode())
    return digest.hexdigest()[:16]


def capture_environment(config: RunConfig, server_cmd: list[str], gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """Host, CPU, GPUs, versions, the server command, the scenarios and the config's hash."""
    first_gpu = gpus[0] if gpus else {}
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": psutil.cpu_count(),
        "memory_total_bytes": psutil.virtual_memory().total,
        "gpus": gpus,
        "driver": first_gpu.get("driver"),
        "cuda": first_gpu.get("cuda_driver_version"),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "vllm": _version("vllm"),
        "locust": _version("locust"),
        "soak": __version__,
        "config_hash": config_hash(config),
        "server_cmd": " ".join(server_cmd) or None,
        "scenarios": [spec.name for spec in config.load.scenarios],
    }


def dumps(value: Any) -> str:
    """JSON for the database (sorted keys, anything unknown as text)."""
    return json.dumps(value, sort_keys=True, default=str)
