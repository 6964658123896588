"""The typed configuration of a run, resolved once from flags > SOAK_* environment > TOML file > defaults.

Users write flat keys named like the CLI flags (`rate = 5`, `sample-every = "5s"`, `scenario = ["chat_short:3"]`)
plus optional `[[phase]]` tables; the table in `soak.settings` says which field of the nested, unit-explicit
models below each key fills, and `resolve_config` builds them; every stage receives them read-only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from soak.address import ANY_PORT, LOOPBACK, join_host_port, split_host_port
from soak.errors import ConfigError
from soak.locations import Locations
from soak.settings import SETTINGS_BY_FIELD, SETTINGS_BY_KEY, Layers, read_layers
from soak.slo import SloTargets, parse_slo
from soak.units import parse_bytes, parse_duration
from soak.vllm_plugin.spec import parse_faults

WARMUP_FRACTION = 0.05
WARMUP_MIN_S, WARMUP_MAX_S = 30.0, 3600.0
WINDOWS_PER_RUN = 48
# Under --stop-on-fail the default window is six times finer, so the early-stop looks (which need 20 windows)
# begin after about 7 % of the run instead of 42 %; the detectors' FPR and power hold at this count
# (docs/gates.md, "Early stop").
STOP_ON_FAIL_WINDOWS_PER_RUN = 288
WINDOW_MIN_S, WINDOW_MAX_S = 5.0, 1800.0
PROBE_EVERY_MIN_S, PROBE_EVERY_MAX_S = 60.0, 3600.0
PROBE_HOLD_S, PROBE_DRAIN_S = 30.0, 60.0
DRAIN_P99_FACTOR = 3.0  # an idle probe waits at least this many E2E P99s for in-flight requests
DEFAULT_HORIZON_S = 7 * 86400.0  # a week between restarts is the service life the leak gates protect by default
# A storage outage's budget (soak/store/writer.py): at 100 requests/s with --keep-requests the held rows take about
# 4.8 MiB a minute (bench/storage_buffer.py), so 256 MiB outlasts the 30 minutes; the time is the budget that binds.
STORAGE_BUFFER_BYTES = 256 * 2**20
STORAGE_OUTAGE_S = 1800.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def _duration_field(value: Any) -> Any:
    try:
        return None if value is None else parse_duration(value)
    except ConfigError as exc:  # a ValueError lets pydantic say which setting it was
        raise ValueError(str(exc)) from None


def _bytes_field(value: Any) -> Any:
    try:
        return None if value is None else parse_bytes(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


MASTER_PORT = 5557  # Locust's own default for its master
DEFAULT_MASTER_BIND = f"127.0.0.1:{MASTER_PORT}"


def split_address(text: str, default_port: int) -> tuple[str, int]:
    """`HOST[:PORT]` as (host, port); ValueError saying what is wrong otherwise."""
    host, sep, port = str(text).strip().rpartition(":")
    if not sep:
        host, port = port, str(default_port)
    if not host or any(c.isspace() or c in "/[]" for c in host):
        raise ValueError(f"address {text!r} is not HOST[:PORT]")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address {text!r}: the port must be a number from 1 to 65535")
    return host, int(port)


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


LORA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/:]{0,127}$")


class LoraAdapter(_Model):
    """A LoRA adapter soak loads, unloads and sends requests to: the name requests use and its path on the server's
    host (read by the server, never by soak)."""

    name: str
    path: str

    @classmethod
    def parse(cls, text: str) -> LoraAdapter:
        """`sql=/models/sql-lora` as (name, path); ValueError saying what is wrong otherwise."""
        name, sep, path = str(text).partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ValueError(f"lora {text!r} is not NAME=PATH (an adapter's name and its path on the server)")
        if not LORA_NAME.match(name):
            raise ValueError(f"lora name {name!r} must be letters, digits, '_', '-', '.', '/' or ':' (at most 128)")
        return cls(name=name, path=path)


LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,63}$")
LABEL_VALUE_MAX = 200


def parse_label(text: str) -> tuple[str, str]:
    """`release=1.4.2` as (key, value); ValueError saying what is wrong otherwise."""
    key, sep, value = str(text).partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not value:
        raise ValueError(f"label {text!r} is not KEY=VALUE")
    if not LABEL_KEY.match(key):
        raise ValueError(f"label key {key!r} must be letters, digits, '_', '-', '.' or '/' (at most 64)")
    if len(value) > LABEL_VALUE_MAX or not value.isprintable():
        raise ValueError(f"label {key}: the value must be printable and at most {LABEL_VALUE_MAX} characters")
    return key, value


def parse_labels(items: Any) -> dict[str, str]:
    """KEY=VALUE strings (or a TOML table) as one dict; a key given twice with two values is an error."""
    labels: dict[str, str] = {}
    for item in [items] if isinstance(items, (str, dict)) else list(items or ()):
        pairs = [parse_label(f"{k}={v}") for k, v in item.items()] if isinstance(item, dict) else [parse_label(item)]
        for key, value in pairs:
            if labels.get(key, value) != value:
                raise ValueError(f"label {key} is given twice ({labels[key]!r} and {value!r})")
            labels[key] = value
    return labels


WEB_ON, WEB_OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def web_address(value: Any) -> str | None:
    """The live view's address as HOST:PORT (docs/report.md, "Live view"): on (`--web` alone, true, 1) is
    127.0.0.1 at a free port, off (false, 0) is None, anything else is an address."""
    text = str(value).strip().lower() if not isinstance(value, bool) else ("on" if value else "off")
    if value is None or text in WEB_OFF:
        return None
    if text in WEB_ON:
        return join_host_port(LOOPBACK, ANY_PORT)
    return join_host_port(*split_host_port(str(value)))


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

    @classmethod
    def fields_from_text(cls, text: str) -> dict[str, str]:
        """The fields of `ramp to_rate_rps=8 duration_s=30m`, the --phase form of a [[phase]] table."""
        if not text.split():
            raise ValueError("a phase needs a kind: steady, ramp, wave or burst")
        kind, *pairs = text.split()
        fields = {"kind": kind}
        for pair in pairs:
            name, sep, value = pair.partition("=")
            if not sep or not value:
                raise ValueError(f"phase {text!r}: {pair!r} is not FIELD=VALUE")
            fields[name.replace("-", "_")] = value
        return fields


K8S_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS label: what a namespace is
K8S_PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?$")  # a container port's name (IANA_SVC_NAME)
REPLICA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def target_url(url: str) -> str:
    """A server's base URL as soak keeps it: http(s), no trailing slash, no /v1; ValueError naming it otherwise."""
    if not url.startswith(("http://", "https://")) or len(url) <= len("https://"):
        raise ValueError(f"target URL {url!r} must start with http:// or https://")
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class ReplicaSpec(_Model):
    """One replica of a fleet (`--target [NAME=]URL [WEIGHT]`): its name, base URL and share of the arrivals.
    An unnamed one is `replica-N` by its place on the command line (then the targets file)."""

    name: str | None = None
    url: str
    weight: float = Field(default=1.0, gt=0)
    gpus: tuple[str, ...] = ()  # its GPUs' UUIDs on a dcgm-exporter page (`--replica NAME=URL,GPU_UUID…`)

    @field_validator("url")
    @classmethod
    def _normal_url(cls, url: str) -> str:
        return target_url(url)

    @classmethod
    def parse_with_gpus(cls, text: str) -> ReplicaSpec:
        """`gpu-0=http://h:8000,GPU-3f2a…,GPU-0b11… [WEIGHT]`: a named replica and the UUIDs of its GPUs;
        ValueError saying what is wrong."""
        head, _, weight = str(text).strip().partition(" ")
        target, *gpus = head.split(",")
        spec = cls.parse(f"{target} {weight}".strip())
        gpus = [gpu.strip() for gpu in gpus if gpu.strip()]
        if spec.name is None or not gpus:
            raise ValueError(f"replica {text!r} is not NAME=URL,GPU_UUID[,GPU_UUID…] [WEIGHT]")
        return spec.model_copy(update={"gpus": tuple(gpus)})

    @classmethod
    def parse(cls, text: str) -> ReplicaSpec:
        """`gpu-0=http://h:8000 2`, `http://h:8000` or `http://h:8000 0.5`; ValueError saying what is wrong."""
        parts = str(text).split()
        if not parts or len(parts) > 2:
            raise ValueError(f"target {text!r} is not [NAME=]URL [WEIGHT]")
        head, _, url = parts[0].partition("=") if "=" in parts[0].split("://")[0] else ("", "", parts[0])
        if head and not REPLICA_NAME.match(head):
            raise ValueError(f"replica name {head!r} must be letters, digits, '_', '-' or '.' (at most 64)")
        url = target_url(url)  # the URL's error first: "bad name=URL" is a bad URL, not a bad weight
        weight = parts[1] if len(parts) == 2 else "1"
        try:
            weight_value = float(weight)
        except ValueError:
            weight_value = -1.0
        if not weight_value > 0 or weight_value == float("inf"):
            raise ValueError(f"target {text!r}: the weight {weight!r} must be a positive number")
        return cls(name=head or None, url=url, weight=weight_value)


