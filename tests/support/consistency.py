"""One truth per finding: the thresholds a finding's sentence states agree with its `threshold` field.

Shared by the report's real-run tests and the analysis tests over synthetic runs. A sentence states a threshold
as "threshold 16.0 MiB/h", "(limit 10 s)", "the 1.00 % budget" or a comparison of two quantities ("6.8 ms ≤
10 ms"); only quantities of the finding's own dimension are compared, rounded figures within half their last digit.
"""

from __future__ import annotations

import re
from typing import Any

NUMBER = r"([+-]?\d[\d,]*(?:\.\d+)?)"
UNIT = r"(GiB/h|MiB/h|KiB/h|B/h|GiB|MiB|KiB|ms|s|pp|%|fds/h)"
# Where a sentence states the threshold: "threshold 16.0 MiB/h", "(limit 10 s)", "the 1.00 % budget",
# "… > 10 ms"; the number that follows (or, for a budget, precedes) is the threshold.
THRESHOLD_PATTERNS = (
    re.compile(rf"(?:threshold|limit)\s+\+?{NUMBER}\s*{UNIT}(?![\w/])"),
    re.compile(rf"{NUMBER}\s*{UNIT}\s+budget"),
    # a comparison between two quantities: "6.8 ms ≤ 10 ms", not "sends > 1 s"
    re.compile(rf"\d\s*{UNIT.replace('(', '(?:', 1)}\s*[<≤>≥]\s*\+?{NUMBER}\s*{UNIT}(?![\w/])"),
)
SCALE = {"B/h": 1, "KiB/h": 2**10, "MiB/h": 2**20, "GiB/h": 2**30, "B": 1, "KiB": 2**10, "MiB": 2**20,
         "GiB": 2**30, "ms": 1e-3, "s": 1.0, "%": 1.0, "pp": 1.0, "fds/h": 1.0}


def dimension(unit: str) -> str:
    """What a unit measures, so that only like is compared with like."""
    unit = unit.strip()
    if unit.startswith(("bytes", "B", "KiB", "MiB", "GiB")):
        return "bytes/h" if unit.endswith("/h") else "bytes"
    if unit in ("ms", "s"):
        return "time"
    if unit.startswith(("%", "pp")):
        return unit[:2].strip()
    return unit


def in_base(number: str, unit: str) -> float:
    """A shown quantity in base units: bytes, seconds, percent or points."""
    return float(number.replace(",", "")) * SCALE[unit]


def summary_in_base(value: float, unit: str) -> tuple[float, str]:
    """A summary.json quantity in the same base units and its dimension."""
    if unit.startswith("fraction"):
        return value * 100, "%"
    if unit == "ms":
        return value / 1000, "time"
    return value, dimension(unit)


def agrees(shown: str, shown_unit: str, actual: float) -> bool:
    """A rounded figure agrees with the exact one: within half its last digit, or 1 %."""
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    step = 0.5 * 10 ** -decimals * SCALE[shown_unit]
    return abs(in_base(shown, shown_unit) - actual) <= step + 0.01 * abs(actual) + 1e-12


def stated_thresholds(evidence: str) -> list[tuple[str, str]]:
    """(number, unit) of every threshold the sentence states."""
    found = []
    for pattern in THRESHOLD_PATTERNS:
        found += [match[-2:] for match in pattern.findall(evidence)]
    return found


def threshold_disagreements(finding: dict[str, Any]) -> tuple[int, list[str]]:
    """How many stated thresholds were compared with the finding's, and those that disagree."""
    if finding.get("threshold") is None:
        return 0, []
    threshold, dim = summary_in_base(finding["threshold"], finding["unit"])
    compared, wrong = 0, []
    for number, unit in stated_thresholds(finding["evidence"]):
        if dimension(unit) == dim:
            compared += 1
            if not agrees(number, unit, threshold):
                wrong.append(f"{finding['check']}: sentence says {number} {unit}, threshold is {finding['threshold']} "
                             f"{finding['unit']}: {finding['evidence']}")
    return compared, wrong
