"""Gates: the thresholds every check judges against, loadable from a TOML file.

docs/gates.md documents each key. Leak thresholds are absolute rates that do not loosen when a run
is shorter: a short run is not held to a laxer standard, it is only less able to prove a PASS
(its CI is wider, so it ends INCONCLUSIVE more often). A memory threshold left unset is derived
from the run's headroom and the service horizon (`soak start --horizon`, default 7 d).
"""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from soak.analysis.findings import CHECK_NAMES
from soak.analysis.steps import StepSpec
from soak.analysis.trend import TrendSpec
from soak.errors import ConfigError
from soak.units import parse_bytes

MIB = 2**20
HOUR_S = 3600.0
DEFAULT_HORIZON_S = 7 * 86400.0
# Keys older gates files may still carry; ignored with a warning (thresholds no longer scale with run length).
RETIRED_KEYS = {("suspect_min_fraction",), ("leak", "rss", "growth_frac"), ("leak", "rss", "min_growth_bytes"),
                ("leak", "vram", "growth_frac"), ("leak", "vram", "min_growth_bytes"),
                ("leak", "fds", "growth_frac"), ("leak", "fds", "min_growth_fds")}

log = logging.getLogger(__name__)

DEFAULT_REQUIRED = (
    "leak.rss", "leak.vram", "leak.kv", "creep.ttft_p99", "creep.e2e_p99",
    "errors.rise", "errors.budget", "hang", "crashes", "client.saturation",
    "goodput.decay", "goodput.floor",  # required only on a run that set an SLO (verdict.required_checks)
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
    """A memory trend FAILs when its slope reaches the threshold: `slope_bytes_per_h` when set,
    else the rate that would use up the run's headroom within the horizon, capped at
    `max_default_bytes_per_h` (see `threshold_bytes_per_h`)."""

    slope_bytes_per_h: Bytes | None = None
    max_default_bytes_per_h: Bytes = 16 * MIB
    # The least growth that can FAIL, whatever the run's length: a slope's rise over the judged span
    # or one step must reach max(min_change_bytes, min_change_frac × the series' level).
    min_change_bytes: Bytes = 64 * MIB
    min_change_frac: Fraction = 0.02
    # Net growth in lasting steps FAILs from min(net_growth_bytes, net_growth_headroom_frac × headroom).
    net_growth_bytes: Bytes = 128 * MIB
    net_growth_headroom_frac: Fraction = 0.05

    def min_change(self, level_bytes: float) -> float:
        """The least growth that can FAIL a series whose level is `level_bytes`."""
        return max(self.min_change_bytes, self.min_change_frac * max(level_bytes, 0.0))

    def net_growth_threshold(self, headroom_bytes: float | None) -> float:
        """Lasting steps adding up to this much FAIL: the MiB figure, or less on a host with little left."""
        if headroom_bytes is None or headroom_bytes <= 0:
            return self.net_growth_bytes
        return min(self.net_growth_bytes, self.net_growth_headroom_frac * headroom_bytes)

    def threshold_bytes_per_h(self, headroom_bytes: float | None, horizon_s: float) -> float:
        """The user's figure, else min(cap, headroom ÷ horizon); the cap when headroom is unknown."""
        if self.slope_bytes_per_h is not None:
            return self.slope_bytes_per_h
        if headroom_bytes is None or headroom_bytes <= 0 or horizon_s <= 0:
            return self.max_default_bytes_per_h
        return min(self.max_default_bytes_per_h, headroom_bytes / (horizon_s / HOUR_S))


class FdLeakGate(_Strict):
    """An fd trend FAILs when its slope reaches `slope_fds_per_h` (an absolute rate) and the fds it built over
    the judged span (or one step) reach `min_change_fds`."""

    slope_fds_per_h: Annotated[float, Field(ge=0)] = 4.0
    # The least growth that can FAIL, whatever the run's length: a few connections more, held while the load or
    # the latency is higher, is not a leak (a short run with such a rise is at most SUSPECT).
    min_change_fds: Annotated[float, Field(ge=0)] = 16.0


class KvGate(_Strict):
    """After an idle-probe drain the KV cache must be empty and nothing running. Without probes the
    floor of each window's KV usage is trend-tested against `floor_threshold_per_h`."""

    max_kv_usage: Fraction = 0.001
    max_running: Annotated[float, Field(ge=0)] = 0.0
    floor_slope_per_h: Fraction | None = None
    # Without probes a window's floor follows the load too (longer requests hold blocks at every moment), so a
    # lasting step of the floor counts from this share of the cache, however long the run.
    floor_min_step: Fraction = 0.05

    def floor_threshold_per_h(self, start_floor: float, horizon_s: float) -> float:
        """The user's figure, else the rate that would fill the rest of the cache (1 − starting
        floor, at least 1 %) within the horizon."""
        if self.floor_slope_per_h is not None:
            return self.floor_slope_per_h
        return max(1.0 - start_floor, 0.01) / (max(horizon_s, 1.0) / HOUR_S)


class LeakGates(_Strict):
    rss: MemoryLeakGate = MemoryLeakGate()
    # NVML reads VRAM exactly and a preallocated plateau does not breathe: a small absolute floor, no share.
    vram: MemoryLeakGate = MemoryLeakGate(min_change_bytes=8 * MIB, min_change_frac=0.0)
    fds: FdLeakGate = FdLeakGate()
    kv: KvGate = KvGate()


class CreepGate(_Strict):
    """FAIL when the window percentile is projected to rise by ≥ rise_frac over the judged span — at
    equal offered load when the load varies — or steps up lastingly by ≥ rise_frac."""

    rise_frac: Positive = 0.25


class CreepGates(_Strict):
    ttft_p99: CreepGate = CreepGate()
    itl_p99: CreepGate = CreepGate()
    e2e_p99: CreepGate = CreepGate()
    server_itl: CreepGate = CreepGate()  # the mean ITL the server measured, on a replica behind a --router


class ErrorGates(_Strict):
    """`budget` bounds the error rate over the run and over its last segment; `rise_abs` is the
    rise (trend over the run, or a lasting step) that FAILs `errors.rise`; the `burst_*` keys say
    when a window's error count stands out."""

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
    """FAIL when output tokens per offered request are projected to decline by ≥ decay_frac."""

    decay_frac: Annotated[float, Field(gt=0, lt=1)] = 0.10


class GoodputGate(_Strict):
    """`goodput.decay` FAILs when the share of requests meeting every SLO target is projected to fall by
    ≥ decay_abs over the judged span (or falls that much in one lasting step); `goodput.floor` FAILs when a judged
    window's share is under `floor` beyond doubt (DistServe's attainment target is 90 %)."""

    decay_abs: Annotated[float, Field(gt=0, le=1)] = 0.05
    floor: Fraction = 0.90


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
    goodput_tolerance: Fraction = 0.01  # the share meeting --slo, absolute (1 pp), compared under the same SLO only
    fail_on_regression: bool = False


class Gates(_Strict):
    """All thresholds; `Gates()` gives the defaults."""

    required: tuple[str, ...] = DEFAULT_REQUIRED
    min_windows: Annotated[int, Field(ge=3)] = 20
    p_value: Annotated[float, Field(gt=0, lt=0.5)] = 0.01
    confidence: Annotated[float, Field(gt=0.5, lt=1)] = 0.95
    leak: LeakGates = LeakGates()
    creep: CreepGates = CreepGates()
    errors: ErrorGates = ErrorGates()
    hang: HangGate = HangGate()
    throughput: ThroughputGate = ThroughputGate()
    goodput: GoodputGate = GoodputGate()
    client: ClientGate = ClientGate()
    baseline: BaselineGate = BaselineGate()

    def trend_spec(self, min_slope_per_s: float, persistence: bool = False) -> TrendSpec:
        """The trend test's settings for one series, with the run-wide statistics gates. It gets
        half of `p_value`: the other half goes to the step gate that judges the same series."""
        return TrendSpec(min_slope_per_s=min_slope_per_s, p_value=self.p_value / 2,
                         confidence=self.confidence, min_points=self.min_windows,
                         persistence=persistence)

    def step_spec(self, min_shift: float, **fields: Any) -> StepSpec:
        """The step gate's settings for one series: the other half of `p_value` (see trend_spec)."""
        return StepSpec(min_shift=min_shift, p_value=self.p_value / 2, **fields)

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
    merged = _deep_merge(Gates().model_dump(), _drop_retired(data, source))
    try:
        return Gates.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(f"gates file {source}: {_first_problem(exc)}") from None


def _drop_retired(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A copy of `data` without the retired keys, each one named in a warning."""
    def strip(table: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        out = {}
        for key, value in table.items():
            if path + (key,) in RETIRED_KEYS:
                log.warning("gates file %s: %s is no longer used (thresholds do not scale with run length)",
                            source, ".".join(path + (key,)))
            elif isinstance(value, dict):
                out[key] = strip(value, path + (key,))
            else:
                out[key] = value
        return out

    return strip(data, ())


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