def target_urls(value: Any) -> list[str]:
    """The base URLs of a `--target` setting (one spec, or several from the flag, SOAK_TARGET or the file)."""
    specs = [value] if isinstance(value, str) else list(value or ())
    try:
        return [ReplicaSpec.parse(spec).url for spec in specs]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def parse_targets_file(path: Path) -> list[ReplicaSpec]:
    """The replicas of a targets file, one `[NAME=]URL [WEIGHT]` a line, `#` comments; ConfigError naming the line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read the targets file {path}: {exc.strerror or exc}") from None
    replicas = []
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            replicas.append(ReplicaSpec.parse(text))
        except ValueError as exc:
            raise ConfigError(f"targets file {path} line {number}: {exc}") from None
    if not replicas:
        raise ConfigError(f"targets file {path} names no target")
    return replicas


ROUTER_NAME = "router"  # the run of a fleet's --router, beside its replicas' runs


def name_replicas(replicas: list[ReplicaSpec]) -> tuple[ReplicaSpec, ...]:
    """Every replica named (`replica-N` for the unnamed N-th), or a ConfigError for a name or URL given twice."""
    named = tuple(r if r.name else r.model_copy(update={"name": f"replica-{n}"}) for n, r in enumerate(replicas, 1))
    for attribute in ("name", "url"):
        values = [getattr(r, attribute) for r in named]
        twice = next((value for value in values if values.count(value) > 1), None)
        if twice is not None:
            raise ConfigError(f"two targets have the same {attribute} {twice!r}: each replica needs its own")
    return named


class TargetSettings(_Model):
    """Which server to test and how to start it."""

    url: str | None = None  # the one server of a plain run: the only --target, or a fleet's replica
    replicas: tuple[ReplicaSpec, ...] = ()  # every --target as given (a fleet's own run: every replica, resolved)
    replica_gpus: tuple[ReplicaSpec, ...] = ()  # every --replica NAME=URL,GPU_UUID… as given
    gpus: tuple[str, ...] = ()  # a fleet replica's run: its GPUs' UUIDs on dcgm-exporter pages (none: by pod label)
    targets_file: Path | None = None  # more replicas, read when the run starts (soak/run/fleet.py)
    router: str | None = None  # with replicas: the load goes here, the replicas are only observed
    model: str | None = None
    served_model: str | None = None
    vllm_bin: str | None = None
    serve_args: tuple[str, ...] = ()
    reference_faults: tuple[str, ...] = ()
    vllm_faults: tuple[str, ...] = ()  # planted in the vLLM soak starts, by soak's vLLM plugin (soak/vllm_plugin)
    reference_args: tuple[str, ...] = ()
    time_scale: float = Field(default=1.0, gt=0)
    reference_seed: int = 0
    device: Literal["cpu", "cuda"] = "cpu"
    server_pids: tuple[int, ...] = ()
    metrics_urls: tuple[str, ...] = ()
    server_kind: Literal["vllm", "vllm-v0", "sglang", "tgi", "llamacpp", "trtllm"] | None = None
    restart: Literal["never", "on-crash"] = "never"
    max_restarts: int = Field(default=3, ge=0)
    startup_timeout_s: float = Field(default=900.0, gt=0)
    api_key_env: str | None = None
    server_log: Path | None = None
    k8s_selector: str | None = None  # the fleet's replicas are the pods this selects (soak/target/k8s.py)
    k8s_namespace: str | None = None  # None: the pod's own, the kubeconfig context's or "default", found with them
    k8s_port: str | None = None  # a container port's name or number; None: the one named http, else the first
    k8s_pods: tuple[str, ...] = ()  # every pod of the fleet as found (set by the fleet, never by a user)

    _durations = field_validator("startup_timeout_s", mode="before")(_duration_field)

    @field_validator("k8s_selector")
    @classmethod
    def _check_selector(cls, selector: str | None) -> str | None:
        if selector is not None and not selector.strip():
            raise ValueError("the label selector is empty (e.g. app=vllm)")
        return None if selector is None else selector.strip()

    @field_validator("k8s_namespace")
    @classmethod
    def _check_namespace(cls, namespace: str | None) -> str | None:
        if namespace is not None and not K8S_LABEL.match(namespace):
            raise ValueError("a namespace is lower-case letters, digits and '-' (at most 63)")
        return namespace

    @field_validator("k8s_port", mode="before")
    @classmethod
    def _check_port(cls, port: Any) -> Any:
        text = None if port is None else str(port).strip()
        if text is None or (text.isdigit() and 0 < int(text) < 65536) or K8S_PORT_NAME.match(text):
            return text
        raise ValueError("a container port is a number from 1 to 65535 or a port name (at most 15 lower-case "
                         "letters, digits and '-')")

    @field_validator("url", "router")
    @classmethod
    def _strip_v1(cls, url: str | None) -> str | None:
        return None if url is None else target_url(url)

    @field_validator("replicas", mode="before")
    @classmethod
    def _parse_replicas(cls, value: Any) -> Any:
        items = [value] if isinstance(value, (str, dict)) else list(value or ())
        return tuple(ReplicaSpec.parse(v) if isinstance(v, str) else v for v in items)

    @field_validator("replica_gpus", mode="before")
    @classmethod
    def _parse_replica_gpus(cls, value: Any) -> Any:
        items = [value] if isinstance(value, (str, dict)) else list(value or ())
        return tuple(ReplicaSpec.parse_with_gpus(v) if isinstance(v, str) else v for v in items)

    @model_validator(mode="after")
    def _one_or_a_fleet(self) -> TargetSettings:
        """One unnamed --target is the plain run's URL; more (or a targets file) make a fleet, which soak cannot
        combine with starting a server itself; --k8s-selector finds the replicas itself."""
        self._check_k8s()
        if self.is_fleet and (self.model or self.url):
            what = "--model" if self.model else "a single target URL"
            raise ValueError(f"several targets (a fleet) cannot be combined with {what}")
        try:
            name_replicas(list(self.all_replicas))
        except ConfigError as exc:  # a ValueError lets pydantic say which setting it was
            raise ValueError(str(exc)) from None
        if len(self.all_replicas) == 1 and not self.targets_file and not self.router and self.url is None:
            object.__setattr__(self, "url", self.all_replicas[0].url)  # frozen: set once, while validating
        return self

    def _check_k8s(self) -> None:
        """--k8s-selector alone names the replicas (until they are found, `k8s_pods`)."""
        if self.k8s_selector is None:
            return
        clashes = ((self.replicas, "--target"), (self.replica_gpus, "--replica"), (self.targets_file, "--targets-file"),
                   (self.router, "--router"), (self.model, "--model"))
        given = next((flag for value, flag in clashes if value), None)
        if given and not self.k8s_pods:
            raise ValueError(f"--k8s-selector finds the fleet's replicas itself; it cannot be combined with {given}")

    @property
    def all_replicas(self) -> tuple[ReplicaSpec, ...]:
        """Every --target, then every --replica (the targets file is read when the run starts)."""
        return self.replicas + self.replica_gpus

    def members(self) -> tuple[ReplicaSpec, ...]:
        """The runs of a fleet whose replicas are resolved: the router first (named `router`) when there is one,
        then every replica."""
        router = (ReplicaSpec(name=ROUTER_NAME, url=self.router),) if self.router else ()
        return router + self.replicas

    @property
    def is_fleet(self) -> bool:
        """Several targets, a targets file, a router and its replicas, or --k8s-selector: one run per replica under
        one fleet run (soak/run/fleet.py); a replica's own run has its URL."""
        return (len(self.all_replicas) > 1 or self.targets_file is not None or self.router is not None
                or (self.k8s_selector is not None and self.url is None))

    @field_validator("vllm_faults")
    @classmethod
    def _check_vllm_faults(cls, faults: tuple[str, ...]) -> tuple[str, ...]:
        try:
            parse_faults(faults)
        except ConfigError as exc:  # a ValueError lets pydantic say which setting it was
            raise ValueError(str(exc)) from None
        return faults

    @property
    def kind(self) -> Literal["reference", "vllm", "external"]:
        """reference when nothing is named, vllm with --model, external with --target (every replica of a fleet)."""
        if self.url or self.is_fleet:
            return "external"
        return "vllm" if self.model else "reference"


