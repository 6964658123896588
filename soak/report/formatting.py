"""Human units for the report: bytes in KiB/MiB/GiB, fractions in %, times in ms, durations, UTC timestamps.

The database and summary.json keep one unit per quantity (bytes, seconds, fractions); only here, at the report's
edge, do numbers become text a release manager reads.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from soak.units import format_duration

MISSING = "—"
_BYTE_PREFIXES = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))
_BYTE_BASES = {"b", "byte", "bytes"}
_FRACTION_BASES = {"fraction", "ratio", "share"}
_PERCENT_BASES = {"%", "pct", "percent"}


def is_number(value: Any) -> bool:
    """True for a finite int or float (bools and NaN are not numbers here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def format_number(value: Any) -> str:
    """About three significant digits, thousands separated; "—" for a missing or non-finite value."""
    if not is_number(value):
        return MISSING
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    if isinstance(value, int):  # counts stay whole: "1 crashes", not "1.00 crashes"
        return f"{value:,}"
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def format_count(value: Any) -> str:
    """An integer count with thousands separators."""
    return f"{int(value):,}" if is_number(value) else MISSING


def format_percent(fraction: Any) -> str:
    """A 0–1 fraction as a percentage."""
    if not is_number(fraction):
        return MISSING
    return f"{fraction * 100:.2f} %" if fraction < 0.1 else f"{fraction * 100:.1f} %"


def _split_unit(unit: str) -> tuple[str, str]:
    """`bytes_per_h` or `bytes/h` → ("bytes", "/h"); `ms` → ("ms", "")."""
    normal = unit.strip().replace("_per_", "/").replace(" per ", "/")
    base, slash, rest = normal.partition("/")
    return base.strip(), (slash + rest.strip()) if slash else ""


def display_unit(unit: str | None, magnitude: float) -> tuple[float, str]:
    """The factor and label that show a quantity of `unit` and typical size `magnitude` in human units."""
    if not unit:
        return 1.0, ""
    base, per = _split_unit(unit)
    lower = base.lower()
    if lower in _BYTE_BASES:
        name, size = next((name, size) for name, size in _BYTE_PREFIXES if magnitude >= size or size == 1)
        return 1.0 / size, name + per
    if lower in _FRACTION_BASES or lower.startswith("fraction "):  # "fraction of KV cache" → "% of KV cache"
        return 100.0, "%" + base[len(lower.split()[0]):] + per
    if lower in _PERCENT_BASES:
        return 1.0, "%" + per
    if lower in {"s", "sec", "seconds"} and magnitude < 1:
        return 1000.0, "ms" + per
    if lower in {"us", "µs", "microseconds"}:
        return 0.001, "ms" + per
    return 1.0, base + per


def quantity_texts(value: Any, unit: str | None, ci: Any = None, threshold: Any = None,
                   detection_limit: Any = None) -> dict[str, str]:
    """Value, CI, threshold and detection limit of one finding as text in human units ("" for an absent CI or
    detection limit). Value, CI and detection limit share the unit their value and limit choose (a wide CI does not
    choose it: a flat slope with a CI reaching −1.2 GiB/h reads in MiB/h); the threshold is shown in its own size,
    as the sentences state it ("16.0 MiB/h" beside a 3.10 GiB/h slope)."""
    numbers = [x for x in [value, detection_limit] if is_number(x) and x != 0]
    numbers = numbers or [x for x in [*(ci or []), threshold] if is_number(x)]
    magnitude = max((abs(x) for x in numbers), default=0.0)
    factor, label = display_unit(unit, magnitude)

    def show(x: Any) -> str:
        return f"{format_number(x * factor)} {label}".strip() if is_number(x) else MISSING

    def show_threshold(x: Any) -> str:  # in its own size: "16.0 MiB/h" beside a 3.10 GiB/h slope, as sentences say
        own_factor, own_label = display_unit(unit, abs(x)) if is_number(x) and x != 0 else (factor, label)
        return f"{format_number(x * own_factor)} {own_label}".strip() if is_number(x) else MISSING

    has_ci = isinstance(ci, (list, tuple)) and len(ci) == 2 and all(is_number(x) for x in ci)
    return {
        "value": show(value),
        "ci": f"95 % CI {format_number(ci[0] * factor)} … {format_number(ci[1] * factor)} {label}".strip()
        if has_ci
        else "",
        "threshold": show_threshold(threshold),
        "detection_limit": show(detection_limit) if is_number(detection_limit) else "",
    }


def format_hours(hours: Any) -> str:
    """A time ahead in hours, as precise as it matters: `30m`, `2.2 h`, `31 h`, `12 days`."""
    if not is_number(hours):
        return MISSING
    if hours < 1:
        return format_span(hours * 3600)
    if hours < 10:
        return f"{hours:.1f} h"
    return f"{hours:.0f} h" if hours < 72 else f"{hours / 24:.0f} days"


def format_bytes(value: Any) -> str:
    """A byte count in the largest binary unit that keeps it ≥ 1."""
    if not is_number(value):
        return MISSING
    factor, label = display_unit("bytes", abs(value))
    return f"{format_number(value * factor)} {label}"


def format_span(seconds: Any) -> str:
    """A duration such as `23h59m10s`."""
    return format_duration(max(float(seconds), 0.0)) if is_number(seconds) else MISSING


def format_elapsed(seconds: Any) -> str:
    """Time since the run's start as `h:mm:ss` (hours may exceed 24)."""
    if not is_number(seconds):
        return MISSING
    sign = "-" if seconds < 0 else ""
    whole = int(round(abs(seconds)))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{hours}:{minutes:02d}:{secs:02d}"


def parse_utc(text: Any) -> datetime | None:
    """An ISO-8601 timestamp as an aware UTC datetime, or None when it is missing or malformed."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def format_utc(text: Any) -> str:
    """An ISO-8601 timestamp as `2026-12-02 10:15:00 UTC`; a malformed one as it was stored."""
    moment = parse_utc(text)
    if moment is None:
        return str(text) if text else MISSING
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def format_value(value: Any) -> str:
    """Any stored value (scalar, list, dict) as one line of words: no Python reprs, no JSON braces.

    Dicts become `key value, key value`, lists are comma-separated (dicts in a list `;`-separated), yes/no for
    booleans, numbers rounded; the raw form belongs behind a disclosure, never in the visible text.
    """
    if value is None or value == "" or value == [] or value == {}:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format_number(value)
    if isinstance(value, dict):
        return ", ".join(f"{key} {format_value(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple)):
        glue = "; " if any(isinstance(item, (dict, list, tuple)) for item in value) else ", "
        return glue.join(format_value(item) for item in value)
    return str(value)


def raw_json(value: Any) -> str:
    """A stored value as indented JSON, for the disclosures that show what was recorded."""
    return json.dumps(value, indent=1, ensure_ascii=False, sort_keys=True, default=str)


def format_rate(rps: Any) -> str:
    """A request rate with the digits that mean something: `2 req/s`, `2.5 req/s`, `0.333 req/s`."""
    return f"{rps:.3g} req/s" if is_number(rps) else MISSING


def format_seconds(seconds: Any) -> str:
    """A short time: `3 ms`, `4.3 s`, `12 s`, or a span such as `2m5s` from a minute on."""
    if not is_number(seconds):
        return MISSING
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    return format_span(seconds)


def format_share(fraction: Any) -> str:
    """A 0–1 fraction as a percentage, a zero as plain `0 %`."""
    return "0 %" if fraction == 0 else format_percent(fraction)
