"""Durations (`90s`, `1h30m`, `250ms`) and byte sizes (`4096`, `512KiB`, `2MiB`) as the flags spell them.

The reference server shares nothing with the harness but the wire protocol, so it parses these
itself rather than importing `soak.units`; the accepted forms are the same.
"""

import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_SECONDS_PER_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?", re.IGNORECASE)
_BYTES_PER_UNIT = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_duration(text: str) -> float:
    """Return seconds for `90s`, `5m`, `1h30m`, `250ms` or a bare number of seconds."""
    cleaned = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", cleaned):
        return float(cleaned)
    parts = _DURATION_PART.findall(cleaned)
    if not parts or "".join(number + unit for number, unit in parts) != cleaned:
        raise ValueError(f"malformed duration {text!r}: use forms like 90s, 5m, 1h30m or 250ms")
    return sum(float(number) * _SECONDS_PER_UNIT[unit] for number, unit in parts)


def parse_bytes(text: str) -> int:
    """Return bytes for `4096`, `512KiB`, `2MiB`, `1.5GB`."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"malformed byte size {text!r}: use forms like 4096, 512KiB or 2MiB")
    number, unit = match.groups()
    return int(float(number) * _BYTES_PER_UNIT[(unit or "b").lower()])
