"""The output of every check: one `Finding`, shaped for summary.json and the report."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from soak.analysis.step_records import Staircase, StepResult
from soak.analysis.warmup import WarmupCut
from soak.contracts import Verdict

# Short names for the checks that import them; they are the Verdict members themselves.
PASS, SUSPECT, FAIL = Verdict.PASS, Verdict.SUSPECT, Verdict.FAIL
INCONCLUSIVE, SKIPPED, INVALID = Verdict.INCONCLUSIVE, Verdict.SKIPPED, Verdict.INVALID
VERDICTS = tuple(Verdict)

CHECK_ORDER = (
    "leak.rss", "leak.vram", "leak.kv", "leak.fds",
    "creep.ttft_p99", "creep.itl_p99", "creep.e2e_p99", "creep.server_itl",
    "errors.rise", "errors.budget", "errors.bursts", "errors.invalid_output",
    "hang", "crashes", "gpu.xid", "gpu.ecc", "throughput.decay", "client.saturation",
    "server.log_errors", "canary", "goodput.decay", "goodput.floor",
)
CHECK_NAMES = CHECK_ORDER + ("baseline.regression",)


@dataclass(frozen=True)
class Trend:
    """A fitted line a chart can draw: in "log" space exp(intercept + slope_per_s·(t − t0_s)), in "linear" space
    intercept + slope_per_s·(t − t0_s), t in seconds since run start; `series` names the chart's series when the
    check's name does not say it (e.g. "kv_usage")."""

    slope_per_s: float
    intercept: float
    t0_s: float
    space: str = "linear"
    series: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return _set_fields(self)


@dataclass(frozen=True)
class Exhaustion:
    """When a leak's headroom runs out at the measured slope (`hours` None when the slope is not upward)."""

    resource: str
    headroom: float
    hours: float | None

    def as_dict(self) -> dict[str, Any]:
        return _all_fields(self)


@dataclass(frozen=True)
class PerRequest:
    """A leak's slope divided by the request rate: what each request leaves behind, with its CI."""

    value: float
    ci: tuple[float, float]
    unit: str

    def as_dict(self) -> dict[str, Any]:
        return _all_fields(self)


@dataclass(frozen=True)
class ScenarioGrowth:
    """One scenario's fitted growth per request (or, for the "time" term, per second) and its share of the
    growth the attribution fit explains."""

    scenario: str
    per_request: float
    ci: tuple[float, float]
    unit: str
    share: float

    def as_dict(self) -> dict[str, Any]:
        return _all_fields(self)


@dataclass(frozen=True)
class ProcessGrowth:
    """One server process's own leak trend, per hour in `unit` (value, ci and detection_limit None when too
    few points were fitted): the step found, the lasting steps whose net growth failed, and where its warm-up
    ended (each None when there is none)."""

    verdict: Verdict
    value: float | None
    ci: tuple[float, float] | None
    detection_limit: float | None
    mk_p: float
    points: int
    step: StepResult | None
    net_growth: Staircase | None
    warmup: WarmupCut | None
    pid: int
    name: str
    unit: str
    floor: float | None
    trend: Trend | None

    def as_dict(self) -> dict[str, Any]:
        out = _all_fields(self)
        for key in ("step", "net_growth", "warmup"):
            out[key] = None if out[key] is None else out[key].to_dict()
        out["trend"] = None if self.trend is None else self.trend.as_dict()
        return out


def _all_fields(record: Any) -> dict[str, Any]:
    """Every field of a record in declaration order (nested records left as they are)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


def _set_fields(record: Any) -> dict[str, Any]:
    """The fields of a record that are not None, in declaration order."""
    return {key: value for key, value in _all_fields(record).items() if value is not None}


@dataclass
class Finding:
    """One check's verdict with the number it rests on and a sentence of evidence.

    `value`, `ci`, `threshold` and `detection_limit` share `unit`; `detection_limit` is the smallest
    change the run rules out (the upper end of a trend's CI). `exhaustion` (leak checks) says when the
    headroom runs out at the measured slope; `attribution` (leak checks) the growth per request of
    each scenario. `next_step` (any verdict but PASS and SKIPPED) says in one line what would settle the
    check or where to look. `trend` lets a chart draw the fitted line in the finding's series unit (see
    details). Each evidence record turns into its summary.json object with `as_dict()`.
    """

    check: str
    verdict: Verdict
    value: float | None = None
    unit: str = ""
    ci: tuple[float, float] | None = None
    threshold: float | None = None
    evidence: str = ""
    per_process: list[ProcessGrowth] | None = None
    per_request: PerRequest | None = None
    percentile_used: str | None = None
    trend: Trend | None = None
    detection_limit: float | None = None
    exhaustion: Exhaustion | None = None
    attribution: list[ScenarioGrowth] | None = None
    next_step: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r} for {self.check}")
        self.verdict = Verdict(self.verdict)  # a check may hand over the plain string

    def to_dict(self) -> dict[str, Any]:
        """The summary.json shape: the seven fixed keys, then the optional ones that are set."""
        out: dict[str, Any] = {
            "check": self.check, "verdict": self.verdict, "value": _num(self.value),
            "unit": self.unit, "ci": None if self.ci is None else [_num(v) for v in self.ci],
            "threshold": _num(self.threshold), "evidence": self.evidence,
        }
        for key in ("per_process", "per_request", "percentile_used", "trend", "detection_limit",
                    "exhaustion", "attribution", "next_step"):
            if getattr(self, key) is not None:
                out[key] = _clean(_as_json(getattr(self, key)))
        if self.details:
            out["details"] = _clean(self.details)
        return out


def _as_json(value: Any) -> Any:
    """An evidence field as JSON-shaped data: records (alone or in a list) by their `as_dict()`."""
    if isinstance(value, list):
        return [_as_json(item) for item in value]
    return value.as_dict() if hasattr(value, "as_dict") else value


def _num(value: Any) -> float | int | None:
    """A JSON-safe number: numpy scalars become Python ones, nan/inf become None."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) or (hasattr(value, "dtype") and value.dtype.kind in "iu"):
        return int(value)
    number = float(value)
    return number if math.isfinite(number) else None


def _clean(value: Any) -> Any:
    """Recursively make a value JSON-safe (tuples → lists, numpy → Python, nan → None)."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "tolist") and not hasattr(value, "dtype"):
        return _clean(value.tolist())
    if hasattr(value, "dtype"):
        return _clean(value.tolist()) if getattr(value, "ndim", 0) else _num(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _num(value)
    return value


def skipped(check: str, why: str, **details: Any) -> Finding:
    """A check that had no data to judge."""
    return Finding(check=check, verdict=SKIPPED, evidence=why, details=dict(details))


def inconclusive(check: str, why: str, **fields: Any) -> Finding:
    """A check that had data, but not enough to decide."""
    return Finding(check=check, verdict=INCONCLUSIVE, evidence=why, **fields)