class LoadSettings(_Model):
    """The traffic: arrivals, mix, phases and idle probes."""

    rate_rps: float = Field(default=2.0, gt=0)
    burstiness: float | None = Field(default=None, gt=0)
    max_concurrency: int | None = Field(default=None, gt=0)
    scenarios: tuple[ScenarioSpec, ...] = (ScenarioSpec(name="mixed"),)
    skip_unsupported: bool = False  # drop a scenario the server refuses (soak/target/capabilities.py), not stop
    phases: tuple[PhaseSpec, ...] = ()
    idle_probe_every_s: float | None = None
    idle_probe_for_s: float | None = None
    drain_timeout_s: float | None = None
    no_idle_probes: bool = False
    seed: int = 0
    dataset: Path | None = None
    trace: Path | None = None  # replay this request trace (soak/load/trace.py) instead of planned arrivals
    trace_format: Literal["mooncake", "azure", "burstgpt"] | None = None  # None: detected from the file
    trace_speed: float = Field(default=1.0, gt=0)
    workers: int = Field(default=0, ge=0)
    expect_workers: int = Field(default=0, ge=0)  # `soak worker` processes, usually on other hosts
    master_bind: str = DEFAULT_MASTER_BIND
    worker_wait_s: float = Field(default=300.0, gt=0)
    max_context: int | None = Field(default=None, ge=128)
    request_timeout_s: float = Field(default=300.0, gt=0)
    canary_every_s: float = Field(default=600.0, ge=0)  # 0: no canary
    loras: tuple[LoraAdapter, ...] = ()  # --lora NAME=PATH: adapters loaded at start (soak/load/lora.py)
    lora_churn_every_s: float | None = Field(default=None, ge=0)  # unload and reload one adapter this often
    lora_zipf: float = Field(default=1.0, ge=0)  # the lora scenario's spread: weight of rank r is 1/r^s; 0 = even

    _durations = field_validator(
        "idle_probe_every_s", "idle_probe_for_s", "drain_timeout_s", "request_timeout_s", "canary_every_s",
        "worker_wait_s", mode="before"
    )(_duration_field)

    _lora_every = field_validator("lora_churn_every_s", mode="before")(_duration_field)

    @field_validator("loras", mode="before")
    @classmethod
    def _parse_loras(cls, value: Any) -> Any:
        items = [value] if isinstance(value, (str, dict)) else list(value or ())
        adapters = tuple(LoraAdapter.parse(v) if isinstance(v, str) else v for v in items)
        names = [a.name if isinstance(a, LoraAdapter) else a.get("name") for a in adapters]
        twice = next((name for name in names if names.count(name) > 1), None)
        if twice is not None:
            raise ValueError(f"lora adapter {twice!r} is given twice")
        return adapters

    @field_validator("master_bind")
    @classmethod
    def _check_master_bind(cls, value: str) -> str:
        split_address(value, MASTER_PORT)  # a bad address fails here, naming the setting
        return value

    @model_validator(mode="after")
    def _check_trace(self) -> LoadSettings:
        """A trace sets the arrivals and the requests itself: what else would shape them is refused."""
        if self.trace is None:
            return self
        clashes = [(self.phases, "--phase"), (self.burstiness is not None, "--burstiness"),
                   (self.dataset is not None, "--dataset"), (self.scenarios != (ScenarioSpec(name="mixed"),), "--scenario"),
                   ("rate_rps" in self.model_fields_set, "--rate (scale the trace's time with --trace-speed)")]
        clash = next((name for given, name in clashes if given), None)
        if clash:
            raise ValueError(f"--trace replays the trace's own arrivals and requests; it cannot be combined with "
                             f"{clash}")
        return self

    @property
    def worker_count(self) -> int:
        """Every load worker of the run: the local processes and the `soak worker`s expected to join."""
        return self.workers + self.expect_workers

    @field_validator("scenarios", mode="before")
    @classmethod
    def _parse_scenarios(cls, value: Any) -> Any:
        items = [value] if isinstance(value, str) else list(value)
        return tuple(ScenarioSpec.parse(v) if isinstance(v, str) else v for v in items)

    @field_validator("phases", mode="before")
    @classmethod
    def _parse_phases(cls, value: Any) -> Any:
        items = [value] if isinstance(value, (str, dict)) else list(value)
        return tuple(PhaseSpec.fields_from_text(v) if isinstance(v, str) else v for v in items)


