"""Target stage: start or attach to the server under test."""

from pathlib import Path

from soak.config import RunConfig
from soak.target.base import ExternalTarget, ServerInfo, Target, auth_headers
from soak.target.reference import ReferenceTarget


def make_target(config: RunConfig, run_dir: Path) -> Target:
    """The target this config asks for: external URL, embedded vLLM, or the CPU reference server."""
    kind = config.target.kind
    if kind == "external":
        return ExternalTarget(config, run_dir)
    if kind == "vllm":
        from soak.target.vllm import VllmTarget

        return VllmTarget(config, run_dir)
    return ReferenceTarget(config, run_dir)


__all__ = ["ExternalTarget", "ReferenceTarget", "ServerInfo", "Target", "auth_headers", "make_target"]
