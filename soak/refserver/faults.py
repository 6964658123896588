"""Fault specs: `--fault NAME[=VALUE]` texts parsed into one typed, immutable `FaultSet`.

Values use the server's time convention: durations and RATE are in *model time* (uptime × time
scale), stall and error-burst lengths are in wall seconds. See docs/refserver.md for the catalogue.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Literal

from soak.refserver.units import parse_bytes, parse_duration

DEFAULT_BURST_LENGTH_S = 3.0
DEFAULT_RATCHET = (16 * 2**20, 300.0)  # 16 MiB per step, over the first 5 model minutes
DEFAULT_SAWTOOTH = (64 * 2**20, 120.0)  # 64 MiB peak, one cycle per 2 model minutes
# Half the default 2048-token context: every long_context prompt (80-95 % of the context) is above it, chat_short and
# cancel prompts (a question and at most 400 bytes) far below.
LONG_PROMPT_TOKENS = 1024
LEAK_KINDS = ("cancel", "long-prompt")


class FaultSpecError(ValueError):
    """A `--fault` text names an unknown fault or carries a value it cannot take."""


@dataclass(frozen=True)
class EventFault:
    """Seeded Poisson events: `rate_per_hour` per model hour, each lasting `length_s` wall seconds.

    `length_s` None means the fault picks a length per event (stalls: 1–3 s).
    """

    rate_per_hour: float
    length_s: float | None


@dataclass(frozen=True)
class KVLeak:
    """kv-leak-on-abort: an aborted request keeps its last `max_blocks` blocks for good (None: all of them)."""

    max_blocks: int | None = None

    def blocks_kept(self, held: int) -> int:
        """How many of the `held` blocks of an aborted request leak."""
        return held if self.max_blocks is None else min(self.max_blocks, held)


@dataclass(frozen=True)
class KindLeak:
    """rss-leak-on: each finished request of one kind leaves `size_bytes` of host memory allocated.

    `cancel`: requests the client abandoned before they finished (a disconnect, streaming or not);
    `long-prompt`: requests whose prompt has at least `min_prompt_tokens` tokens, however they ended.
    """

    kind: Literal["cancel", "long-prompt"]
    size_bytes: int
    min_prompt_tokens: int = LONG_PROMPT_TOKENS

    def leaks(self, reason: str, prompt_tokens: int) -> bool:
        """Whether a request that ended with finish `reason` ("stop", "length", "abort") after a prompt of
        `prompt_tokens` leaks."""
        if self.kind == "cancel":
            return reason == "abort"
        return prompt_tokens >= self.min_prompt_tokens


@dataclass(frozen=True)
class MemoryShape:
    """Healthy memory noise: `size_bytes` per ratchet step / sawtooth peak, over `span_s` model seconds."""

    size_bytes: int
    span_s: float


@dataclass(frozen=True)
class MemorySteps:
    """rss-steps: `size_bytes` of host memory allocated at each of `at_s` (model seconds) and never freed."""

    size_bytes: int
    at_s: tuple[float, ...]


@dataclass(frozen=True)
class FaultSet:
    """The active faults; a zero/None field means the fault is off."""

    texts: tuple[str, ...] = ()
    rss_leak_bytes: int = 0
    rss_leak_swapped_bytes: int = 0
    rss_leak_on: KindLeak | None = None
    kv_leak_on_abort: KVLeak | None = None
    latency_creep_pct: float = 0.0
    error_rise: tuple[float, float] | None = None
    error_bursts: EventFault | None = None
    fd_leak: int = 0
    crash_after_s: float | None = None
    hang_after_s: float | None = None
    vram_leak_bytes: int = 0
    corrupt_after: int | None = None
    log_engine_dead_after_s: float | None = None
    invalid_output_after_s: float | None = None
    image_leak_bytes: int = 0
    lora_leak_bytes: int = 0
    warmup_ratchet: MemoryShape | None = None
    gc_sawtooth: MemoryShape | None = None
    rss_steps: MemorySteps | None = None
    stalls: EventFault | None = None
    names: tuple[str, ...] = ()  # fault names in the order given


def _require(value: str | None, form: str) -> str:
    if value is None or not value.strip():
        raise ValueError(f"needs a value: {form}")
    return value.strip()


def _kv_leak(value: str | None) -> KVLeak:
    return KVLeak(None if value is None else _count(value))


def _positive_bytes(value: str | None) -> int:
    size = parse_bytes(_require(value, "BYTES, e.g. 4096, 512KiB, 2MiB"))
    if size <= 0:
        raise ValueError("BYTES must be > 0")
    return size


def _kind_leak(value: str | None) -> KindLeak:
    form = "KIND:BYTES[:N], KIND cancel or long-prompt, e.g. cancel:2MiB or long-prompt:2MiB:1024"
    kind, sep, rest = _require(value, form).partition(":")
    if kind not in LEAK_KINDS:
        raise ValueError(f"KIND must be {' or '.join(LEAK_KINDS)}, got {kind!r}")
    if not sep:
        raise ValueError(f"needs a size: {form}")
    size_text, sep, tokens_text = rest.partition(":")
    if sep and kind != "long-prompt":
        raise ValueError("only long-prompt takes N, the shortest prompt in tokens that leaks")
    tokens = _count(tokens_text) if sep else LONG_PROMPT_TOKENS
    return KindLeak(kind, _positive_bytes(size_text), tokens)  # type: ignore[arg-type]  # KIND was checked above


def _percent(value: str | None) -> float:
    text = _require(value, "PCT per model hour, e.g. 20 or 20%").removesuffix("%")
    pct = _number(text, "PCT")
    if pct < 0:
        raise ValueError("PCT must be >= 0")
    return pct


def _probability_pair(value: str | None) -> tuple[float, float]:
    start, sep, end = _require(value, "FROM:TO probabilities, e.g. 0:0.2").partition(":")
    if not sep:
        raise ValueError("expected FROM:TO, e.g. 0:0.2")
    pair = (_number(start, "FROM"), _number(end, "TO"))
    if not all(0.0 <= p <= 1.0 for p in pair):
        raise ValueError("FROM and TO are probabilities in [0, 1]")
    return pair


def _event_fault(default_length_s: float | None) -> Callable[[str | None], EventFault]:
    def parse(value: str | None) -> EventFault:
        rate_text, sep, length_text = _require(value, "RATE[:LENGTH], RATE per model hour").partition(":")
        rate = _number(rate_text, "RATE")
        if rate <= 0:
            raise ValueError("RATE must be > 0 (events per model hour)")
        length_s = _positive_duration(length_text) if sep else default_length_s
        return EventFault(rate, length_s)

    return parse


def _count(value: str | None) -> int:
    text = _require(value, "N, a whole number")
    if not text.isdigit() or int(text) <= 0:
        raise ValueError(f"N must be a whole number > 0, got {text!r}")
    return int(text)


def _duration(value: str | None) -> float:
    return parse_duration(_require(value, "a duration, e.g. 90s, 5m, 1h30m"))


def _positive_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError("LENGTH must be > 0")
    return seconds


def _memory_shape(default: tuple[int, float]) -> Callable[[str | None], MemoryShape]:
    def parse(value: str | None) -> MemoryShape:
        if value is None:
            return MemoryShape(*default)
        size_text, sep, span_text = value.partition(":")
        size = _positive_bytes(size_text)
        return MemoryShape(size, _positive_duration(span_text) if sep else default[1])

    return parse


def _memory_steps(value: str | None) -> MemorySteps:
    form = "BYTES@T1,T2,… model times, e.g. 200MiB@12h,18h"
    size_text, sep, times_text = _require(value, form).partition("@")
    if not sep or not times_text.strip():
        raise ValueError(f"needs the step times: {form}")
    times = tuple(sorted(_duration(text) for text in times_text.split(",")))
    return MemorySteps(_positive_bytes(size_text), times)


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{what} must be a number, got {text!r}") from None


# fault name → (FaultSet field, value parser)
_PARSERS: dict[str, tuple[str, Callable[[str | None], object]]] = {
    "rss-leak": ("rss_leak_bytes", _positive_bytes),
    "rss-leak-swapped": ("rss_leak_swapped_bytes", _positive_bytes),
    "rss-leak-on": ("rss_leak_on", _kind_leak),
    "kv-leak-on-abort": ("kv_leak_on_abort", _kv_leak),
    "latency-creep": ("latency_creep_pct", _percent),
    "error-rise": ("error_rise", _probability_pair),
    "error-bursts": ("error_bursts", _event_fault(DEFAULT_BURST_LENGTH_S)),
    "fd-leak": ("fd_leak", _count),
    "crash-after": ("crash_after_s", _duration),
    "hang-after": ("hang_after_s", _duration),
    "vram-leak": ("vram_leak_bytes", _positive_bytes),
    "corrupt-after": ("corrupt_after", _count),
    "log-engine-dead-after": ("log_engine_dead_after_s", _duration),
    "invalid-output-after": ("invalid_output_after_s", _duration),
    "image-leak": ("image_leak_bytes", _positive_bytes),
    "lora-leak": ("lora_leak_bytes", _positive_bytes),
    "warmup-ratchet": ("warmup_ratchet", _memory_shape(DEFAULT_RATCHET)),
    "gc-sawtooth": ("gc_sawtooth", _memory_shape(DEFAULT_SAWTOOTH)),
    "rss-steps": ("rss_steps", _memory_steps),
    "stalls": ("stalls", _event_fault(None)),
}
FAULT_NAMES = tuple(_PARSERS)
assert {f for f, _ in _PARSERS.values()} <= {f.name for f in fields(FaultSet)}


def parse_fault(text: str) -> tuple[str, object]:
    """Parse one `NAME[=VALUE]` into (FaultSet field name, parsed value)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if name not in _PARSERS:
        raise FaultSpecError(f"unknown fault {name!r} in --fault {text!r}; known: {', '.join(FAULT_NAMES)}")
    field_name, parse = _PARSERS[name]
    try:
        return field_name, parse(value if sep else None)
    except ValueError as exc:
        raise FaultSpecError(f"bad --fault {text!r}: {name} {exc}") from None


def parse_faults(texts: Sequence[str]) -> FaultSet:
    """Parse every `--fault` text; a fault given twice is an error."""
    values: dict[str, object] = {}
    names: list[str] = []
    for text in texts:
        field_name, value = parse_fault(text)
        name = text.partition("=")[0].strip()
        if name in names:
            raise FaultSpecError(f"fault {name!r} given twice")
        names.append(name)
        values[field_name] = value
    return FaultSet(texts=tuple(texts), names=tuple(names), **values)