class TelemetrySettings(_Model):
    """How often to sample, and what extra to scrape."""

    sample_every_s: float = Field(default=5.0, gt=0)
    flush_every_s: float = Field(default=5.0, gt=0, le=5.0)

    _durations = field_validator("sample_every_s", "flush_every_s", mode="before")(_duration_field)


FORENSICS_MODES = ("auto", "off", "always")
FORENSICS_FOR_DEFAULT_S = 600.0


class ForensicsSettings(_Model):
    """Leak forensics (docs/forensics.md): when a tracker is attached to a growing server process, for how
    long, and to which processes."""

    mode: Literal["auto", "off", "always"] = "auto"  # auto: when leak.rss is SUSPECT or FAIL; always: every run
    for_s: float = Field(default=FORENSICS_FOR_DEFAULT_S, gt=0)
    process: str = "engine"  # engine | api | all | a PID

    _durations = field_validator("for_s", mode="before")(_duration_field)

    @field_validator("process")
    @classmethod
    def _check_process(cls, value: str) -> str:
        value = str(value).strip().lower()
        if value in ("engine", "api", "all") or (value.isdigit() and int(value) > 0):
            return value
        raise ValueError("must be engine, api, all or a PID")


OTLP_EVERY_DEFAULT_S = 15.0


def metrics_address(value: Any) -> str | None:
    """`--metrics-bind` as HOST:PORT (no host: loopback; port 0: a free one, printed at start), or None for off."""
    if value is None or str(value).strip().lower() in WEB_OFF:
        return None
    return join_host_port(*split_host_port(str(value)))


