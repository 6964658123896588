"""Fleet comparison: a replica whose figure stands out among its peers' under the same load (docs/gates.md, "Fleets").

Replicas of one fleet get the same traffic (by weight) from the same client at the same time, so what differs
between them is the server. The rule is the modified z-score of Iglewicz and Hoaglin: the distance from the
median in units of the median absolute deviation (MAD) scaled to a standard deviation, flagged above 3.5. It
needs three replicas: with two there is no majority to call the other one odd.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

MIN_REPLICAS = 3
OUTLIER_Z = 3.5  # Iglewicz & Hoaglin's cut for the modified z-score
MAD_TO_SIGMA = 1.4826  # MAD × this estimates σ for normal data


@dataclass(frozen=True)
class FleetMetric:
    """A figure compared across replicas: higher is worse; `relative_floor` × |median| and `absolute_floor` bound
    the spread from below, so peers that agree closely do not make a small difference look large."""

    name: str
    unit: str
    relative_floor: float = 0.0
    absolute_floor: float = 0.0


@dataclass(frozen=True)
class Outlier:
    """One replica's figure above its peers': the value, the peers' median and how far out it lies."""

    replica: str
    metric: FleetMetric
    value: float
    median: float
    robust_z: float

    def describe(self) -> str:
        """`P99 TTFT 912 ms against a median of 301 ms over the replicas (robust z 8.4 > 3.5)`."""
        return (f"{self.metric.name} {self.value:.4g} {self.metric.unit} against a median of {self.median:.4g} "
                f"{self.metric.unit} over the replicas (robust z {self.robust_z:.1f} > {OUTLIER_Z:g})")


def spread(values: list[float], median: float, metric: FleetMetric) -> float:
    """The scale of the peers' spread: 1.4826 × MAD, but never under the metric's floors (a MAD of 0 is common
    with three replicas, two of them alike)."""
    mad = statistics.median(abs(value - median) for value in values)
    return max(MAD_TO_SIGMA * mad, metric.relative_floor * abs(median), metric.absolute_floor)


def fleet_outliers(values: Mapping[str, float | None], metric: FleetMetric) -> list[Outlier]:
    """The replicas whose value lies more than OUTLIER_Z spreads above the median; none with fewer than
    MIN_REPLICAS known values, or when the spread is zero (every floor 0 and every value alike)."""
    known = {name: value for name, value in values.items() if value is not None}
    if len(known) < MIN_REPLICAS:
        return []
    median = statistics.median(known.values())
    scale = spread(list(known.values()), median, metric)
    if scale <= 0:
        return []
    found = [Outlier(name, metric, value, median, (value - median) / scale) for name, value in known.items()]
    return [outlier for outlier in found if outlier.robust_z > OUTLIER_Z]
