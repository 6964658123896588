"""Trace replay (`--trace FILE`): production request traces sent with their own arrival times and token counts.

Three public formats are read (docs/load.md, "Trace replay"): Mooncake JSONL (`timestamp` in ms, `input_length`,
`output_length`, `hash_ids`), the Azure LLM inference trace CSV (`TIMESTAMP`, `ContextTokens`, `GeneratedTokens`)
and the BurstGPT CSV (`Timestamp` in s, `Request tokens`, `Response tokens`). A trace is planned in absolute
time: its k-th arrival is at `begin_t + (loop · period + offset) / speed`, the trace looping until the run ends,
so arrivals stay open-loop whatever the server does. Mooncake's `hash_ids` name 512-token blocks: a block's text
is a pure function of its id and the run's seed, so rows that share hash ids share real prompt prefixes.
"""

from __future__ import annotations

import csv
import functools
import logging
import math
import random
from array import array
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import orjson

from soak.config import RunConfig
from soak.contracts import EventKind
from soak.errors import ConfigError
from soak.load.hooks import HookCaller
from soak.load.prompts import text_of_bytes

log = logging.getLogger(__name__)

TRACE_FORMATS = ("mooncake", "azure", "burstgpt")
MOONCAKE_BLOCK_TOKENS = 512  # Mooncake hashes prompts in blocks of 512 tokens
MAX_TRACE_WINDOWS = 1000  # the `trace` event's planned windows are left out past this many (a 5 s window for days)
# The columns each format needs: (timestamp, prompt tokens, output tokens).
COLUMNS = {
    "mooncake": ("timestamp", "input_length", "output_length"),
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
}


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace: seconds after the trace's first arrival, its token counts, its prefix blocks."""

    t_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    line: int = 0  # the row's line in the file


@dataclass(frozen=True, eq=False)
class Trace:
    """A whole trace in arrival order, kept as columns (a million-row trace is tens of MB, not hundreds);
    `sorted_from_line` names the first line whose time went backwards (None if the file was in order)."""

    path: Path
    format: str
    times_s: np.ndarray  # seconds after the first arrival, ascending
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    lines: np.ndarray  # each row's line in the file
    hash_ids: tuple[tuple[int, ...], ...] | None = None  # Mooncake's, row by row
    sorted_from_line: int | None = None

    def __len__(self) -> int:
        return len(self.times_s)

    def row(self, index: int) -> TraceRow:
        return TraceRow(float(self.times_s[index]), int(self.input_tokens[index]), int(self.output_tokens[index]),
                        self.hash_ids[index] if self.hash_ids else (), int(self.lines[index]))

    @property
    def span_s(self) -> float:
        """From the first arrival to the last, at the trace's own speed."""
        return float(self.times_s[-1])

    @property
    def period_s(self) -> float:
        """One loop at the trace's own speed: its span plus one mean gap, so the seam looks like the rest
        (1 s for a trace whose requests all arrive at once)."""
        count = len(self)
        if count < 2 or self.span_s <= 0:
            return max(self.span_s, 1.0)
        return self.span_s * count / (count - 1)

    @property
    def mean_rate_rps(self) -> float:
        """Requests per second at the trace's own speed, over one loop."""
        return len(self) / self.period_s

    def describe(self, speed: float = 1.0) -> dict[str, Any]:
        """The figures a run records about the trace it replays."""
        return {"name": self.path.name, "format": self.format, "rows": len(self), "span_s": self.span_s,
                "period_s": self.period_s, "speed": speed, "trace_rate_rps": self.mean_rate_rps,
                "planned_rate_rps": self.mean_rate_rps * speed, "sorted_from_line": self.sorted_from_line,
                "mean_input_tokens": float(self.input_tokens.mean()),
                "mean_output_tokens": float(self.output_tokens.mean())}


