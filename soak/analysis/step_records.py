"""What the step gate and the staircase found (`soak.analysis.steps`): the records a finding carries.

Kept apart from the search (which imports the trend test, which imports the findings), so a finding's evidence
can name them without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RAMP_SHARE = 0.5            # growth inside the segments above half the steps' sum: a ramp, not a staircase
LINE_SHARE = 0.5            # the levels must leave at most half the squared residue a straight line leaves


@dataclass(frozen=True)
class StepResult:
    """The most likely split and which gates it passed; `found` when all of them did."""

    t_s: float
    index: int
    before: float
    after: float
    shift: float
    p_value: float
    min_shift: float
    gates: dict[str, bool] = field(default_factory=dict)

    @property
    def found(self) -> bool:
        return bool(self.gates) and all(self.gates.values())

    def to_dict(self) -> dict:
        return {"t_s": self.t_s, "before": self.before, "after": self.after, "shift": self.shift,
                "p_value": self.p_value, "min_shift": self.min_shift, "found": self.found,
                "gates": dict(self.gates)}


@dataclass(frozen=True)
class Stair:
    """One upward change of level that never came back: time, index and the levels either side."""

    t_s: float
    index: int
    before: float
    after: float

    @property
    def shift(self) -> float:
        return self.after - self.before


@dataclass(frozen=True)
class Staircase:
    """The levels of a series split where its level changed (PELT, `ruptures`), from the first settled
    level to the last: the lasting upward steps of at least `min_step`, and how much the series grew
    inside its segments (a ramp grows there; a staircase does not)."""

    first: float
    last: float
    stairs: tuple[Stair, ...]
    within: float
    min_step: float
    levels_vs_line: float = 0.0  # squared residue around the levels ÷ around one straight line

    @property
    def net(self) -> float:
        return self.last - self.first

    @property
    def stepped(self) -> float:
        return float(sum(stair.shift for stair in self.stairs))

    @property
    def is_staircase(self) -> bool:
        """Growth by steps, not a ramp cut into pieces: little growth inside the segments, and levels
        that fit the series far better than one straight line does."""
        return (bool(self.stairs) and self.within <= RAMP_SHARE * self.stepped
                and self.levels_vs_line <= LINE_SHARE)

    def to_dict(self) -> dict:
        return {"first": self.first, "last": self.last, "net": self.net, "stepped": self.stepped,
                "within": self.within, "min_step": self.min_step, "levels_vs_line": self.levels_vs_line,
                "is_staircase": self.is_staircase,
                "stairs": [{"t_s": s.t_s, "before": s.before, "after": s.after, "shift": s.shift}
                           for s in self.stairs]}
