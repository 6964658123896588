"""Scanning the server's log for fatal and suspicious lines while a run is under way.

`LogFollower` follows one file like `tail -F`: by name, from a start offset, across truncation, rotation and a file
that appears late. `ServerLogScanner` classifies each new line against `PATTERNS` (out-of-memory kills, EngineDeadError,
CUDA errors, each server's own fatal lines, tracebacks, NaN/inf warnings) and records a `server_log_error` event with the
line and a few lines of context. Repeats are deduplicated and the events per run capped, so a log flooding the same error
cannot swamp the database; what was held back is counted in the `server_log_scanned` events that open and close a scan.
A matched line the server wrote answering a request soak sent to be refused (`ProvokedExchange`: in the bytes the log
grew by while it was answered, naming its request id, or stating its refusal's message near when soak saw it) is a
`server_log_provoked` event instead: that request's answer. The load's refusals reach the scan as they happen
(`provoke`), so in a run each matched line waits `PROVOKED_WAIT_S` before it counts as the server's own.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.contracts import EventKind, EventSink, ProvokedExchange, ServerLogClass

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 1 << 20  # at most this much per poll, so a flood is read over several ticks
MAX_LINE_CHARS = 2000
CONTEXT_BEFORE, CONTEXT_AFTER = 3, 3
TRACEBACK_MAX_LINES = 60  # a traceback longer than this is recorded without its final line
PENDING_WAIT_S = 2.0  # how long an event waits for its after-context before it is recorded anyway
# How long a matched line waits, in a run whose load may be refused on purpose, for soak to learn of the refusal it
# may answer: a remote worker's records come with its report, every 3 s.
PROVOKED_WAIT_S = 6.0
RECENT_PROVOKED = 512  # refusals of the load kept to match lines against (older ones are far outside their window)
REPEAT_EVERY_S = 300.0  # one event per distinct line per 5 minutes; repeats in between are counted
MAX_EVENTS = 100  # per scan; past it lines are only counted
MAX_SIGNATURES = 1000



@dataclass(frozen=True)
class LogPattern:
    """One kind of line: its class, the server dialect it belongs to ("any" for all) and the regex."""

    log_class: ServerLogClass
    dialect: str
    regex: re.Pattern[str]


def _p(log_class: ServerLogClass, dialect: str, pattern: str, flags: int = 0) -> LogPattern:
    return LogPattern(log_class, dialect, re.compile(pattern, flags))


C = ServerLogClass
# First match wins, so the fatal classes come first. Dialect names are those of soak.telemetry.dialects.DIALECTS.
PATTERNS: tuple[LogPattern, ...] = (
    _p(C.OOM, "any", r"CUDA out of memory|OutOfMemoryError|\bMemoryError\b|std::bad_alloc|Out of memory: Kill|"
       r"Killed process \d+|^\s*Killed\s*$|\b(?:error|failed|fatal)\b.{0,80}\bout of memory", re.IGNORECASE),
    _p(C.ENGINE_DEAD, "any", r"EngineDeadError"),
    _p(C.CUDA_ERROR, "any", r"CUDA error|cudaError\w+|CUBLAS_STATUS_\w+_ERROR|illegal memory access"),
    _p(C.FATAL, "vllm", r"EngineCore encountered a fatal error|EngineCore failed to start|Engine core initialization "
       r"failed|Engine process failed to start"),
    _p(C.FATAL, "vllm-v0", r"Engine background task failed|Background loop has errored already"),
    _p(C.FATAL, "sglang", r"(?:Scheduler|TokenizerManager|DetokenizerManager) hit an exception|Received sigquit from a "
       r"child process"),
    _p(C.FATAL, "tgi", r"Shard complete standard error output|Shard \d+ (?:failed to start|crashed)|Webserver Crashed|"
       r"panicked at"),
    _p(C.FATAL, "llamacpp", r"GGML_ASSERT\(|ggml_abort|llama_decode: failed to decode|failed to allocate .* buffer"),
    _p(C.FATAL, "trtllm", r"\[TensorRT-LLM\]\[ERROR\]"),
    _p(C.FATAL, "any", r"Segmentation fault|Fatal Python error|core dumped"),
    _p(C.TRACEBACK, "any", r"Traceback \(most recent call last\)"),
    _p(C.NAN, "any", r"\b(?:nan|inf)s?\b.{0,40}\b(?:detected|found|encountered|produced|in (?:the )?(?:logits|output|"
       r"hidden|tensor|probs))|\b(?:contains?|produced|got|has) (?:nan|inf)s?\b|NaN or Inf|invalid value encountered",
       re.IGNORECASE),
)


def classify(line: str) -> LogPattern | None:
    """The first pattern a line matches, or None for an ordinary line."""
    return next((pattern for pattern in PATTERNS if pattern.regex.search(line)), None)


_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\d+")


def signature(log_class: ServerLogClass, line: str) -> str:
    """What makes two lines the same error: the class and the text with numbers (times, pids, ids) blanked."""
    return f"{log_class}:{_VOLATILE.sub('#', line.strip())[:300]}"


class LogFollower:
    """Reads a file's new lines like `tail -F`: by name, from `offset`, across truncation and rotation."""

    def __init__(self, path: Path, from_end: bool) -> None:
        self.path = path
        self._inode: int | None = None
        self._offset = 0
        self._partial = b""
        self._warned = False
        self.bytes_read = 0
        stat = self._stat()
        if stat is not None:  # a file that appears later is read from its start
            self._inode, self._offset = stat.st_ino, stat.st_size if from_end else 0

    def read_lines(self, limit_bytes: int = READ_CHUNK_BYTES) -> list[str]:
        """Complete lines written since the last call (a line still being written waits for its newline)."""
        return [line for _, line in self.read_entries(limit_bytes)]

    def read_entries(self, limit_bytes: int = READ_CHUNK_BYTES) -> list[tuple[int, str]]:
        """As `read_lines`, each line with the byte offset where it starts in the file (`inode`)."""
        stat = self._stat()
        if stat is None:
            return []
        self._follow(stat)
        data = self._read(limit_bytes) if stat.st_size > self._offset else b""
        start = self._offset - len(self._partial)
        self._offset += len(data)
        self.bytes_read += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        entries = []
        for line in lines:
            entries.append((start, _text(line)))
            start += len(line) + 1
        return entries

    @property
    def inode(self) -> int | None:
        """The inode of the file being read (a rotated log is another file)."""
        return self._inode

    def _read(self, limit_bytes: int) -> bytes:
        """Up to `limit_bytes` from the offset; nothing when the file cannot be read (a scan never stops the run)."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                return handle.read(limit_bytes)
        except OSError as exc:  # permissions, a folder
            if not self._warned:
                log.warning("cannot read server log %s: %s", self.path, exc)
            self._warned = True
            return b""

    def rest(self) -> list[tuple[int, str]]:
        """The unterminated last line with its offset, at the end of a scan."""
        partial, self._partial = self._partial, b""
        return [(self._offset - len(partial), _text(partial))] if partial else []

    def _stat(self) -> os.stat_result | None:
        try:
            return os.stat(self.path)
        except OSError:
            return None

    def _follow(self, stat: os.stat_result) -> None:
        """Start over at a new file (rotated, or appearing after the start) or one that shrank (truncated)."""
        if self._inode is None:
            self._inode, self._offset = stat.st_ino, 0
        elif stat.st_ino != self._inode or stat.st_size < self._offset:
            log.info("server log %s was rotated or truncated; reading it from its start", self.path)
            self._inode, self._offset, self._partial = stat.st_ino, 0, b""


def _text(line: bytes) -> str:
    return line.decode("utf-8", errors="replace").rstrip("\r")[:MAX_LINE_CHARS]


@dataclass
class _Pending:
    """A matched line waiting for the lines after it (a traceback: up to its exception line)."""

    pattern: LogPattern
    line: str
    line_no: int
    before: list[str]
    offset: int | None = None  # where the line starts in the file
    read_t: float | None = None  # wall clock when the scan read it
    after: list[str] = field(default_factory=list)
    exception: str | None = None

    def feed(self, line: str) -> None:
        if len(self.after) < CONTEXT_AFTER:
            self.after.append(line)
        if self.exception is None and self.pattern.log_class == C.TRACEBACK:
            self.exception = exception_line(self.line, line)

    def complete(self, lines_since: int) -> bool:
        if self.pattern.log_class == C.TRACEBACK:
            return self.exception is not None or lines_since >= TRACEBACK_MAX_LINES
        return len(self.after) >= CONTEXT_AFTER


_NOT_THE_END = ("File ", "Traceback", "During handling", "The above", "^", "~", "[Previous line")


def exception_line(header: str, line: str) -> str | None:
    """`line` when it ends the traceback that `header` opened (its `Error: message` line), else None.

    A log prefix the header carries (vLLM: `(EngineCore_0 pid=1) ERROR 06-11 11:46:39 [core.py:517] `) is cut from
    lines that carry it too, so the frames' indentation shows.
    """
    column = header.find("Traceback")
    prefix = header[:min(column, 12)]
    text = line[column:] if column > 0 and line.startswith(prefix) else line
    stripped = text.strip()
    if not stripped or text[:1].isspace() or stripped.startswith(_NOT_THE_END):
        return None
    return stripped


class ServerLogScanner:
    """Classifies the new lines of one log on each `poll()` and records what it finds (see the module docstring)."""

    def __init__(self, follower: LogFollower, recorder: EventSink, clock: Callable[[], float] = time.monotonic,
                 provoked: tuple[ProvokedExchange, ...] = (), provoked_wait_s: float = 0.0) -> None:
        self.follower = follower
        self.recorder = recorder
        self.provoked = provoked
        self.provoked_lines = 0
        self.provoked_wait_s = provoked_wait_s
        self._recent: deque[ProvokedExchange] = deque(maxlen=RECENT_PROVOKED)
        self._clock = clock
        self._before: deque[str] = deque(maxlen=CONTEXT_BEFORE)
        self._pending: list[tuple[_Pending, float, float, int]] = []  # (event, earliest, deadline, line no. at match)
        self._last_at: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self.lines = 0
        self.matched: dict[str, int] = {}
        self.recorded = 0
        self.suppressed = 0

    def provoke(self, exchange: ProvokedExchange) -> None:
        """Learn of a request of the load that was refused on purpose (any thread): its logged lines are its answer."""
        self._recent.append(exchange)

    def start(self) -> None:
        """Record that a scan began (so a clean log is a PASS, not a missing one)."""
        self.recorder.event(EventKind.SERVER_LOG_SCANNED, f"scanning server log {self.follower.path}",
                     {"path": str(self.follower.path), "phase": "start"})

    def poll(self) -> None:
        """Read and classify what was written since the last poll; record events whose context is complete."""
        for offset, line in self.follower.read_entries():
            self._line(line, offset)
        self._flush(force=False)

    def close(self) -> None:
        """Read what is left, record every pending event, and record the scan's totals."""
        self.poll()
        for offset, line in self.follower.rest():
            self._line(line, offset)
        self._flush(force=True)
        self.recorder.event(EventKind.SERVER_LOG_SCANNED, f"server log {self.follower.path}: {self.lines} lines, "
                     f"{sum(self.matched.values())} matched", self.totals())

    def totals(self) -> dict[str, Any]:
        """What the scan saw: lines, bytes, matches per class, events recorded and held back."""
        return {"path": str(self.follower.path), "phase": "end", "lines": self.lines,
                "bytes": self.follower.bytes_read, "matched": dict(self.matched), "recorded": self.recorded,
                "suppressed": self.suppressed, "provoked": self.provoked_lines}

    def _line(self, line: str, offset: int | None = None) -> None:
        self.lines += 1
        for pending, *_ in self._pending:
            pending.feed(line)
        pattern = classify(line)
        if pattern is not None:
            self.matched[pattern.log_class.value] = self.matched.get(pattern.log_class.value, 0) + 1
            pending = _Pending(pattern, line, self.lines, list(self._before), offset, time.time())
            now = self._clock()
            self._pending.append((pending, now + self.provoked_wait_s,
                                  now + max(PENDING_WAIT_S, self.provoked_wait_s), self.lines))
        self._before.append(line)

    def _flush(self, force: bool) -> None:
        """Record what is due: its context complete (and its wait for a refusal over), or its deadline passed."""
        now, waiting = self._clock(), []
        for item in self._pending:
            pending, earliest, deadline, at_line = item
            if force or now >= deadline or (now >= earliest and pending.complete(self.lines - at_line)):
                self._emit(pending)
            else:
                waiting.append(item)
        self._pending = waiting

    def _emit(self, pending: _Pending) -> None:
        """Record one matched line unless the same line was recorded lately or the run's cap is reached; a line
        written answering a request soak sent to be refused is recorded as that request's answer."""
        exchange = self._provoked_by(pending)
        if exchange is not None:
            self._emit_provoked(pending, exchange)
            return
        key = signature(pending.pattern.log_class, pending.exception or pending.line)
        now = self._clock()
        if self.recorded >= MAX_EVENTS or now - self._last_at.get(key, -REPEAT_EVERY_S) < REPEAT_EVERY_S:
            self._held[key] = self._held.get(key, 0) + 1
            self.suppressed += 1
            return
        if len(self._last_at) >= MAX_SIGNATURES:
            self._last_at.pop(next(iter(self._last_at)))
        self._last_at[key] = now
        self.recorded += 1
        self.recorder.event(EventKind.SERVER_LOG_ERROR, f"{pending.pattern.log_class}: {pending.line.strip()[:300]}",
                     self._data(pending, self._held.pop(key, 0)))

    def _provoked_by(self, pending: _Pending) -> ProvokedExchange | None:
        """The exchange whose answer this line is: written while it was answered, naming its request id on the line,
        its exception or the lines after it (the lines before may name an earlier request), or stating its refusal's
        message near when soak saw the refusal."""
        own_text = (pending.line, pending.exception or "", *pending.after)
        for exchange in (*self.provoked, *list(self._recent)):
            if exchange.holds(self.follower.inode, pending.offset) or exchange.names_in(own_text):
                return exchange
            if exchange.says(pending.exception or pending.line, pending.read_t):
                return exchange
        return None

    def _emit_provoked(self, pending: _Pending, exchange: ProvokedExchange) -> None:
        self.provoked_lines += 1
        if self.provoked_lines > MAX_EVENTS:
            return
        data = {**self._data(pending, 0), "request_id": exchange.request_id, "answer_to": exchange.what}
        self.recorder.event(EventKind.SERVER_LOG_PROVOKED, f"{pending.pattern.log_class} logged answering "
                            f"{exchange.what} ({exchange.request_id}): {pending.line.strip()[:200]}", data)

    def _data(self, pending: _Pending, repeats_held: int) -> dict[str, Any]:
        return {"class": pending.pattern.log_class.value, "dialect": pending.pattern.dialect, "line": pending.line,
                "line_no": pending.line_no, "exception": pending.exception, "before": pending.before,
                "after": pending.after, "repeats_held_back": repeats_held, "path": str(self.follower.path)}


def open_scanner(path: Path | None, from_end: bool, recorder: EventSink, provoked: tuple[ProvokedExchange, ...] = (),
                 provoked_wait_s: float = 0.0) -> ServerLogScanner | None:
    """A started scanner of `path`, or None when there is no log to scan."""
    if path is None:
        return None
    scanner = ServerLogScanner(LogFollower(Path(path), from_end), recorder, provoked=provoked,
                               provoked_wait_s=provoked_wait_s)
    scanner.start()
    return scanner


def scanner_for_run(server_log: Path | None, managed_log: Path | None, recorder: EventSink,
                    provoked: tuple[ProvokedExchange, ...] = ()) -> ServerLogScanner | None:
    """The run's scanner: `--server-log FILE` from its end at the run's start, else the managed server's own log
    (server.log in the run's folder) from its beginning, else None (an external server without --server-log).
    `provoked`: the capability probes soak sent to be refused; the load's refusals come later (`provoke`), so each
    matched line waits `PROVOKED_WAIT_S` for the one it may answer."""
    path, from_end = (server_log, True) if server_log is not None else (managed_log, False)
    return open_scanner(path, from_end, recorder, provoked, PROVOKED_WAIT_S)
