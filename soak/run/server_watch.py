"""What the conductor watches of the server besides the load: which processes are sampled, and whether requests
still in flight at a timed-out idle-probe drain kept streaming.

A drain that times out is a hang signal only while nothing moves. `DrainWatch` follows the probes' events and the
finished requests: a request whose chunks arrived between a probe's start and its drain timeout was streaming
(slow, not stuck), and the first such request of a probe is recorded as a `probe_drain_streaming` event, which
`hang` reads (soak/analysis/liveness.py).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

from soak.config import RunConfig
from soak.contracts import EventKind
from soak.load.records import RequestRecord
from soak.store.recorder import Recorder
from soak.target import ServerInfo

log = logging.getLogger(__name__)

KEEP_PENDING_S = 3600.0  # a timed-out drain is matched against requests finishing up to an hour later


def record_server_processes(recorder: Recorder, info: ServerInfo) -> str | None:
    """Record which server processes telemetry samples, and how they were found; a line for the user when that
    is news (found by port) or a gap (none at all), else None."""
    pids = list(info.root_pids)
    if pids:
        how = info.processes_from or "given"
        recorder.event(EventKind.SERVER_PROCESSES, f"sampling server process(es) {_pids(pids)} ({how})",
                       {"pids": pids, "how": how})
        return f"sampling server process(es) {_pids(pids)}, {how}" if how.startswith("listening") else None
    text = (f"no server process can be sampled: {info.base_url} is not on this host, or its process cannot be "
            "seen (another user's, or inside a container); server memory and open files come only from its "
            "/metrics process_* series if it serves them (leak.rss and leak.fds are SKIPPED otherwise); pass "
            "--server-pid PID to sample it")
    log.warning("%s", text)
    recorder.event(EventKind.SERVER_PROCESSES, text, {"pids": [], "how": None})
    return text


def _pids(pids: list[int]) -> str:
    return ", ".join(str(pid) for pid in pids)


def chunk_times(record: RequestRecord) -> list[float]:
    """Wall times at which a finished request's content chunks arrived (first token, then each gap)."""
    if record.first_token_t is None:
        return []
    gaps_s = (gap_ms / 1000.0 for gap_ms in record.itl_ms)
    return list(itertools.accumulate(gaps_s, initial=record.first_token_t))


class DrainWatch:
    """Finds requests that kept streaming through a timed-out idle-probe drain and records it once per probe."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._starts: dict[Any, float] = {}  # probe index → wall time arrivals stopped
        self._pending: dict[Any, tuple[float, float]] = {}  # probe index → (start, timeout) wall times

    def watching(self, on_event: Callable[..., Any]) -> Callable[..., Any]:
        """An event hook that notes probe starts and drain timeouts, then hands every event on to `on_event`."""
        def hook(kind: Any, message: str, data: dict[str, Any] | None = None) -> Any:
            self.note(kind, data or {})
            return on_event(kind, message, data)
        return hook

    def note(self, kind: Any, data: dict[str, Any]) -> None:
        """Remember when a probe started (`t`, wall time) and when its drain timed out (start + `drain_s`)."""
        index = data.get("index")
        if kind == EventKind.PROBE_START and data.get("t") is not None:
            self._starts[index] = float(data["t"])
        elif kind == EventKind.PROBE_DRAIN_TIMEOUT and index in self._starts:
            start_t = self._starts[index]
            self._pending[index] = (start_t, start_t + float(data.get("drain_s") or 0.0))

    def add(self, record: RequestRecord) -> None:
        """Match one finished request against the timed-out drains still open."""
        if not self._pending:
            return
        times = chunk_times(record)
        for index, (start_t, end_t) in list(self._pending.items()):
            if record.finish_t - end_t > KEEP_PENDING_S:
                del self._pending[index]
                continue
            inside = sum(1 for t in times if start_t <= t <= end_t)
            if inside:
                del self._pending[index]
                self.recorder.event(
                    EventKind.PROBE_DRAIN_STREAMING,
                    f"idle probe {index}: a request in flight at the drain timeout received {inside} chunk(s) "
                    "during the drain (still streaming, not hung)",
                    {"index": index, "chunks": inside, "drain_s": end_t - start_t})


def drain_timeout_hook(config: RunConfig, e2e_p99_ms: Callable[[], float | None]) -> Callable[[], float]:
    """The idle-probe drain timeout from the E2E P99 observed so far (`RunConfig.drain_timeout_for`), logged."""
    def timeout_s() -> float:
        p99_ms = e2e_p99_ms()
        chosen = config.drain_timeout_for(p99_ms / 1000.0 if p99_ms else None)
        log.info("idle-probe drain timeout %.1fs (E2E P99 so far %s ms)", chosen, f"{p99_ms:.0f}" if p99_ms else "n/a")
        return chosen
    return timeout_s