class _Columns:
    """Rows as they are read, in compact arrays."""

    def __init__(self, with_hash_ids: bool) -> None:
        self.times, self.lines = array("d"), array("q")
        self.inputs, self.outputs = array("q"), array("q")
        self.hash_ids: list[tuple[int, ...]] | None = [] if with_hash_ids else None

    def add(self, t_s: float, input_tokens: int, output_tokens: int, line: int, hash_ids: tuple[int, ...] = ()) -> None:
        self.times.append(t_s)
        self.inputs.append(input_tokens)
        self.outputs.append(output_tokens)
        self.lines.append(line)
        if self.hash_ids is not None:
            self.hash_ids.append(hash_ids)

    def trace(self, path: Path, format: str) -> Trace:
        """The rows in time order (sorted, and said so, when the file was not), timed from the first."""
        times, lines = np.array(self.times), np.array(self.lines)
        inputs, outputs = np.array(self.inputs), np.array(self.outputs)
        hash_ids = self.hash_ids
        backwards = np.flatnonzero(np.diff(times) < 0)
        late = int(lines[backwards[0] + 1]) if len(backwards) else None
        if late is not None:
            log.warning("trace %s line %d: timestamps go backwards; the rows are replayed sorted by time", path, late)
            order = np.argsort(times, kind="stable")  # equal times keep the file's order
            times, lines, inputs, outputs = times[order], lines[order], inputs[order], outputs[order]
            hash_ids = [hash_ids[i] for i in order] if hash_ids is not None else None
        return Trace(path, format, times - times[0], inputs, outputs, lines,
                     tuple(hash_ids) if hash_ids is not None else None, late)


# -- reading ----------------------------------------------------------------------------------------------
def _bad(path: Path, line: int, what: str) -> ConfigError:
    return ConfigError(f"trace {path} line {line}: {what}")


def detect_format(path: Path, first_line: str) -> str:
    """The format a trace's first line shows: a JSON object is Mooncake, else a CSV header's columns decide."""
    if first_line.lstrip().startswith("{"):
        return "mooncake"
    header = {name.strip() for name in next(csv.reader([first_line]), [])}
    for name in ("azure", "burstgpt"):
        if set(COLUMNS[name]) <= header:
            return name
    raise _bad(path, 1, "not a known trace format: expected Mooncake JSONL (timestamp, input_length, "
               "output_length, hash_ids), an Azure CSV header (TIMESTAMP, ContextTokens, GeneratedTokens) or a "
               "BurstGPT CSV header (Timestamp, Request tokens, Response tokens); or name it with --trace-format")


def _tokens(path: Path, line: int, column: str, value: Any) -> int:
    try:
        return _count(int(value), path, line, column, value)
    except (TypeError, ValueError):
        pass
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _bad(path, line, f"{column} {value!r} is not a number") from None
    return _count(int(number) if math.isfinite(number) else -1, path, line, column, value)


def _count(number: int, path: Path, line: int, column: str, value: Any) -> int:
    if number < 0:
        raise _bad(path, line, f"{column} {value!r} is not a token count")
    return number


def _seconds(path: Path, line: int, column: str, value: Any, scale: float) -> float:
    """A timestamp in seconds: a number (× scale), or for Azure an ISO date and time (UTC unless it says)."""
    try:
        number = float(value)
        if math.isfinite(number):
            return number * scale
    except (TypeError, ValueError):
        pass
    try:
        moment = datetime.fromisoformat(str(value).strip())
    except ValueError:
        raise _bad(path, line, f"{column} {value!r} is not a time") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _mooncake_rows(path: Path, handle: TextIO, columns: _Columns) -> None:
    time_col, input_col, output_col = COLUMNS["mooncake"]
    for number, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            record = orjson.loads(text)
        except ValueError:
            raise _bad(path, number, "not a JSON object") from None
        if not isinstance(record, dict):
            raise _bad(path, number, "not a JSON object")
        missing = [name for name in COLUMNS["mooncake"] if record.get(name) is None]
        if missing:
            raise _bad(path, number, f"no {missing[0]!r} (a Mooncake row has timestamp, input_length, "
                       "output_length, hash_ids)")
        columns.add(_seconds(path, number, time_col, record[time_col], 0.001),
                    _tokens(path, number, input_col, record[input_col]),
                    _tokens(path, number, output_col, record[output_col]), number,
                    _hash_ids(path, number, record.get("hash_ids", [])))


def _hash_ids(path: Path, line: int, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(item, int) and not isinstance(item, bool) for item in value):
        raise _bad(path, line, "hash_ids is not a list of integers")
    return tuple(value)


