"""Keeps Locust's own request statistics bounded over a run of days.

soak measures with its own windows; Locust's statistics stay fed (through its request event) for listeners
and anyone reading `environment.stats`. But every Locust `StatsEntry` counts requests and failures per
wall-clock second in dicts that Locust never prunes: about 5 MiB per entry per day, the kind of growth that
sinks long Locust runs (Locust #816). Locust itself reads only the last few seconds of them (current RPS looks
back about 12 s), so soak drops older seconds on a timer.
"""

from __future__ import annotations

import time
from typing import Any

import gevent

KEEP_S = 60
TRIM_EVERY_S = 30.0


def trim_per_second_counts(stats: Any, now_s: float, keep_s: int = KEEP_S) -> int:
    """Drop per-second request and failure counts older than `keep_s` from every entry; returns how many."""
    cutoff = int(now_s) - keep_s
    removed = 0
    for entry in (stats.total, *stats.entries.values()):
        for per_second in (entry.num_reqs_per_sec, entry.num_fail_per_sec):
            old = [second for second in per_second if second < cutoff]
            for second in old:
                del per_second[second]
            removed += len(old)
    return removed


def keep_stats_bounded(environment: Any, every_s: float = TRIM_EVERY_S) -> gevent.Greenlet:
    """A greenlet that trims `environment.stats` every `every_s`; kill it when the load stops."""

    def trim_forever() -> None:
        while True:
            gevent.sleep(every_s)
            trim_per_second_counts(environment.stats, time.time())

    return gevent.spawn(trim_forever)
