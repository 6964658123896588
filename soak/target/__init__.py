"""Target stage: start or attach to the server under test."""

from pathlib import Path

from soak.config import RunConfig
from soak.errors import ConfigError
from soak.target.base import ExternalTarget, ServerInfo, Target, auth_headers
from soak.target.reference import ReferenceTarget


def make_target(config: RunConfig, run_dir: Path) -> Target:
    """The target this config asks for: external URL, embedded vLLM, or the CPU reference server."""
    kind = config.target.kind
    if config.target.vllm_faults and kind != "vllm":
        raise ConfigError("--vllm-fault plants faults in the vLLM soak starts: it needs --model NAME (the reference "
                          "server takes --reference-fault; a --target server is not soak's to change)")
    if kind == "external" and config.target.k8s_selector and config.replica:
        from soak.target.k8s import PodTarget  # a replica of a --k8s-selector fleet: its pod is watched

        return PodTarget(config, run_dir)
    if kind == "external":
        return ExternalTarget(config, run_dir)
    if kind == "vllm":
        from soak.target.vllm import VllmTarget

        return VllmTarget(config, run_dir)
    return ReferenceTarget(config, run_dir)


__all__ = ["ExternalTarget", "ReferenceTarget", "ServerInfo", "Target", "auth_headers", "make_target"]
