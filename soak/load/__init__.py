"""Load generation: open-loop arrivals on a rate plan, phases as a Locust shape, an OpenAI SSE client.

For the run conductor: `start_load(config, base_url=…, model=…, t0=…, hooks=LoadHooks(…))` → `LoadHandle`.
For scenario authors: subclass `OpenAIUser`, decorate methods with `@task`, call `self.client.chat(…)`.

Importing `soak.load` itself is cheap; the names below import Locust (which gevent-patches the process) on
first use, so `soak.load.plan` and friends stay usable without it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "start_load": "soak.load.runner", "LoadHandle": "soak.load.runner", "LoadHooks": "soak.load.hooks",
    "RequestRecord": "soak.load.records", "OpenAIUser": "soak.load.user", "OpenAIClient": "soak.load.client",
    "Reply": "soak.load.client", "Expect": "soak.load.client", "task": "locust", "tag": "locust",
    "builtin_names": "soak.load.scenarios", "ClientSettings": "soak.load.settings",
    "gather_workers": "soak.load.pool", "check_load": "soak.load.runner", "NoLoad": "soak.load.runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'soak.load' has no attribute {name!r}")
    module = importlib.import_module(_EXPORTS[name])
    return getattr(module, name)
