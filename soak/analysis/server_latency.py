"""`creep.server_itl`: the time between tokens as the server measured it, on a replica behind a --router.

Behind a router the client cannot tell which replica answered a request, so its latency windows are the router's
(creep.* on the router's run). Each replica's own /metrics still says how long its tokens took: the running sum
and count of its inter-token latency histogram (vLLM, SGLang, TGI; llama.cpp's predict seconds over tokens).
Their changes over a window give the window's mean ITL at that server; the series is judged as every creep is
(latency.judge_creep: log scale, warm-up found from the data, trend and step gate), so a replica that slows is
named on its own run. A window whose count fell (a restarted server) or saw too few tokens is left out.

On a run that sends its own load the client's windows judge latency (creep.itl_p99), and this check is SKIPPED.
"""

from __future__ import annotations

import numpy as np

from soak.analysis.findings import Finding, inconclusive, skipped
from soak.analysis.gates import Gates
from soak.analysis.inputs import RunData, ServerSeries, WindowInfo
from soak.analysis.latency import CreepSeries, judge_creep

CHECK = "creep.server_itl"
# A window's mean needs this many token gaps to stand for the window (a few requests' worth).
MIN_TOKENS_PER_WINDOW = 50


def check_server_itl(run: RunData, gates: Gates) -> Finding:
    if not run.observe_only:
        return skipped(CHECK, "This run timed its own requests (creep.itl_p99); the server's own ITL is judged on "
                              "a replica behind a --router, whose requests only the router's run timed.")
    server = run.server
    if server is None or server.itl_sum_s is None or server.itl_count is None:
        return skipped(CHECK, "The server's /metrics has no inter-token latency histogram (vLLM, SGLang, TGI and "
                              "llama.cpp expose one), so this replica's latency is judged only on the router's run.")
    judged = run.judged_windows()
    means = [(window, window_mean_s(server, window)) for window in judged]
    kept = [(window, mean) for window, mean in means if mean is not None]
    if len(kept) < gates.min_windows:
        return inconclusive(CHECK, f"Only {len(kept)} of {len(judged)} judged windows saw ≥ {MIN_TOKENS_PER_WINDOW} "
                                   f"tokens at this server (< {gates.min_windows} windows needed).",
                            details={"usable_windows": len(kept)})
    return judge_creep(run, _series(kept, len(judged), gates), gates)


def _series(kept: list[tuple[WindowInfo, float]], judged: int, gates: Gates) -> CreepSeries:
    t_s = np.array([(window.start_s + window.end_s) / 2 for window, _ in kept])
    return CreepSeries(CHECK, "server_itl", "mean", gates.creep.server_itl.rise_frac, judged, t_s=t_s,
                       log_ms=np.log(np.maximum([1000 * mean for _, mean in kept], 1e-9)),
                       spans=[(window.index, window.start_s, window.end_s) for window, _ in kept],
                       run_span_s=max(float(t_s.max() - t_s.min()), 1.0))


def window_mean_s(server: ServerSeries, window: WindowInfo) -> float | None:
    """The server's mean ITL over the window: the change of the sum over the change of the count, between the last
    scrape at or before its start and the last one before its end; None when too few tokens fell in it or the
    counters went back (the server restarted)."""
    before = _last_index(server, window.start_s)
    last = _last_index(server, window.end_s)
    if before is None or last is None or last <= before:
        return None
    tokens = server.itl_count[last] - server.itl_count[before]
    seconds = server.itl_sum_s[last] - server.itl_sum_s[before]
    if not tokens >= MIN_TOKENS_PER_WINDOW or not seconds >= 0:  # NaN (a failed scrape) fails both
        return None
    return float(seconds / tokens)


def _last_index(server: ServerSeries, t_s: float) -> int | None:
    """The last scrape at or before `t_s` whose histogram was read."""
    valid = (server.t_s <= t_s + 1e-9) & np.isfinite(server.itl_count) & np.isfinite(server.itl_sum_s)
    found = np.flatnonzero(valid)
    return int(found[-1]) if found.size else None
