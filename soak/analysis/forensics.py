"""Where the memory went: the forensics windows of a run, read from its `forensics` events (docs/forensics.md).

Each event holds what one process's window found: memray's held stacks (grouped by the server's own line and its
caller) and the growth by mapping from /proc/PID/smaps. A line is named only above noise — it holds at least
`NAMED_SHARE` of what the window held, at least what a leak at `leak.rss`'s threshold would build over the
window (`NOISE_FLOOR_BYTES` at the least), in at least `MIN_ALLOCATIONS` allocations: a healthy server also holds,
at any moment, what its requests in flight and its caches allocated a moment ago. `add_forensics` puts one sentence
in the `leak.rss` finding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from soak.analysis.findings import FAIL, SUSPECT, Finding
from soak.analysis.fmt import bytes_text, duration_text
from soak.contracts import Event, EventKind

NAMED_SHARE = 0.25
NOISE_FLOOR_BYTES = 2**20
# One allocation still held is an event, not a growth: a healthy vLLM's API server keeps a 1 MiB chat-template cache
# it filled once in the window. A leak that matters over minutes repeats.
MIN_ALLOCATIONS = 5
HOUR_S = 3600.0
_SITE_PACKAGES = re.compile(r".*/(site|dist)-packages/")


def short_path(path: str) -> str:
    """A file as a reader knows it: from its package on (`vllm/v1/core/sched/scheduler.py`) when installed."""
    return _SITE_PACKAGES.sub("", path or "")


@dataclass(frozen=True)
class HeldSite:
    """One line of the server's own code and its caller, with what it allocated in the window still held."""

    function: str
    file: str
    line: int
    caller_function: str | None
    caller_file: str | None
    caller_line: int | None
    bytes: int
    allocations: int
    stacks: int
    share: float  # of all the window still held
    frames: tuple[tuple[str, str, int], ...] = ()

    @property
    def where(self) -> str:
        """`scheduler.py:812 in _free_request` (the file from its package on)."""
        if not self.file:
            return self.function
        return f"{short_path(self.file)}:{self.line} in {self.function}"

    @property
    def caller(self) -> str | None:
        """`_free_request (vllm/v1/core/sched/scheduler.py:640)`, or None when it has no caller."""
        if not self.caller_function:
            return None
        return f"{self.caller_function} ({short_path(self.caller_file or '')}:{self.caller_line})"


@dataclass(frozen=True)
class ProcessForensicsResult:
    """One process's window as the report and summary.json show it."""

    pid: int | None
    name: str
    role: str
    why: str
    started_s: float | None
    ended_s: float | None
    method: str
    memory_before: int | None
    memory_after: int | None
    held_bytes: int | None
    held_allocations: int | None
    stacks: int | None
    sites: tuple[HeldSite, ...]
    mapping_rows: tuple[Mapping[str, Any], ...]  # growth by kind of mapping (soak.telemetry.smaps rows)
    mapping_sentence: str | None
    capture: str | None
    flamegraph: str | None
    refusals: tuple[str, ...]
    noise_floor_bytes: float = NOISE_FLOOR_BYTES

    @property
    def window_s(self) -> float | None:
        if self.started_s is None or self.ended_s is None:
            return None
        return self.ended_s - self.started_s

    @property
    def label(self) -> str:
        return f"{self.name or self.role} (pid {self.pid})" if self.pid is not None else "the server"

    @property
    def named(self) -> HeldSite | None:
        """The site that holds the window's memory, when one holds more than noise."""
        top = self.sites[0] if self.sites else None
        if top is None or top.share < NAMED_SHARE or top.bytes < self.noise_floor_bytes:
            return None
        return top if top.allocations >= MIN_ALLOCATIONS else None

    def sentence(self) -> str:
        """One line: where the memory still held from the window was allocated, or why that is not known."""
        if self.held_bytes is None:
            found = f"; growth by mapping: {self.mapping_sentence}" if self.mapping_sentence else ""
            why = "; ".join(self.refusals) or "no capture was read"
            return f"forensics of {self.label}: {why}{found}"
        window = f"the {duration_text(self.window_s)} window" if self.window_s else "the window"
        held = f"{bytes_text(self.held_bytes)} still held from {window} in {self.label}"
        named = self.named
        if named is not None:
            caller = f", from {named.caller}" if named.caller else ""
            return f"{named.share * 100:.0f} % of the {held} was allocated at {named.where}{caller}"
        return f"of the {held}, {self._spread()}"

    def _spread(self) -> str:
        top = self.sites[0] if self.sites else None
        if top is None:
            return "no stack holds anything"
        if top.share < NAMED_SHARE:
            return f"the growth is spread over {self.stacks} stacks, none above {top.share * 100:.0f} %"
        if top.bytes >= self.noise_floor_bytes:
            return (f"no stack holds more than noise (the largest, {bytes_text(top.bytes)} at {top.where}, is only "
                    f"{top.allocations} allocation{'s' if top.allocations != 1 else ''}, too few for a growth: a cache "
                    "filled once)")
        return (f"no stack holds more than noise (the largest, {bytes_text(top.bytes)} at {top.where}, is under "
                f"the {bytes_text(self.noise_floor_bytes)} a leak at the threshold would build in the window)")


