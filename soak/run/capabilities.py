"""The scenario mix against what the server accepts: asked once the server is up, before the run opens.

A scenario the server refuses stops the start with one line (TargetError, exit 2, no run opened, nothing lost),
or with --skip-unsupported leaves the mix; what was found and dropped becomes the run's `capabilities` event.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soak.config import RunConfig
from soak.contracts import ProvokedExchange
from soak.errors import TargetError
from soak.load.scenarios import effective_specs
from soak.target.capabilities import PROBE_TIMEOUT_S, Capability, Unsupported, probe_capabilities, unsupported


@dataclass(frozen=True)
class MixCheck:
    """What the server accepts, the scenarios dropped for it, and the config the run goes on with."""

    config: RunConfig
    found: dict[str, Capability]
    dropped: tuple[Unsupported, ...] = ()

    def describe(self) -> str:
        """One line for the start and the event: each feature's answer, then what was dropped."""
        line = "server capabilities: " + "; ".join(capability.describe() for capability in self.found.values())
        for item in self.dropped:
            line += f"; dropped {item.line()} (--skip-unsupported)"
        return line

    def provoked(self) -> tuple[ProvokedExchange, ...]:
        """The probes the server did not accept: what it logged answering them is their answer, not a fault."""
        return tuple(exchange for capability in self.found.values()
                     if (exchange := capability.provoked()) is not None)

    def data(self) -> dict[str, Any]:
        """The `capabilities` event's data (docs/load.md, "Capabilities")."""
        return {"features": {name: capability.as_dict() for name, capability in self.found.items()},
                "dropped": [{"scenario": d.scenario, "feature": d.feature, "answer": d.answer} for d in self.dropped]}


def check_mix(config: RunConfig, base_url: str, model: str, headers: dict[str, str],
              log_path: Path | None = None) -> MixCheck:
    """Probe the server (whose log, when soak knows it, is `log_path`) and judge the mix: TargetError naming the
    first scenario it refuses, unless --skip-unsupported, which drops every such scenario (all of them: still a
    TargetError)."""
    found = probe_capabilities(base_url, model, headers, min(config.load.request_timeout_s, PROBE_TIMEOUT_S),
                               log_path)
    lacking = unsupported((spec.name for spec in effective_specs(config.load)), found)
    if not lacking:
        return MixCheck(config, found)
    if not config.load.skip_unsupported:
        raise TargetError(f"{lacking[0].line()}; nothing was run (leave it out of --scenario, or drop it with "
                          "--skip-unsupported)")
    names = {item.scenario for item in lacking}
    kept = tuple(spec for spec in config.load.scenarios if spec.name not in names)
    if not kept:
        raise TargetError(f"every scenario of the mix needs what the server refused ({lacking[0].line()}); "
                          "nothing was run")
    load = config.load.model_copy(update={"scenarios": kept})
    return MixCheck(config.model_copy(update={"load": load}), found, tuple(lacking))