def otlp_url(value: Any) -> str | None:
    """`--otlp-endpoint` as given, once it is an http(s) URL with a host."""
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{text!r} is not an http(s) URL of an OTLP/HTTP receiver, e.g. http://collector:4318")
    return text


class MetricsSettings(_Model):
    """The run's series for a team's own monitoring (docs/observability.md): a Prometheus page, an OTLP push."""

    bind: str | None = None  # HOST:PORT of the live /metrics page, None = off
    otlp_endpoint: str | None = None  # OTLP/HTTP receiver (…/v1/metrics, or a base URL), None = off
    otlp_every_s: float = Field(default=OTLP_EVERY_DEFAULT_S, gt=0)

    _durations = field_validator("otlp_every_s", mode="before")(_duration_field)
    _bind = field_validator("bind", mode="before")(metrics_address)
    _otlp = field_validator("otlp_endpoint", mode="before")(otlp_url)

    @property
    def enabled(self) -> bool:
        """Whether anything exports the run's series (and the early-stop looks must run to feed the verdicts)."""
        return self.bind is not None or self.otlp_endpoint is not None


class RunConfig(_Model):
    """Everything one run needs, in internal units; built by `resolve_config`."""

    duration_s: float = Field(gt=0)
    warmup_s: float = Field(ge=0)
    window_s: float = Field(gt=0)
    horizon_s: float = Field(default=DEFAULT_HORIZON_S, gt=0)
    out_dir: Path
    db_url: str
    gates_file: Path | None = None
    baseline: str | None = None
    json_output: bool = False
    keep_requests: bool = False
    notify_env: str | None = None
    stop_on_fail: bool = False  # end the run once a FAIL is beyond doubt (soak/analysis/early_stop.py)
    labels: dict[str, str] = {}  # KEY=VALUE tags stored with the run (docs/history.md)
    web: str | None = None  # HOST:PORT of the live view (soak.web), None = off
    slo: SloTargets | None = None  # per-request targets that goodput counts against (soak/slo.py), None = no SLO
    config_file: Path | None = None
    fleet_id: str | None = None  # the fleet run this replica's run belongs to (soak/run/fleet.py), else None
    replica: str | None = None  # this run's replica name within that fleet
    observe_only: bool = False  # a replica behind a --router: sampled and judged on server evidence, sent no load
    storage_buffer_bytes: int = Field(default=STORAGE_BUFFER_BYTES, gt=0)  # what a storage outage may hold…
    storage_outage_s: float = Field(default=STORAGE_OUTAGE_S, gt=0)  # …and for how long, before the run stops
    target: TargetSettings = TargetSettings()
    load: LoadSettings = LoadSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    forensics: ForensicsSettings = ForensicsSettings()
    metrics: MetricsSettings = MetricsSettings()

    _durations = field_validator("horizon_s", "storage_outage_s", mode="before")(_duration_field)
    _bytes = field_validator("storage_buffer_bytes", mode="before")(_bytes_field)

    @field_validator("web", mode="before")
    @classmethod
    def _parse_web(cls, value: Any) -> Any:
        return web_address(value)

    @field_validator("labels", mode="before")
    @classmethod
    def _parse_labels(cls, value: Any) -> Any:
        return parse_labels(value)

    @field_validator("slo", mode="before")
    @classmethod
    def _parse_slo(cls, value: Any) -> Any:
        return parse_slo(value)

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
        """Longest wait for in-flight requests to finish at a probe before any latency is known (see
        `drain_timeout_for`): --drain-timeout, else 60 s (for short runs the window, at least 10 s)."""
        if self.load.drain_timeout_s is not None:
            return self.load.drain_timeout_s
        return min(PROBE_DRAIN_S, max(self.window_s, 10.0))

    def drain_timeout_for(self, e2e_p99_s: float | None) -> float:
        """The drain timeout given the E2E P99 observed so far: --drain-timeout when given, else the larger of
        `probe_drain_timeout_s` and 3 × that P99, so requests still streaming normally are never cut short."""
        if self.load.drain_timeout_s is not None:
            return self.load.drain_timeout_s
        return max(self.probe_drain_timeout_s, DRAIN_P99_FACTOR * (e2e_p99_s or 0.0))