# -- reading the events -------------------------------------------------------------------------------------------
def read_forensics(events: Iterable[Event], threshold_bytes_per_h: float | None = None) -> list[ProcessForensicsResult]:
    """Every process's forensics result in the run's events, in time order."""
    return [_result(event.data, threshold_bytes_per_h) for event in events if event.kind == EventKind.FORENSICS]


def _result(data: Mapping[str, Any], threshold_bytes_per_h: float | None) -> ProcessForensicsResult:
    held = data.get("held") or {}
    total = int(held.get("held_bytes") or 0)
    smaps = data.get("smaps") or {}
    result = ProcessForensicsResult(
        pid=data.get("pid"), name=str(data.get("name") or ""), role=str(data.get("role") or "process"),
        why=str(data.get("why") or ""), started_s=data.get("started_s"), ended_s=data.get("ended_s"),
        method=str(data.get("method") or "smaps"), memory_before=data.get("memory_before"),
        memory_after=data.get("memory_after"), held_bytes=held.get("held_bytes") if held else None,
        held_allocations=held.get("held_allocations"), stacks=held.get("stacks"),
        sites=tuple(_site(row, total) for row in held.get("top") or ()),
        mapping_rows=tuple(smaps.get("by_kind") or ()), mapping_sentence=data.get("smaps_sentence"),
        capture=data.get("capture"), flamegraph=data.get("flamegraph"), refusals=tuple(data.get("refusals") or ()),
    )
    return replace(result, noise_floor_bytes=noise_floor(threshold_bytes_per_h, result.window_s))


def _site(row: Mapping[str, Any], total: int) -> HeldSite:
    return HeldSite(
        function=str(row["function"]), file=str(row.get("file") or ""), line=int(row.get("line") or 0),
        caller_function=row.get("caller_function"), caller_file=row.get("caller_file"),
        caller_line=row.get("caller_line"), bytes=int(row["bytes"]), allocations=int(row.get("allocations") or 0),
        stacks=int(row.get("stacks") or 1), share=int(row["bytes"]) / total if total > 0 else 0.0,
        frames=tuple(tuple(frame) for frame in row.get("frames") or ()),
    )


def noise_floor(threshold_bytes_per_h: float | None, window_s: float | None) -> float:
    """The least a line must hold to be named: what a leak at the threshold builds over the window."""
    if not threshold_bytes_per_h or not window_s:
        return NOISE_FLOOR_BYTES
    return max(NOISE_FLOOR_BYTES, threshold_bytes_per_h * window_s / HOUR_S)


# -- the leak finding's sentence ---------------------------------------------------------------------------------
def add_forensics(findings: list[Finding], events: Iterable[Event]) -> list[Finding]:
    """The `leak.rss` finding, when SUSPECT or FAIL, says where the memory went in each window that watched the
    server (its `details["forensics"]` holds the sentences)."""
    for at, finding in enumerate(findings):
        if finding.check == "leak.rss" and finding.verdict in (FAIL, SUSPECT):
            results = read_forensics(events, finding.threshold)
            if results:
                findings[at] = _with_forensics(finding, results)
    return findings


def _with_forensics(finding: Finding, results: list[ProcessForensicsResult]) -> Finding:
    sentences = [result.sentence() for result in results]
    evidence = finding.evidence.rstrip()
    evidence = f"{evidence}{'' if evidence.endswith('.') else '.'} Forensics: {' '.join(s + '.' for s in sentences)}"
    return replace(finding, evidence=evidence, details={**finding.details, "forensics": sentences})
