"""soak's vLLM plugin: faults planted inside the real engine, for proving soak's verdicts on vLLM itself.

vLLM calls `register` in each of its processes (API server, EngineCore, workers) through the
`vllm.general_plugins` entry point `soak_faults`. It does nothing unless `SOAK_VLLM_FAULTS` names faults, which
soak sets only for `soak start --vllm-fault NAME[=VALUE]` (docs/vllm.md, "Faults inside vLLM"); nothing of vLLM
is imported here until then.
"""

from __future__ import annotations

import logging
import os

from soak.vllm_plugin.spec import ARMED_LINE, FAULTS_ENV, parse_faults

log = logging.getLogger("vllm.soak_faults")


def register() -> None:
    """Plant the faults `SOAK_VLLM_FAULTS` names; an error stops vLLM at start when one cannot be planted."""
    specs = [spec for spec in os.environ.get(FAULTS_ENV, "").split(",") if spec.strip()]
    if not specs:
        return
    from soak.vllm_plugin.engine_faults import plant

    plant(parse_faults(specs))
    log.warning("%s: %s (pid %d)", ARMED_LINE, ", ".join(specs), os.getpid())
