"""Shared phrases that turn a TrendResult into words."""

from __future__ import annotations

from soak.analysis.fmt import p_text
from soak.analysis.trend import TrendResult


def trend_caveats(result: TrendResult, threshold_text: str) -> str:
    """Why a trend fell short of FAIL, e.g. "below the practical threshold 16.0 MiB/h"."""
    phrases = {
        "significant": "not significant at the gate",
        "ci_above_zero": "CI not above 0",
        "practical": f"below the practical threshold {threshold_text}",
        "persistent": "does not persist in the 2nd half",
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
