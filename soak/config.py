"""The typed configuration of a run, resolved once from flags > SOAK_* environment > TOML file > defaults.

Users write flat keys named like the CLI flags (`rate = 5`, `sample-every = "5s"`, `scenario = ["chat_short:3"]`)
plus optional `[[phase]]` tables; `resolve_config` maps them onto the nested, unit-explicit models below, which
every stage receives read-only.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from soak.errors import ConfigError
from soak.units import parse_duration

WARMUP_FRACTION = 0.05
WARMUP_MIN_S, WARMUP_MAX_S = 30.0, 3600.0
WINDOWS_PER_RUN = 48
WINDOW_MIN_S, WINDOW_MAX_S = 5.0, 1800.0
PROBE_EVERY_MIN_S, PROBE_EVERY_MAX_S = 60.0, 3600.0
PROBE_HOLD_S, PROBE_DRAIN_S = 30.0, 60.0
DEFAULT_OUT = "./soak-runs"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def _duration_field(value: Any) -> Any:
    return None if value is None else parse_duration(value)


class ScenarioSpec(_Model):
    """A built-in scenario name or a path to a user's scenario file, with its weight in the mix."""

    name: str
    weight: float = Field(default=1.0, gt=0)

    @classmethod
    def parse(cls, text: str) -> ScenarioSpec:
        """Parse `long_tail:3` or `path/to/file.py:2` or `cancel`."""
        name, sep, weight = text.rpartition(":")
        if sep and weight.replace(".", "", 1).isdigit():
            return cls(name=name, weight=float(weight))
        return cls(name=text)


class PhaseSpec(_Model):
    """One phase of the load shape; phases run in order and the last one repeats to the end of the run."""

    kind: Literal["steady", "ramp", "wave", "burst"]
    duration_s: float | None = None
    rate_rps: float | None = Field(default=None, ge=0)
    to_rate_rps: float | None = Field(default=None, ge=0)
    period_s: float | None = Field(default=None, gt=0)
    amplitude: float = Field(default=0.5, ge=0, le=1)
    factor: float = Field(default=3.0, gt=0)
    burst_s: float = Field(default=30.0, gt=0)

    _durations = field_validator("duration_s", "period_s", "burst_s", mode="before")(_duration_field)


class TargetSettings(_Model):
    """Which server to test and how to start it."""

    url: str | None = None
    model: str | None = None
    served_model: str | None = None
    vllm_bin: str | None = None
    serve_args: tuple[str, ...] = ()
    reference_faults: tuple[str, ...] = ()
    reference_args: tuple[str, ...] = ()
    time_scale: float = Field(default=1.0, gt=0)
    reference_seed: int = 0
    device: Literal["cpu", "cuda"] = "cpu"
    server_pids: tuple[int, ...] = ()
    metrics_urls: tuple[str, ...] = ()
    restart: Literal["never", "on-crash"] = "never"
    max_restarts: int = Field(default=3, ge=0)
    startup_timeout_s: float = Field(default=900.0, gt=0)
    api_key_env: str | None = None

    _durations = field_validator("startup_timeout_s", mode="before")(_duration_field)

    @field_validator("url")
    @classmethod
    def _strip_v1(cls, url: str | None) -> str | None:
        if url is None:
            return None
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"target URL {url!r} must start with http:// or https://")
        url = url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    @property
    def kind(self) -> Literal["reference", "vllm", "external"]:
        """reference when nothing is named, vllm with --model, external with --target."""
        if self.url:
            return "external"
        return "vllm" if self.model else "reference"


class LoadSettings(_Model):
    """The traffic: arrivals, mix, phases and idle probes."""

    rate_rps: float = Field(default=2.0, gt=0)
    burstiness: float | None = Field(default=None, gt=0)
    max_concurrency: int | None = Field(default=None, gt=0)
    scenarios: tuple[ScenarioSpec, ...] = (ScenarioSpec(name="mixed"),)
    phases: tuple[PhaseSpec, ...] = ()
    idle_probe_every_s: float | None = None
    idle_probe_for_s: float | None = None
    drain_timeout_s: float | None = None
    no_idle_probes: bool = False
    seed: int = 0
    dataset: Path | None = None
    workers: int = Field(default=0, ge=0)
    request_timeout_s: float = Field(default=300.0, gt=0)

    _durations = field_validator(
        "idle_probe_every_s", "idle_probe_for_s", "drain_timeout_s", "request_timeout_s", mode="before"
    )(_duration_field)

    @field_validator("scenarios", mode="before")
    @classmethod
    def _parse_scenarios(cls, value: Any) -> Any:
        items = [value] if isinstance(value, str) else list(value)
        return tuple(ScenarioSpec.parse(v) if isinstance(v, str) else v for v in items)


