"""Number formatting for evidence sentences (the one place units are converted for humans)."""

from __future__ import annotations

import math

from soak.units import BYTE_UNITS, format_bytes


def bytes_text(n_bytes: float, digits: int = 1) -> str:
    """`49479270` → `47.2 MiB`; keeps the sign; `n/a` for a missing value."""
    if n_bytes is None or not math.isfinite(n_bytes):
        return "n/a"
    return format_bytes(n_bytes, digits)


def bytes_range_text(low: float, high: float, digits: int = 1) -> str:
    """A CI in the unit of its larger end: `41.0–53.5 MiB`."""
    scale = max(abs(low), abs(high))

    def end(value: float) -> str:  # a small end keeps two digits rather than reading "0.0" beside "rules out 33.5 MiB"
        text = f"{value:.{digits}f}"
        return f"{value:.2g}" if value and float(text) == 0 else text

    for factor, unit in BYTE_UNITS:
        if scale >= factor:
            return f"{end(low / factor)}–{end(high / factor)} {unit}"
    return f"{low:.0f}–{high:.0f} B"


def p_text(p_value: float) -> str:
    """`2.1e-09` → `p=2e-9`, `0.034` → `p=0.034`."""
    if p_value is None or not math.isfinite(p_value):
        return "p=n/a"
    if p_value < 0.001:
        mantissa, exponent = f"{p_value:.0e}".split("e")
        return f"p={mantissa}e{int(exponent)}"
    return f"p={p_value:.3g}"


def pct_text(fraction: float, digits: int = 1) -> str:
    """`0.0123` → `1.2 %`."""
    if fraction is None or not math.isfinite(fraction):
        return "n/a"
    return f"{100 * fraction:.{digits}f} %"


def ms_text(value_ms: float) -> str:
    """`2300` → `2.30 s`, `41.2` → `41.2 ms`."""
    if value_ms is None or not math.isfinite(value_ms):
        return "n/a"
    return f"{value_ms / 1000:.2f} s" if abs(value_ms) >= 1000 else f"{value_ms:.3g} ms"


def duration_text(seconds: float) -> str:
    """`5400` → `1h30m`, `42` → `42s`."""
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes = int(round(seconds / 60))
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m"


def count_text(value: float, digits: int = 2) -> str:
    """A count that keeps its significant digits: `6.04` → `6.0`, `0.002` → `0.002`, `0.00314` → `0.0031`.

    One decimal from 1 up; below that `digits` significant digits, so a small per-request figure
    does not print as 0.0.
    """
    if value is None or not math.isfinite(value):
        return "n/a"
    if value == 0 or abs(value) >= 1:
        return f"{value:.1f}"
    return f"{value:.{digits}g}"


def small_bytes_text(n_bytes: float) -> str:
    """`bytes_text`, except that under 1 KiB it keeps two significant digits: `0.31 B`, `12 B`."""
    if n_bytes is None or not math.isfinite(n_bytes) or abs(n_bytes) >= 1024:
        return bytes_text(n_bytes)
    return f"{n_bytes:.2g} B" if n_bytes and abs(n_bytes) < 100 else f"{n_bytes:.0f} B"


def hours_text(hours: float) -> str:
    """`31.4` → `31 h`, `2.25` → `2.2 h`, `0.5` → `30m`."""
    if hours < 1:
        return duration_text(hours * 3600)
    return f"{hours:.0f} h" if hours >= 10 else f"{hours:.1f} h"
