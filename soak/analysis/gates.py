"""Gates: the thresholds every check judges against, loadable from a TOML file.

Defaults suit a 24 h run; docs/gates.md documents each key and how it scales for short runs.
Thresholds are rates (per hour) combined with growth relative to the run's own level, so the same
file serves a 5-minute and a 72-hour run: a short run simply needs a larger relative change to FAIL.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from soak.analysis.findings import CHECK_NAMES
from soak.analysis.trend import TrendSpec
from soak.errors import ConfigError
from soak.units import parse_bytes

MIB = 2**20

DEFAULT_REQUIRED = (
    "leak.rss", "leak.vram", "leak.kv", "creep.ttft_p99", "creep.e2e_p99",
    "errors.rise", "errors.budget", "hang", "crashes", "client.saturation",
)


def _to_bytes(value: Any) -> Any:
    """Accept `16MiB`-style strings as well as plain numbers of bytes."""
    if not isinstance(value, str):
        return value
    try:
        return float(parse_bytes(value))
    except ConfigError as exc:  # pydantic reports ValueErrors with the key's location
        raise ValueError(str(exc)) from None


Bytes = Annotated[float, BeforeValidator(_to_bytes), Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Positive = Annotated[float, Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MemoryLeakGate(_Strict):
    """A memory trend FAILs when slope ≥ slope_bytes_per_h and the growth projected over the
    judged span ≥ max(growth_frac × starting floor, min_growth_bytes)."""

    slope_bytes_per_h: Bytes
    growth_frac: Fraction
    min_growth_bytes: Bytes = 0.0


class FdLeakGate(_Strict):
    """Like MemoryLeakGate, counted in open file descriptors."""

    slope_fds_per_h: Annotated[float, Field(ge=0)] = 4.0
    growth_frac: Fraction = 0.05
    min_growth_fds: Annotated[float, Field(ge=0)] = 8.0


class KvGate(_Strict):
    """After an idle-probe drain the KV cache must be empty and nothing running."""

    max_kv_usage: Fraction = 0.001
    max_running: Annotated[float, Field(ge=0)] = 0.0


class LeakGates(_Strict):
    rss: MemoryLeakGate = MemoryLeakGate(slope_bytes_per_h=16 * MIB, growth_frac=0.05)
    vram: MemoryLeakGate = MemoryLeakGate(slope_bytes_per_h=16 * MIB, growth_frac=0.0,
                                          min_growth_bytes=64 * MIB)
    fds: FdLeakGate = FdLeakGate()
    kv: KvGate = KvGate()


class CreepGate(_Strict):
    """FAIL when the window percentile is projected to rise by ≥ rise_frac over the judged span."""

    rise_frac: Positive = 0.25


class CreepGates(_Strict):
    ttft_p99: CreepGate = CreepGate()
    itl_p99: CreepGate = CreepGate()
    e2e_p99: CreepGate = CreepGate()


class ErrorGates(_Strict):
    budget: Fraction = 0.01
    rise_abs: Annotated[float, Field(gt=0, le=1)] = 0.005
    burst_p_value: Annotated[float, Field(gt=0, lt=1)] = 3e-6
    burst_factor: Annotated[float, Field(ge=1)] = 3.0
    burst_min_errors: Annotated[int, Field(ge=1)] = 5
    fail_on_bursts: bool = False


class HangGate(_Strict):
    """Effective stall limit = max(min_after_s, min(after_s, short_run_fraction × planned run))."""

    after_s: Positive = 60.0
    min_after_s: Positive = 10.0
    short_run_fraction: Annotated[float, Field(gt=0, le=1)] = 0.05

    def effective_after_s(self, planned_duration_s: float) -> float:
        return max(self.min_after_s, min(self.after_s, self.short_run_fraction * planned_duration_s))


class ThroughputGate(_Strict):
    decay_frac: Annotated[float, Field(gt=0, lt=1)] = 0.10


class ClientGate(_Strict):
    lag_p99_invalid_ms: Positive = 100.0
    lag_p99_suspect_ms: Positive = 10.0
    late_frac_invalid: Fraction = 0.01
    cpu_suspect_percent: Positive = 90.0

    @model_validator(mode="after")
    def _ordered(self) -> ClientGate:
        if self.lag_p99_suspect_ms > self.lag_p99_invalid_ms:
            raise ValueError(f"lag_p99_suspect_ms ({self.lag_p99_suspect_ms:g}) must not exceed "
                             f"lag_p99_invalid_ms ({self.lag_p99_invalid_ms:g})")
        return self


class BaselineGate(_Strict):
    latency_tolerance: Positive = 0.10
    throughput_tolerance: Positive = 0.05
    error_rate_tolerance: Fraction = 0.001
    fail_on_regression: bool = False


class Gates(_Strict):
    """All thresholds; `Gates()` gives the defaults."""

    required: tuple[str, ...] = DEFAULT_REQUIRED
    min_windows: Annotated[int, Field(ge=3)] = 20
    p_value: Annotated[float, Field(gt=0, lt=0.5)] = 0.01
    confidence: Annotated[float, Field(gt=0.5, lt=1)] = 0.95
    suspect_min_fraction: Fraction = 0.25
    leak: LeakGates = LeakGates()
    creep: CreepGates = CreepGates()
    errors: ErrorGates = ErrorGates()
    hang: HangGate = HangGate()
    throughput: ThroughputGate = ThroughputGate()
    client: ClientGate = ClientGate()
    baseline: BaselineGate = BaselineGate()

    def trend_spec(self, min_slope_per_s: float, persistence: bool = False) -> TrendSpec:
        """The trend test's settings for one series, with the run-wide statistics gates."""
        return TrendSpec(min_slope_per_s=min_slope_per_s, p_value=self.p_value,
                         confidence=self.confidence, min_points=self.min_windows,
                         persistence=persistence, suspect_min_fraction=self.suspect_min_fraction)

    @field_validator("required")
    @classmethod
    def _known_checks(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [n for n in names if n not in CHECK_NAMES]
        if unknown:
            raise ValueError(f"unknown check {unknown[0]!r}; known: {', '.join(CHECK_NAMES)}")
        return names


def load_gates(path: str | Path | None) -> Gates:
    """Read a gates TOML file (None → defaults); raise ConfigError naming the bad key or value."""
    if path is None:
        return Gates()
    source = Path(path)
    try:
        data = tomllib.loads(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"gates file {source}: cannot read it ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"gates file {source}: not valid TOML ({exc})") from None
    return gates_from_dict(data, source=str(source))


def gates_from_dict(data: dict[str, Any], source: str = "gates") -> Gates:
    """Validate a parsed mapping into Gates; raise ConfigError with one line on the first problem."""
    # A table in the file overrides single keys; the rest keep their defaults.
    merged = _deep_merge(Gates().model_dump(), data)
    try:
        return Gates.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(f"gates file {source}: {_first_problem(exc)}") from None


def _deep_merge(defaults: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = dict(defaults)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _first_problem(exc: ValidationError) -> str:
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")  # typos first
    error = errors[0]
    key = ".".join(str(part) for part in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden":
        return f"unknown key {key!r}"
    message = str(error["msg"]).removeprefix("Value error, ")
    if isinstance(error.get("input"), dict):  # a cross-key rule: the message names the keys
        return f"{key}: {message}"
    return f"{key} = {error.get('input')!r}: {message}"
