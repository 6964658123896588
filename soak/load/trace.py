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
import json
import logging
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from soak.errors import ConfigError
from soak.load.prompts import text_of_bytes

log = logging.getLogger(__name__)

TRACE_FORMATS = ("mooncake", "azure", "burstgpt")
MOONCAKE_BLOCK_TOKENS = 512  # Mooncake hashes prompts in blocks of 512 tokens
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


@dataclass(frozen=True)
class Trace:
    """A whole trace in arrival order; `sorted_from_line` names the first out-of-order line (None if in order)."""

    path: Path
    format: str
    rows: tuple[TraceRow, ...]
    sorted_from_line: int | None = None

    @property
    def span_s(self) -> float:
        """From the first arrival to the last, at the trace's own speed."""
        return self.rows[-1].t_s

    @property
    def period_s(self) -> float:
        """One loop at the trace's own speed: its span plus one mean gap, so the seam looks like the rest
        (1 s for a trace whose requests all arrive at once)."""
        count = len(self.rows)
        if count < 2 or self.span_s <= 0:
            return max(self.span_s, 1.0)
        return self.span_s * count / (count - 1)

    @property
    def mean_rate_rps(self) -> float:
        """Requests per second at the trace's own speed, over one loop."""
        return len(self.rows) / self.period_s

    def describe(self, speed: float = 1.0) -> dict[str, Any]:
        """The figures a run records about the trace it replays."""
        return {"name": self.path.name, "format": self.format, "rows": len(self.rows), "span_s": self.span_s,
                "period_s": self.period_s, "speed": speed, "trace_rate_rps": self.mean_rate_rps,
                "planned_rate_rps": self.mean_rate_rps * speed, "sorted_from_line": self.sorted_from_line,
                "mean_input_tokens": _mean(r.input_tokens for r in self.rows),
                "mean_output_tokens": _mean(r.output_tokens for r in self.rows)}


def _mean(values: Iterator[int]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0


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
        number = float(value)
    except (TypeError, ValueError):
        raise _bad(path, line, f"{column} {value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise _bad(path, line, f"{column} {value!r} is not a token count")
    return int(number)


def _seconds(path: Path, line: int, column: str, value: Any, scale: float) -> float:
    """A timestamp in seconds: a number (× scale), or for Azure an ISO date and time."""
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


def _mooncake_rows(path: Path, lines: list[str]) -> Iterator[TraceRow]:
    time_col, input_col, output_col = COLUMNS["mooncake"]
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except ValueError:
            raise _bad(path, number, "not a JSON object") from None
        if not isinstance(record, dict):
            raise _bad(path, number, "not a JSON object")
        missing = [name for name in COLUMNS["mooncake"] if record.get(name) is None]
        if missing:
            raise _bad(path, number, f"no {missing[0]!r} (a Mooncake row has timestamp, input_length, "
                       "output_length, hash_ids)")
        yield TraceRow(_seconds(path, number, time_col, record[time_col], 0.001),
                       _tokens(path, number, input_col, record[input_col]),
                       _tokens(path, number, output_col, record[output_col]),
                       _hash_ids(path, number, record.get("hash_ids", [])), number)


def _hash_ids(path: Path, line: int, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(item, int) and not isinstance(item, bool) for item in value):
        raise _bad(path, line, "hash_ids is not a list of integers")
    return tuple(value)


def _csv_rows(path: Path, lines: list[str], format: str) -> Iterator[TraceRow]:
    time_col, input_col, output_col = COLUMNS[format]
    reader = csv.DictReader(lines, skipinitialspace=True)
    header = [name.strip() for name in reader.fieldnames or ()]
    reader.fieldnames = header
    missing = [name for name in COLUMNS[format] if name not in header]
    if missing:
        raise _bad(path, 1, f"the header has no {missing[0]!r} column (a {format} trace has "
                   f"{', '.join(COLUMNS[format])})")
    for record in reader:
        number = reader.line_num
        absent = [name for name in COLUMNS[format] if record.get(name) in (None, "")]
        if absent:
            raise _bad(path, number, f"no {absent[0]!r} value")
        yield TraceRow(_seconds(path, number, time_col, record[time_col], 1.0),
                       _tokens(path, number, input_col, record[input_col]),
                       _tokens(path, number, output_col, record[output_col]), (), number)


def _in_order(path: Path, rows: list[TraceRow]) -> tuple[tuple[TraceRow, ...], int | None]:
    """Rows from the first arrival on (times relative to it), sorted when the file is not; where it was not."""
    late = next((b.line for a, b in zip(rows, rows[1:]) if b.t_s < a.t_s), None)
    if late is not None:
        log.warning("trace %s line %d: timestamps go backwards; the rows are replayed sorted by time", path, late)
        rows = sorted(rows, key=lambda row: row.t_s)  # stable: equal times keep the file's order
    first_t = rows[0].t_s
    return tuple(TraceRow(r.t_s - first_t, r.input_tokens, r.output_tokens, r.hash_ids, r.line) for r in rows), late


@functools.lru_cache(maxsize=4)
def load_trace(path: Path, format: str | None = None) -> Trace:
    """Read a trace once per process; `format` None detects it. ConfigError naming the file (and line) otherwise."""
    path = Path(path)
    if format is not None and format not in TRACE_FORMATS:
        raise ConfigError(f"trace {path}: unknown trace format {format!r} (known: {', '.join(TRACE_FORMATS)})")
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except OSError as exc:
        raise ConfigError(f"trace {path} cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"trace {path} is not UTF-8 text") from None
    first = next((text for text in lines if text.strip()), None)
    if first is None:
        raise ConfigError(f"trace {path} line 1: the file is empty")
    format = format or detect_format(path, first)
    rows = list(_mooncake_rows(path, lines) if format == "mooncake" else _csv_rows(path, lines, format))
    if not rows:
        raise _bad(path, len(lines) + 1, "the trace holds no requests")
    ordered, late = _in_order(path, rows)
    return Trace(path, format, ordered, late)


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
        loop, index = divmod(k, len(self.trace.rows))
        row = self.trace.rows[index]
        return self.begin_t + (loop * self.trace.period_s + row.t_s) / self.speed, row

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

    def peek(self) -> float:
        intended_t, _ = self.schedule.arrival(self._k)
        return intended_t if intended_t < self.schedule.end_t else math.inf

    def take(self) -> float:
        intended_t, self.row = self.schedule.arrival(self._k)
        self._k += 1
        return intended_t


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
