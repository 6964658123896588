"""Parsing of the human units used at the edges: durations (`1h30m`) and byte sizes (`512KiB`)."""

import re

from soak.errors import ConfigError

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?", re.IGNORECASE)
_SIZE_FACTORS = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_duration(text: str | float | int) -> float:
    """Return seconds for `90s`, `5m`, `24h`, `1h30m`, `250ms` or a bare number of seconds."""
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        cleaned = text.strip().lower()
        if re.fullmatch(r"\d+(\.\d+)?", cleaned):
            seconds = float(cleaned)
        else:
            parts = _DURATION_PART.findall(cleaned)
            if not parts or "".join(n + u for n, u in parts) != cleaned:
                raise ConfigError(f"malformed duration {text!r}: use forms like 90s, 5m, 24h or 1h30m")
            seconds = sum(float(n) * _DURATION_SECONDS[u] for n, u in parts)
    if seconds < 0:
        raise ConfigError(f"duration {text!r} is negative")
    return seconds


def format_duration(seconds: float) -> str:
    """Render seconds compactly, e.g. 5400 → `1h30m`, 42.5 → `42.5s`."""
    if seconds < 60:
        return f"{round(seconds, 1):g}s"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return text or "0s"


BYTE_UNITS = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def format_bytes(n_bytes: float, digits: int = 1) -> str:
    """`49479270` → `47.2 MiB`, in the largest binary unit it reaches; keeps the sign."""
    size = abs(n_bytes)
    for factor, unit in BYTE_UNITS:
        if size >= factor:
            return f"{n_bytes / factor:.{digits}f} {unit}"
    return f"{n_bytes:.0f} B"


def parse_bytes(text: str | int | float) -> int:
    """Return bytes for `4096`, `512KiB`, `2MiB`, `1.5GB`."""
    if isinstance(text, (int, float)):
        return int(text)
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise ConfigError(f"malformed byte size {text!r}: use forms like 4096, 512KiB or 2MiB")
    number, unit = match.groups()
    return int(float(number) * _SIZE_FACTORS[(unit or "b").lower()])
