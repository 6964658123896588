"""The callbacks through which the load stage reports to the run conductor, called safely."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soak.contracts import EventKind
from soak.load.records import RequestRecord

log = logging.getLogger(__name__)


@dataclass
class LoadHooks:
    """All optional; all called in the main (master) process.

    on_request(record): once per finished request. on_event(kind, message, data: dict): `kind` is one of the
    load generator's `EventKind`s (context_length, phase, warmup_end, probe_*, load_paused/load_resumed).
    on_idle_probe(index, drained): at the end of each probe's hold, before arrivals resume, so the idle floor
    can be sampled.
    drain_timeout_s(): at each probe's start, the longest wait for in-flight requests (the conductor's comes
    from the latency observed so far); without it, the config's `probe_drain_timeout_s`.
    """

    on_request: Callable[[RequestRecord], Any] | None = None
    on_event: Callable[..., Any] | None = None
    on_idle_probe: Callable[[int, bool], None] | None = None
    drain_timeout_s: Callable[[], float] | None = None


class HookCaller:
    """Calls hooks, logging (never raising) what they raise: a failing consumer must not stop the load."""

    def __init__(self, hooks: LoadHooks | None) -> None:
        self.hooks = hooks or LoadHooks()

    def request(self, record: RequestRecord) -> None:
        if self.hooks.on_request is not None:
            self._safely(self.hooks.on_request, record)

    def event(self, kind: EventKind, message: str, data: dict[str, Any] | None = None) -> None:
        log.info("load event %s: %s", kind, message)
        data = data or {}
        if self.hooks.on_event is None:
            return
        self._safely(self.hooks.on_event, kind, message, data)

    def drain_timeout_s(self, default_s: float) -> float:
        """The consumer's idle-probe drain timeout now; `default_s` without one, or when it fails."""
        if self.hooks.drain_timeout_s is None:
            return default_s
        try:
            return float(self.hooks.drain_timeout_s())
        except Exception:
            log.exception("load hook drain_timeout_s failed")
            return default_s

    def idle_probe(self, index: int, drained: bool) -> None:
        if self.hooks.on_idle_probe is not None:
            self._safely(self.hooks.on_idle_probe, index, drained)

    @staticmethod
    def _safely(function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            function(*args, **kwargs)
        except Exception:
            log.exception("load hook %s failed", getattr(function, "__name__", function))
