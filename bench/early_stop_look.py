"""Benchmark: what one `--stop-on-fail` look costs a run: its wall time on a stored day-long run, and the
gevent loop's lateness (what the arrival clock feels) while looks run back to back — as soak runs them, in a
child process, and on a thread of gevent's pool (how they ran at first) — against the same loop with no look.

    python bench/early_stop_look.py [--hours 24] [--seconds 20]

The synthetic run is bench/report_render.py's (a server tree of 3 processes plus soak, one GPU, server gauges,
windows with HDR histograms) at 1 Hz. A greenlet asks to wake every 10 ms and records how late it woke; the
figures are its P99 and maximum lateness without looks (the baseline) and with looks, and their ratios.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # as Locust does in `soak start`: the look must share the process the same way

import argparse  # noqa: E402 - after the patch, as in soak start
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_render import build_run  # noqa: E402

from soak.analysis.early_stop import look_gates  # noqa: E402
from soak.analysis.gates import Gates  # noqa: E402
from soak.run.early_stop import look_at, read_look, start_look  # noqa: E402
from soak.store import Store  # noqa: E402

TICK_S = 0.010


class InThread:
    """Looks on a thread of gevent's pool."""

    def __init__(self, look):
        self.look, self.pending = look, None

    def start(self):
        self.pending = gevent.get_hub().threadpool.spawn(self.look)

    def done(self) -> bool:
        return self.pending.ready()

    def finish(self):
        return self.pending.get()


class InChild:
    """Looks in a child process, as `soak start --stop-on-fail` runs them."""

    def __init__(self, db_url: str, run_id: str):
        self.db_url, self.run_id, self.child = db_url, run_id, None

    def start(self):
        self.child = start_look(self.db_url, self.run_id, 24, 14, None)

    def done(self) -> bool:
        return self.child.poll() is not None

    def finish(self):
        return read_look(self.child)


def lateness_ms(seconds: float, looks=None) -> tuple[np.ndarray, list[float]]:
    """Tick for `seconds`, running `looks` back to back if given: (lateness in ms, seconds per look)."""
    late, durations, deadline = [], [], time.monotonic() + seconds
    started = None
    while time.monotonic() < deadline:
        if looks is not None and (started is None or looks.done()):
            if started is not None:
                assert looks.finish() is not None
                durations.append(time.monotonic() - started)
            started = time.monotonic()
            looks.start()
        before = time.monotonic()
        gevent.sleep(TICK_S)
        late.append((time.monotonic() - before - TICK_S) * 1000)
    if started is not None:
        looks.finish()
    return np.array(late), durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        db_url = f"sqlite:///{folder}/bench.db"
        store = Store.open(db_url)
        run_id = "20261204T200000Z-look"
        build_run(store, run_id, args.hours)
        gates = look_gates(Gates(), 14)
        idle, _ = lateness_ms(args.seconds)
        print(f"run: {args.hours:g} h at 1 Hz; looks at 24 windows for {args.seconds:g} s each way")
        print(f"no look:           loop lateness P99 {np.percentile(idle, 99):7.2f} ms, max {idle.max():6.1f} ms")
        for label, looks in (("child process", InChild(db_url, run_id)),
                             ("thread (before)", InThread(lambda: look_at(store, run_id, gates, 24)))):
            late, durations = lateness_ms(args.seconds, looks)
            ratio = np.percentile(late, 99) / max(np.percentile(idle, 99), 1e-3)
            print(f"{label + ':':18} loop lateness P99 {np.percentile(late, 99):7.2f} ms, max {late.max():6.1f} ms "
                  f"(P99 ratio to no look {ratio:.2f}); a look {np.median(durations or [np.nan]):.1f} s")


if __name__ == "__main__":
    main()