def default_warmup_s(duration_s: float) -> float:
    """5% of the run within [30 s, 60 min], never more than half the run."""
    warmup_s = min(max(duration_s * WARMUP_FRACTION, WARMUP_MIN_S), WARMUP_MAX_S)
    return min(warmup_s, duration_s / 2)


def default_window_s(duration_s: float, warmup_s: float, windows_per_run: int = WINDOWS_PER_RUN) -> float:
    """(run − warm-up)/48 (or /`windows_per_run`) within [5 s, 30 min]."""
    return min(max((duration_s - warmup_s) / windows_per_run, WINDOW_MIN_S), WINDOW_MAX_S)


def _stop_on_fail(layers: Layers) -> bool:
    """Whether --stop-on-fail is on in any layer (a flag, `SOAK_STOP_ON_FAIL=true`, `stop-on-fail = true`)."""
    value = layers.value("stop_on_fail")
    return value is True or str(value).strip().lower() in ("1", "true", "yes", "on", "y", "t")


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """Flat keys onto the nested fields the table names."""
    nested: dict[str, Any] = {"target": {}, "load": {}, "telemetry": {}, "forensics": {}, "metrics": {}}
    for key, value in flat.items():
        setting = SETTINGS_BY_KEY[key]
        if setting.multiple and isinstance(value, (str, int, dict)):
            value = [value]
        section, _, field = setting.field.rpartition(".")
        (nested[section] if section else nested)[field] = value
    return nested


