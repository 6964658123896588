"""Service-level objectives per request (`--slo ttft=500ms,itl=50ms,e2e=20s`) and whether a request met them.

A request is *good* when it succeeded and every target that is set holds: the definition of goodput in
`vllm bench serve --goodput` and in DistServe. The targets:

* `ttft`: intended send → first content token (a non-streamed answer, or an expected refusal, has its first
  token at its end: its E2E counts);
* `tpot`: time per output token after the first, (E2E − TTFT) ÷ (output tokens − 1), as vLLM computes it
  (0 for one token or none);
* `itl`: the mean gap between the request's content chunks (met with fewer than two chunks); with one token a
  chunk it is TPOT measured to the last chunk instead of the last byte;
* `e2e` (or vLLM's name `e2el`): intended send → last byte.

soak measures from the intended send time, so a late client or a queue shows in goodput too (docs/load.md,
"Measurements"). Failed and cancelled requests are never good. Leaf module: the config, the telemetry and the
tests import it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from soak.errors import ConfigError
from soak.units import parse_duration

KEYS = ("ttft", "itl", "tpot", "e2e")
ALIASES = {"e2el": "e2e"}  # vllm bench serve's name for E2E latency
LABELS = {"ttft": "TTFT", "itl": "mean ITL", "tpot": "TPOT", "e2e": "E2E"}
_BARE_NUMBER = re.compile(r"\d+(\.\d+)?")
_PAIR = re.compile(r"([^=:\s]+)\s*[=:]\s*(\S.*)")


class RequestLike(Protocol):
    """The fields of `soak.load.RequestRecord` an SLO reads."""

    ttft_ms: float | None
    e2e_ms: float
    itl_ms: tuple[float, ...]
    output_tokens: int | None
    error_class: str | None
    expected_error: bool


class SloTargets(BaseModel):
    """The targets in milliseconds; None where the run set none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: float | None = Field(default=None, gt=0)
    itl_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2e_ms: float | None = Field(default=None, gt=0)

    def targets(self) -> dict[str, float]:
        """{key: target in ms} of the targets set, in KEYS order."""
        return {key: value for key in KEYS if (value := getattr(self, f"{key}_ms")) is not None}

    def describe(self) -> str:
        """`TTFT ≤ 500 ms, E2E ≤ 20 s`."""
        return ", ".join(f"{LABELS[key]} ≤ {_ms_text(ms)}" for key, ms in self.targets().items())

    def met(self, record: RequestLike) -> bool:
        """Whether the request succeeded and met every target set."""
        if record.error_class is not None and not record.expected_error:
            return False  # failed, timed out or cancelled: never good
        return all(value <= target for value, target in zip(self._values(record), self._limits()))

    def _limits(self) -> list[float]:
        return [target for target in (self.ttft_ms, self.itl_ms, self.tpot_ms, self.e2e_ms) if target is not None]

    def _values(self, record: RequestLike) -> list[float]:
        ttft = record.ttft_ms if record.ttft_ms is not None else record.e2e_ms
        values = []
        if self.ttft_ms is not None:
            values.append(ttft)
        if self.itl_ms is not None:
            values.append(sum(record.itl_ms) / len(record.itl_ms) if record.itl_ms else 0.0)
        if self.tpot_ms is not None:
            tokens = record.output_tokens or 0
            values.append((record.e2e_ms - ttft) / (tokens - 1) if tokens > 1 else 0.0)
        if self.e2e_ms is not None:
            values.append(record.e2e_ms)
        return values


def _ms_text(ms: float) -> str:
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


def target_ms(key: str, value: Any) -> float:
    """One target in ms: a duration (`500ms`, `20s`) or a bare number of milliseconds (as `--goodput` takes)."""
    text = str(value).strip().lower()
    if (isinstance(value, (int, float)) and not isinstance(value, bool)) or _BARE_NUMBER.fullmatch(text):
        ms = float(text)
    else:
        try:
            ms = 1000.0 * parse_duration(text)
        except ConfigError:
            raise ValueError(f"{key}: {value!r} is not a duration (use forms like 500ms or 20s)") from None
    if ms <= 0:
        raise ValueError(f"{key}: the target must be above 0 (got {value!r})")
    return ms


def _pairs(value: Any) -> list[tuple[str, Any]]:
    """(key, value) pairs of `ttft=500ms,e2e=20s`, a TOML table or a list of `KEY=VALUE` strings."""
    if isinstance(value, Mapping):  # a TOML table, or the stored config's {"ttft_ms": 500.0, "itl_ms": None, …}
        return [(str(key).removesuffix("_ms"), item) for key, item in value.items() if item is not None]
    items = value.split(",") if isinstance(value, str) else [str(item) for item in value]
    pairs = []
    for item in (part.strip() for part in items):
        if not item:
            continue
        match = _PAIR.fullmatch(item)
        if not match:
            raise ValueError(f"{item!r} is not KEY=DURATION (e.g. ttft=500ms)")
        pairs.append((match[1], match[2]))
    return pairs


def parse_slo(value: Any) -> SloTargets | None:
    """The SLO of `--slo`, `SOAK_SLO` or the TOML key `slo`; None when empty. ValueError (one line) for an
    unknown metric, a metric given twice or a bad duration."""
    if value is None or isinstance(value, SloTargets):
        return value
    targets: dict[str, float] = {}
    for raw_key, target in _pairs(value):
        key = ALIASES.get(raw_key.strip().lower(), raw_key.strip().lower())
        if key not in KEYS:
            raise ValueError(f"unknown SLO metric {raw_key!r}: use ttft, itl, tpot or e2e")
        if key in targets:
            raise ValueError(f"SLO metric {key} is given twice")
        targets[key] = target_ms(key, target)
    return SloTargets(**{f"{key}_ms": ms for key, ms in targets.items()}) if targets else None


def stored_slo_ms(config: Mapping[str, Any]) -> dict[str, float]:
    """{metric: target ms} of the `--slo` in a run's stored config (JSON); {} for a run that set none."""
    slo = config.get("slo") or {}
    return {key.removesuffix("_ms"): float(ms) for key, ms in slo.items() if ms is not None}
