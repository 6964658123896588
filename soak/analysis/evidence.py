"""Shared phrases that turn a TrendResult into words."""

from __future__ import annotations

from collections.abc import Callable

from soak.analysis.findings import FAIL, PASS
from soak.analysis.fmt import duration_text, p_text
from soak.analysis.trend import A_FALL, SLOW_DRIFT, TrendResult

MATERIAL_PHRASE = "grows less over the judged span than the least change that can FAIL"


def trend_caveats(result: TrendResult, threshold_text: str) -> str:
    """Why a trend fell short of FAIL, e.g. "below the practical threshold 16.0 MiB/h"."""
    phrases = {
        "significant": "not significant once autocorrelation is allowed for",
        "ci_above_zero": "CI not above 0",
        "ci_above_half": "CI not above half the threshold",
        "practical": f"below the practical threshold {threshold_text}",
        "persistent": "does not persist in the 2nd half",
        "material": MATERIAL_PHRASE,
    }
    return ", ".join(phrases[name] for name in result.failed_gates())


def trend_sentence(result: TrendResult, subject: str, change_text: str, ci_text: str,
                   threshold_text: str, confidence: float, verbs: tuple[str, str] = ("rises", "falls")) -> str:
    """`RSS of X rises 47.2 MiB/h (95 % CI 41.0–53.5 MiB/h), Mann–Kendall p=2e-9, persists in 2nd half`
    followed, for anything short of FAIL, by why it is not a FAIL. `verbs` word an upward and a
    downward slope of the (bad-is-up) series."""
    verb = verbs[0] if result.slope_per_s > 0 else (verbs[1] if result.slope_per_s < 0 else "is flat at")
    if verb != "is flat at":  # the verb carries the sign
        change_text = change_text.lstrip("+-")
    text = (f"{subject} {verb} {change_text} ({100 * confidence:g} % CI {ci_text}), "
            f"Mann–Kendall {p_text(result.mk_p)}")
    if result.gates.get("persistent"):
        text += ", persists in 2nd half"
    caveats = trend_caveats(result, threshold_text)
    return f"{text}; {caveats}" if caveats else f"{text}; threshold {threshold_text}"


def detection_sentence(result: TrendResult, amount: Callable[[float], str]) -> str:
    """What the run could rule out, for a finding short of FAIL: `amount` words a slope per second
    in the finding's terms. E.g. "this run rules out rises above 610 MiB/h; about 9h00m of this load
    would rule out 16.0 MiB/h"."""
    limit = result.detection_limit_per_s
    if not result.n or limit != limit:  # nan: untested
        return ""
    text = f"this run rules out rises above {amount(max(limit, 0.0))}{_bound_reason(result)}"
    if result.verdict == PASS:
        return text
    needed = result.span_needed_s()
    if needed is not None:
        text += f"; about {duration_text(needed)} of this load would rule out {amount(result.min_slope_per_s)}"
    return text


def settle_step(result: TrendResult, amount: Callable[[float], str]) -> str | None:
    """What would settle a trend that is neither PASS nor FAIL: "run ≥ 9h00m of judged load at this rate to rule
    out 16.0 MiB/h"; None when the trend decided, or when no length of this load would rule the threshold out
    (the slope itself is at or past it)."""
    if result.verdict in (PASS, FAIL) or not result.n:
        return None
    needed = result.span_needed_s()
    if needed is None:
        return None
    return (f"run ≥ {duration_text(needed)} of judged load (after warm-up, probes and outages) at this rate "
            f"to rule out {amount(result.min_slope_per_s)}")


def _bound_reason(result: TrendResult) -> str:
    """Why the bound is more than the interval's upper end, in a parenthesis (nothing when it is that end)."""
    if result.bound_note == A_FALL:
        return (" (a fall without the evidence a rise needs to FAIL bounds no rise: what wanders down can wander "
                "up as far, so the bound is the fall's size plus the strict interval's arm)")
    if result.bound_note == SLOW_DRIFT:
        return (f" (the series drifts on a timescale of {duration_text(result.correlation_time_s)}, too slow for "
                f"the {duration_text(result.span_s)} judged to average out, so its interval is no bound on a rise)")
    return ""