class TelemetrySettings(_Model):
    """How often to sample, and what extra to scrape."""

    sample_every_s: float = Field(default=5.0, gt=0)
    flush_every_s: float = Field(default=5.0, gt=0, le=5.0)
    canary_every_s: float | None = None

    _durations = field_validator("sample_every_s", "flush_every_s", "canary_every_s", mode="before")(_duration_field)


class RunConfig(_Model):
    """Everything one run needs, in internal units; built by `resolve_config`."""

    duration_s: float = Field(gt=0)
    warmup_s: float = Field(ge=0)
    window_s: float = Field(gt=0)
    out_dir: Path
    db_url: str
    gates_file: Path | None = None
    baseline: str | None = None
    json_output: bool = False
    keep_requests: bool = False
    notify_env: str | None = None
    config_file: Path | None = None
    target: TargetSettings = TargetSettings()
    load: LoadSettings = LoadSettings()
    telemetry: TelemetrySettings = TelemetrySettings()

    @model_validator(mode="after")
    def _check_spans(self) -> RunConfig:
        if self.warmup_s >= self.duration_s:
            raise ValueError(f"warm-up ({self.warmup_s:g}s) must be shorter than the run ({self.duration_s:g}s)")
        return self

    @property
    def probe_every_s(self) -> float | None:
        """Seconds between idle probes, or None when probes are off."""
        if self.load.no_idle_probes:
            return None
        if self.load.idle_probe_every_s is not None:
            return self.load.idle_probe_every_s or None
        return min(max(self.duration_s / 6, PROBE_EVERY_MIN_S), PROBE_EVERY_MAX_S)

    @property
    def probe_hold_s(self) -> float:
        """Seconds to hold after a drain before sampling the idle floor."""
        if self.load.idle_probe_for_s is not None:
            return self.load.idle_probe_for_s
        return min(PROBE_HOLD_S, self.window_s)

    @property
    def probe_drain_timeout_s(self) -> float:
        """Longest wait for in-flight requests to finish at a probe; past it the drain is recorded as timed out."""
        if self.load.drain_timeout_s is not None:
            return self.load.drain_timeout_s
        return min(PROBE_DRAIN_S, max(self.window_s, 10.0))


# Flat user keys (flag names, dashes or underscores) → (section, field). Sections: "" is RunConfig itself.
FLAT_KEYS: dict[str, tuple[str, str]] = {
    "duration": ("", "duration_s"), "warmup": ("", "warmup_s"), "window": ("", "window_s"),
    "out": ("", "out_dir"), "db": ("", "db_url"), "gates": ("", "gates_file"), "baseline": ("", "baseline"),
    "json": ("", "json_output"), "keep_requests": ("", "keep_requests"), "notify_env": ("", "notify_env"),
    "target": ("target", "url"), "model": ("target", "model"), "served_model": ("target", "served_model"),
    "vllm_bin": ("target", "vllm_bin"), "serve_arg": ("target", "serve_args"),
    "reference_fault": ("target", "reference_faults"), "reference_arg": ("target", "reference_args"),
    "time_scale": ("target", "time_scale"), "reference_seed": ("target", "reference_seed"),
    "device": ("target", "device"), "server_pid": ("target", "server_pids"),
    "metrics_url": ("target", "metrics_urls"), "restart": ("target", "restart"),
    "max_restarts": ("target", "max_restarts"), "startup_timeout": ("target", "startup_timeout_s"),
    "api_key_env": ("target", "api_key_env"),
    "rate": ("load", "rate_rps"), "burstiness": ("load", "burstiness"),
    "max_concurrency": ("load", "max_concurrency"), "scenario": ("load", "scenarios"),
    "phase": ("load", "phases"), "idle_probe_every": ("load", "idle_probe_every_s"),
    "idle_probe_for": ("load", "idle_probe_for_s"), "drain_timeout": ("load", "drain_timeout_s"),
    "no_idle_probes": ("load", "no_idle_probes"), "seed": ("load", "seed"), "dataset": ("load", "dataset"),
    "workers": ("load", "workers"), "request_timeout": ("load", "request_timeout_s"),
    "sample_every": ("telemetry", "sample_every_s"), "canary_every": ("telemetry", "canary_every_s"),
}
_DURATION_KEYS = {"duration", "warmup", "window"}
_LIST_KEYS = {"serve_arg", "reference_fault", "reference_arg", "server_pid", "metrics_url", "scenario"}