def _span_s(key: str, layers: Layers) -> float | None:
    value = layers.value(key)
    try:
        return None if value is None else parse_duration(value)
    except ConfigError as exc:
        raise ConfigError(f"invalid setting {key} ({layers.origin(key)}): {exc}") from None


def _resolve_spans(nested: dict[str, Any], layers: Layers) -> None:
    """Run length, warm-up and window in seconds, the latter two defaulting from the run length."""
    duration_s = _span_s("duration", layers)
    if duration_s is None:
        raise ConfigError("no duration: give --duration, --hours or --minutes (or duration in the config file)")
    warmup_s = _span_s("warmup", layers)
    warmup_s = default_warmup_s(duration_s) if warmup_s is None else warmup_s
    window_s = _span_s("window", layers)
    nested["duration_s"], nested["warmup_s"] = duration_s, warmup_s
    if window_s is None:
        per_run = STOP_ON_FAIL_WINDOWS_PER_RUN if _stop_on_fail(layers) else WINDOWS_PER_RUN
        window_s = default_window_s(duration_s, warmup_s, per_run)
    nested["window_s"] = window_s


def resolve_config(flags: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> RunConfig:
    """Build the RunConfig from flag values (None = not given; `config` names a file) and the SOAK_* environment."""
    layers = read_layers(flags, environ)
    locations = Locations.from_layers(layers)
    flat = layers.merged()
    flat["out"], flat["db"] = str(locations.out_dir), locations.db_url
    if "reference_seed" not in flat and "seed" in flat:  # one seed drives the prompts and the reference server
        flat["reference_seed"] = flat["seed"]
    nested = _nest(flat)
    _resolve_spans(nested, layers)
    nested["config_file"] = locations.config_file
    try:
        return RunConfig(**nested)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, layers)) from None


def describe_validation_error(exc: ValidationError, layers: Layers | None = None) -> str:
    """One line naming the first bad setting, where its value came from, and why."""
    error = exc.errors()[0]
    message = str(error["msg"]).removeprefix("Value error, ")
    loc = [str(part) for part in error["loc"]]
    depth = next((n for n in range(len(loc), 0, -1) if ".".join(loc[:n]) in SETTINGS_BY_FIELD), 0)
    if not depth:
        return f"invalid {'.'.join(loc) or 'configuration'}: {message}"
    setting = SETTINGS_BY_FIELD[".".join(loc[:depth])]
    name = setting.toml_key + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc[depth:])
    origin = layers.origin(setting.key) if layers else setting.flag
    given = repr(error["input"])
    given = given if len(given) <= 60 else given[:57] + "..."
    return f"invalid setting {name} ({origin}): {message} (got {given})"