def _csv_rows(path: Path, handle: TextIO, format: str, columns: _Columns) -> None:
    names = COLUMNS[format]
    reader = csv.reader(handle, skipinitialspace=True)
    header = [name.strip() for name in next((row for row in reader if row), [])]
    missing = [name for name in names if name not in header]
    if missing:
        raise _bad(path, reader.line_num, f"the header has no {missing[0]!r} column (a {format} trace has "
                   f"{', '.join(names)})")
    where = [header.index(name) for name in names]
    for record in reader:
        if not record:
            continue
        number = reader.line_num
        absent = [name for name, i in zip(names, where) if i >= len(record) or not record[i].strip()]
        if absent:
            raise _bad(path, number, f"no {absent[0]!r} value")
        columns.add(_seconds(path, number, names[0], record[where[0]], 1.0),
                    _tokens(path, number, names[1], record[where[1]]),
                    _tokens(path, number, names[2], record[where[2]]), number)


def _first_line(handle: TextIO) -> str | None:
    return next((text for text in handle if text.strip()), None)


@functools.lru_cache(maxsize=4)
def load_trace(path: Path, format: str | None = None) -> Trace:
    """Read a trace once per process; `format` None detects it. ConfigError naming the file (and line) otherwise."""
    path = Path(path)
    if format is not None and format not in TRACE_FORMATS:
        raise ConfigError(f"trace {path}: unknown trace format {format!r} (known: {', '.join(TRACE_FORMATS)})")
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            first = _first_line(handle)
            if first is None:
                raise ConfigError(f"trace {path} line 1: the file is empty")
            format = format or detect_format(path, first)
            columns = _Columns(with_hash_ids=format == "mooncake")
            handle.seek(0)
            if format == "mooncake":
                _mooncake_rows(path, handle, columns)
            else:
                _csv_rows(path, handle, format, columns)
    except OSError as exc:
        raise ConfigError(f"trace {path} cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"trace {path} is not UTF-8 text") from None
    if not columns.times:
        raise ConfigError(f"trace {path} line {_line_count(path) + 1}: the trace holds no requests")
    return columns.trace(path, format)


def _line_count(path: Path) -> int:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        return sum(1 for _ in handle)


# -- planning ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceSchedule:
    """A trace laid on the wall clock: from `begin_t`, scaled by `speed`, looping until `end_t`."""

    trace: Trace
    begin_t: float
    end_t: float
    speed: float = 1.0

    def arrival(self, k: int) -> tuple[float, TraceRow]:
        """The k-th arrival (counting from 0 over every loop): its intended wall time and its row."""
        loop, index = divmod(k, len(self.trace))
        row = self.trace.row(index)
        return self.begin_t + (loop * self.trace.period_s + row.t_s) / self.speed, row

    def totals_before(self, wall_t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Arrivals planned before each wall time (not after `end_t`), and their prompt and output tokens."""
        trace = self.trace
        elapsed = np.clip((np.minimum(wall_t, self.end_t) - self.begin_t) * self.speed, 0.0, None)
        loops, within = np.divmod(elapsed, trace.period_s)
        index = np.searchsorted(trace.times_s, within, side="left")
        sums = [np.concatenate(([0], np.cumsum(column))) for column in (trace.input_tokens, trace.output_tokens)]
        requests = loops.astype(np.int64) * len(trace) + index
        prompt, output = (loops.astype(np.int64) * cum[-1] + cum[index] for cum in sums)
        return requests, prompt, output

    @property
    def loops(self) -> float:
        """How many times the trace plays in the run (a fraction for the last, partial loop)."""
        return max(self.end_t - self.begin_t, 0.0) * self.speed / self.trace.period_s


class TraceClock:
    """The dispatcher's clock for a trace: `peek`/`take` intended times like `ArrivalClock`; after `take`,
    `row` is the trace row of the arrival just taken."""

    def __init__(self, schedule: TraceSchedule) -> None:
        self.schedule = schedule
        self._k = 0
        self.row: TraceRow | None = None
        self.index = -1  # the row's index in the trace

    def take(self) -> float:
        intended_t, self.row = self.schedule.arrival(self._k)
        self.index = self._k % len(self.schedule.trace)
        self._k += 1
        return intended_t

    def peek(self) -> float:
        intended_t, _ = self.schedule.arrival(self._k)
        return intended_t if intended_t < self.schedule.end_t else math.inf


def schedule_trace(config: RunConfig, t0: float, begin_t: float, callers: HookCaller) -> TraceSchedule | None:
    """The `--trace` laid on the clock from the load's first possible arrival to the run's end (recorded as a
    `trace` event), or None without one."""
    load = config.load
    if load.trace is None:
        return None
    schedule = TraceSchedule(load_trace(load.trace, load.trace_format), begin_t, t0 + config.duration_s,
                             load.trace_speed)
    windows = planned_windows(schedule, t0, config.warmup_s, config.window_s)
    data = {**schedule.trace.describe(load.trace_speed), "loops": schedule.loops,
            "windows": windows if len(windows) <= MAX_TRACE_WINDOWS else None,
            "prompt_histogram": length_histogram(schedule.trace.input_tokens),
            "output_histogram": length_histogram(schedule.trace.output_tokens)}
    callers.event(EventKind.TRACE, f"replaying trace {data['name']} ({data['format']}, {data['rows']} requests, "
                  f"{data['trace_rate_rps']:.3g} req/s) at {load.trace_speed:g}× speed: {data['planned_rate_rps']:.3g} "
                  f"req/s, {schedule.loops:.2f} loops", data)
    return schedule


def planned_windows(schedule: TraceSchedule, t0: float, warmup_s: float, window_s: float) -> list[dict[str, int]]:
    """What the schedule sends in each window of the run (index -1 is the warm-up): requests, and the rows'
    prompt and output tokens; counted in closed form, so a 24 h run of a short trace costs nothing."""
    count = max(math.ceil((schedule.end_t - t0 - warmup_s) / window_s), 0)
    edges = np.array([t0, *(t0 + warmup_s + window_s * np.arange(count + 1))])
    requests, prompt, output = schedule.totals_before(np.minimum(edges, schedule.end_t))
    return [{"index": index - 1, "requests": int(requests[index + 1] - requests[index]),
             "prompt_tokens": int(prompt[index + 1] - prompt[index]),
             "output_tokens": int(output[index + 1] - output[index])} for index in range(count + 1)]


def length_histogram(tokens: np.ndarray) -> dict[str, list[int]]:
    """Rows by token count in doubling bins (up to 16, 17–32, 33–64, …): `upper` edges and `rows` in each."""
    upper = [16]
    while upper[-1] < int(tokens.max()):
        upper.append(upper[-1] * 2)
    counts = np.bincount(np.searchsorted(upper, tokens, side="left"), minlength=len(upper))
    return {"upper": upper, "rows": counts.tolist()}


def plan_trace_arrivals(schedule: TraceSchedule) -> list[tuple[float, TraceRow]]:
    """Every arrival of a schedule, in order: what a dispatcher replaying it sends."""
    clock, planned = TraceClock(schedule), []
    while clock.peek() < math.inf:
        intended_t = clock.take()
        planned.append((intended_t, clock.row))
    return planned


# -- prompts ----------------------------------------------------------------------------------------------
def exact_text(rng: random.Random, size_bytes: int) -> str:
    """Prose of exactly `size_bytes` bytes (ASCII), so prompts are as long as the trace says."""
    if size_bytes <= 0:
        return ""
    return text_of_bytes(rng, size_bytes + 64)[:size_bytes].ljust(size_bytes)


@functools.lru_cache(maxsize=4096)
def block_text(seed: int, hash_id: int, size_bytes: int) -> str:
    """The text of one prefix block: exactly `size_bytes` of prose, the same for the same seed and hash id."""
    return exact_text(random.Random(f"soak-trace-block:{seed}:{hash_id}"), size_bytes)


def trace_prompt(row: TraceRow, prompt_bytes: int, block_bytes: int, seed: int, rng: random.Random) -> str:
    """A prompt of `prompt_bytes` bytes: the row's hash-id blocks in order, then text of its own (from `rng`)."""
    blocks = []
    for hash_id in row.hash_ids[: math.ceil(prompt_bytes / block_bytes)] if block_bytes > 0 else ():
        blocks.append(block_text(seed, hash_id, block_bytes))
    prefix = "".join(blocks)[:prompt_bytes]
    return prefix + exact_text(rng, prompt_bytes - len(prefix))