def _normalise_key(key: str) -> str:
    return key.strip().lower().replace("-", "_")


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a TOML config file of flat keys; a missing or malformed file is a ConfigError."""
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    return {_normalise_key(k): v for k, v in data.items()}


def read_environment(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Collect `SOAK_<KEY>` variables for known flat keys (lists split on commas)."""
    environ = os.environ if environ is None else environ
    found: dict[str, Any] = {}
    for key in FLAT_KEYS:
        value = environ.get("SOAK_" + key.upper())
        if value is None or value == "":
            continue
        found[key] = [part.strip() for part in value.split(",") if part.strip()] if key in _LIST_KEYS else value
    return found


def default_warmup_s(duration_s: float) -> float:
    """5 % of the run within [30 s, 60 min], never more than half the run."""
    warmup_s = min(max(duration_s * WARMUP_FRACTION, WARMUP_MIN_S), WARMUP_MAX_S)
    return min(warmup_s, duration_s / 2)


def default_window_s(duration_s: float, warmup_s: float) -> float:
    """(run − warm-up)/48 within [5 s, 30 min]."""
    return min(max((duration_s - warmup_s) / WINDOWS_PER_RUN, WINDOW_MIN_S), WINDOW_MAX_S)


def merge_layers(*layers: dict[str, Any]) -> dict[str, Any]:
    """Merge flat key dicts, later layers winning; keys are normalised and checked."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            name = _normalise_key(key)
            if name not in FLAT_KEYS and name != "config":
                raise ConfigError(f"unknown setting {key!r}")
            if value is not None:
                merged[name] = value
    merged.pop("config", None)
    return merged


def resolve_paths(flat: dict[str, Any]) -> tuple[Path, str]:
    """Output folder and database URL, the same way for every command (DESIGN §6)."""
    out_dir = Path(flat.get("out") or DEFAULT_OUT).expanduser().resolve()
    db_url = flat.get("db") or f"sqlite:///{out_dir / 'soak.db'}"
    return out_dir, db_url


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {"target": {}, "load": {}, "telemetry": {}}
    for key, value in flat.items():
        section, field = FLAT_KEYS[key]
        if key in _LIST_KEYS and isinstance(value, (str, int)):
            value = [value]
        (nested[section] if section else nested)[field] = value
    return nested


def _resolve_spans(nested: dict[str, Any]) -> None:
    if "duration_s" not in nested:
        raise ConfigError("no duration: give --duration, --hours or --minutes")
    for key in ("duration_s", "warmup_s", "window_s"):
        if key in nested:
            nested[key] = parse_duration(nested[key])
    nested.setdefault("warmup_s", default_warmup_s(nested["duration_s"]))
    nested.setdefault("window_s", default_window_s(nested["duration_s"], nested["warmup_s"]))


def resolve_config(flags: dict[str, Any], environ: dict[str, str] | None = None) -> RunConfig:
    """Build the RunConfig from flag values (None = not given), SOAK_* environment and an optional file."""
    config_path = flags.get("config") or (environ or os.environ).get("SOAK_CONFIG")
    file_layer = read_config_file(Path(config_path)) if config_path else {}
    flat = merge_layers(file_layer, read_environment(environ), flags)
    out_dir, db_url = resolve_paths(flat)
    flat["out"], flat["db"] = str(out_dir), db_url
    nested = _nest(flat)
    _resolve_spans(nested)
    nested["config_file"] = Path(config_path).resolve() if config_path else None
    try:
        return RunConfig(**nested)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming the first bad setting and why."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "config"
    return f"invalid setting {where}: {error['msg']}"
