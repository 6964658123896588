"""An OpenMetrics text read back line by line, as the export's tests check it: its families in file order, and each
sample's name, labels, value and timestamp.

prometheus_client's own parser cannot serve here: it keeps a set of the samples seen in a label group that it never
clears when the timestamp moves on, so from a timestamped histogram's second point on it drops every bucket but the
first as a "duplicate".
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)(?: (?P<ts>\S+))?$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class OmSample:
    """One sample line."""

    name: str
    labels: dict[str, str]
    value: float
    timestamp: float | None

    def series(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """The sample's series: its name and labels."""
        return self.name, tuple(sorted(self.labels.items()))


@dataclass
class OmFamily:
    """One family: its name, type, help and samples in file order."""

    name: str
    type: str = "unknown"
    help: str = ""
    samples: list[OmSample] = field(default_factory=list)

    def by_series(self, name: str | None = None) -> dict[tuple, list[OmSample]]:
        """The family's samples (those named `name`, if given) grouped by series, each in file order."""
        grouped: dict[tuple, list[OmSample]] = defaultdict(list)
        for sample in self.samples:
            if name is None or sample.name == name:
                grouped[sample.series()].append(sample)
        return dict(grouped)


def _unescape(value: str) -> str:
    return re.sub(r'\\[\\"n]', lambda match: ESCAPES[match.group(0)], value)


def parse_sample(line: str) -> OmSample:
    """One sample line; ValueError for a line that is none."""
    match = SAMPLE.match(line)
    if match is None:
        raise ValueError(f"not a sample line: {line!r}")
    labels = {name: _unescape(value) for name, value in LABEL.findall(match.group("labels") or "")}
    timestamp = float(match.group("ts")) if match.group("ts") else None
    return OmSample(match.group("name"), labels, float(match.group("value")), timestamp)


def parse(text: str) -> list[OmFamily]:
    """The families of a whole exposition, in file order; ValueError when `# EOF` is not its last line, or a
    family's metadata comes twice (a family split in two)."""
    lines = text.splitlines()
    if not lines or lines[-1] != "# EOF" or "# EOF" in lines[:-1]:
        raise ValueError("the text does not end with one # EOF")
    families: list[OmFamily] = []
    seen: set[tuple[str, str]] = set()
    for line in lines[:-1]:
        if line.startswith("# "):
            kind, name, text_ = (line[2:].split(" ", 2) + [""])[:3]
            if (kind, name) in seen:
                raise ValueError(f"a second # {kind} for {name}: the family is split")
            seen.add((kind, name))
            if not families or families[-1].name != name:
                families.append(OmFamily(name))
            if kind == "TYPE":
                families[-1].type = text_
            elif kind == "HELP":
                families[-1].help = text_
        else:
            families[-1].samples.append(parse_sample(line))
    return families
