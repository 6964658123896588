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


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def config_hash(config_json: str, scenario_texts: list[str]) -> str:
    """A short hash of the resolved config and the scenario sources, to tell two runs' setups apart."""
    digest = hashlib.sha256(config_json.encode())
    for text in scenario_texts:
        digest.update(text.encode())
    return digest.hexdigest()[:16]


def capture_environment(gpus: list[dict[str, Any]], server: dict[str, Any], hash_text: str) -> dict[str, Any]:
    """Host, CPU, GPUs, versions and the server command."""
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
        "config_hash": hash_text,
        **server,
    }


def dumps(value: Any) -> str:
    """JSON for the database (sorted keys, anything unknown as text)."""
    return json.dumps(value, sort_keys=True, default=str)
