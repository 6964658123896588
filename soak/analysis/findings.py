"""The output of every check: one `Finding`, shaped for summary.json and the report."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from soak.contracts import Verdict

# Short names for the checks that import them; they are the Verdict members themselves.
PASS, SUSPECT, FAIL = Verdict.PASS, Verdict.SUSPECT, Verdict.FAIL
INCONCLUSIVE, SKIPPED, INVALID = Verdict.INCONCLUSIVE, Verdict.SKIPPED, Verdict.INVALID
VERDICTS = tuple(Verdict)

CHECK_ORDER = (
    "leak.rss", "leak.vram", "leak.kv", "leak.fds",
    "creep.ttft_p99", "creep.itl_p99", "creep.e2e_p99",
    "errors.rise", "errors.budget", "errors.bursts", "errors.invalid_output",
    "hang", "crashes", "gpu.xid", "gpu.ecc", "throughput.decay", "client.saturation",
    "server.log_errors", "canary", "goodput.decay", "goodput.floor",
)
CHECK_NAMES = CHECK_ORDER + ("baseline.regression",)


@dataclass
class Finding:
    """One check's verdict with the number it rests on and a sentence of evidence.

    `value`, `ci`, `threshold` and `detection_limit` share `unit`; `detection_limit` is the smallest
    change the run rules out (the upper end of a trend's CI). `exhaustion` (leak checks) says when the
    headroom runs out at the measured slope; `attribution` (leak checks) the growth per request of
    each scenario. `next_step` (any verdict but PASS and SKIPPED) says in one line what would settle the
    check or where to look. `trend` lets a chart draw the fitted line:
    {"slope_per_s", "intercept", "t0_s", "space"}; in "log" space the line is
    exp(intercept + slope_per_s·(t − t0_s)), in "linear" space intercept + slope_per_s·(t − t0_s),
    with t in seconds since run start and the result in the finding's series unit (see details).
    """

    check: str
    verdict: Verdict
    value: float | None = None
    unit: str = ""
    ci: tuple[float, float] | None = None
    threshold: float | None = None
    evidence: str = ""
    per_process: list[dict[str, Any]] | None = None
    per_request: dict[str, Any] | None = None
    percentile_used: str | None = None
    trend: dict[str, Any] | None = None
    detection_limit: float | None = None
    exhaustion: dict[str, Any] | None = None
    attribution: list[dict[str, Any]] | None = None
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
                out[key] = _clean(getattr(self, key))
        if self.details:
            out["details"] = _clean(self.details)
        return out


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
