"""The one table of user settings, and reading them from flags, `SOAK_*` variables and a TOML file.

Each row names a setting once: its key `sample_every` gives the `soak start` flag `--sample-every`, the variable
`SOAK_SAMPLE_EVERY` and the TOML key `sample-every` (or `sample_every`), and says which RunConfig field it fills.
The CLI builds its options from this table; `read_layers` reads the three sources, highest first.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from soak.errors import ConfigError

CONFIG_ENV = "SOAK_CONFIG"
# The dialects of soak/telemetry/dialects.py (DIALECTS), which --server-kind may name.
SERVER_KINDS = ("vllm", "vllm-v0", "sglang", "tgi", "llamacpp", "trtllm")
Kind = Literal["text", "int", "float", "duration", "file", "folder", "choice", "flag"]

LENGTH, TARGET, REFERENCE, LOAD, PROBES, FORENSICS, OUTPUT, METRICS, LOCATIONS = (
    "Run length and analysis", "Server under test", "Reference server", "Load", "Idle probes and telemetry",
    "Leak forensics", "Verdict and output", "Metrics for Prometheus and OpenTelemetry", "Where runs are stored")


@dataclass(frozen=True)
class Setting:
    """One user setting: flag, environment variable and TOML key, and the RunConfig field it fills."""

    key: str  # snake_case; the flag and TOML key use dashes
    field: str  # dotted path in RunConfig, e.g. "load.rate_rps"
    help: str
    section: str
    kind: Kind = "text"
    metavar: str | None = None
    multiple: bool = False  # repeatable flag, a TOML list, a variable of values split on `separator`
    separator: str = ","  # `;` where a value holds commas itself (--replica)
    choices: tuple[str, ...] = ()
    flag_value: str | None = None  # the value of the flag given alone (its value is optional: `--web`)

    @property
    def flag(self) -> str:
        """The `soak start` option, e.g. `--sample-every`."""
        return "--" + self.key.replace("_", "-")

    @property
    def env(self) -> str:
        """The environment variable, e.g. `SOAK_SAMPLE_EVERY`."""
        return "SOAK_" + self.key.upper()

    @property
    def toml_key(self) -> str:
        """The key as the docs spell it in a config file (the underscore form works too)."""
        return self.key.replace("_", "-")


def _s(key: str, field: str, section: str, help: str, **kwargs: Any) -> Setting:
    return Setting(key=key, field=field, section=section, help=help, **kwargs)


# The order here is the order of `soak start --help`.
SETTINGS: tuple[Setting, ...] = (
    _s("duration", "duration_s", LENGTH, "Run length (90s, 5m, 24h, 1h30m); includes warm-up and probes.",
       kind="duration", metavar="D"),
    _s("warmup", "warmup_s", LENGTH, "Warm-up excluded from verdicts (default 5% of the run, 30s–60m).",
       kind="duration", metavar="D"),
    _s("window", "window_s", LENGTH, "Analysis window (default (run − warm-up)/48, 5s–30m).", kind="duration",
       metavar="D"),
    _s("horizon", "horizon_s", LENGTH, "Service horizon the leak gates protect: a leak may not exhaust the "
       "headroom within it (default 7d).", kind="duration", metavar="D"),
    _s("target", "target.replicas", TARGET, "Base URL of a running OpenAI-compatible server (no /v1). Repeat it "
       "for a fleet, one run per replica: NAME=URL names one, a weight after a space sets its share of the arrivals "
       "(default equal; docs/load.md, \"Fleets\").", metavar="[NAME=]URL", multiple=True),
    _s("replica", "target.replica_gpus", TARGET, "A fleet replica and its GPUs: NAME=URL,GPU_UUID[,GPU_UUID…] "
       "[WEIGHT] (repeatable, with or instead of --target): its run reads only those GPUs of a dcgm-exporter "
       "--metrics-url page (without it, the GPUs whose `pod` label is the replica's name). SOAK_REPLICA separates "
       "replicas with `;`.", metavar="NAME=URL,GPU_UUID…", multiple=True, separator=";"),
    _s("router", "target.router", TARGET, "Base URL of a router in front of the --target replicas: all load goes "
       "to it (its run judges latency and errors) and each replica is only observed — memory, open files, KV, "
       "crashes, its log (docs/load.md, \"Fleets\").", metavar="URL"),
    _s("targets_file", "target.targets_file", TARGET, "File of fleet replicas, one `[NAME=]URL [WEIGHT]` a line, "
       "`#` comments (with or instead of --target).", kind="file", metavar="FILE"),
    _s("k8s_selector", "target.k8s_selector", TARGET, "Find the fleet's replicas in Kubernetes: the running, ready "
       "pods this label selector matches (e.g. app=vllm), one run each, followed through restarts and replacement "
       "(needs soak[k8s]; docs/load.md, \"Kubernetes\").", metavar="SELECTOR"),
    _s("k8s_namespace", "target.k8s_namespace", TARGET, "Namespace of the --k8s-selector pods (default: the pod's "
       "own namespace in a cluster, else the kubeconfig context's, else default).", metavar="NS"),
    _s("k8s_port", "target.k8s_port", TARGET, "Container port of the OpenAI server in each --k8s-selector pod, by "
       "name or number (default: the port named http, else the first declared).", metavar="NAME|N"),
    _s("model", "target.model", TARGET,
       "Start embedded vLLM serving NAME (needs vLLM: beside soak's Python, on PATH, or --vllm-bin); "
       "`tiny`: a tiny model soak builds itself.", metavar="NAME"),
    _s("served_model", "target.served_model", TARGET, "Model name to send (default: the only one listed).",
       metavar="NAME"),
    _s("vllm_bin", "target.vllm_bin", TARGET, "The vllm executable to run (default: from PATH).", metavar="PATH"),
    _s("serve_arg", "target.serve_args", TARGET, "Extra argument for `vllm serve` (repeatable).", metavar="ARG",
       multiple=True),
    _s("vllm_fault", "target.vllm_faults", TARGET, "Plant a fault inside the vLLM soak starts: rss-leak=BYTES, "
       "kv-leak-on-abort[=N], hang-after=D, garble-after=D (repeatable; docs/vllm.md).", metavar="NAME[=VALUE]",
       multiple=True),
    _s("server_pid", "target.server_pids", TARGET, "Server process to sample (repeatable; default: the "
       "process listening on a local --target's port).", kind="int",
       metavar="PID", multiple=True),
    _s("metrics_url", "target.metrics_urls", TARGET, "Extra Prometheus endpoint to scrape (repeatable); a "
       "dcgm-exporter's is read for GPU health (docs/gates.md, gpu.xid).",
       metavar="URL", multiple=True),
    _s("server_kind", "target.server_kind", TARGET, "Read the server's /metrics under this server's names instead "
       "of detecting them (docs/servers.md).", kind="choice", choices=SERVER_KINDS),
    _s("restart", "target.restart", TARGET, "Restart policy for a managed server (default never).", kind="choice",
       choices=("never", "on-crash")),
    _s("max_restarts", "target.max_restarts", TARGET, "Most restarts under --restart on-crash (default 3).",
       kind="int", metavar="N"),
    _s("startup_timeout", "target.startup_timeout_s", TARGET, "Longest wait for a managed server to be ready "
       "(default 15m).", kind="duration", metavar="D"),
    _s("api_key_env", "target.api_key_env", TARGET, "Environment variable holding the API key (never stored).",
       metavar="VAR"),
    _s("server_log", "target.server_log", TARGET, "Log file of a server soak did not start, scanned for fatal "
       "lines from the run's start (as tail -F); a managed server's own log is scanned without it.", kind="file",
       metavar="FILE"),
    _s("reference_fault", "target.reference_faults", REFERENCE, "Plant a fault in the reference server "
       "(repeatable; see docs/refserver.md).", metavar="NAME[=VALUE]", multiple=True),
    _s("reference_arg", "target.reference_args", REFERENCE, "Extra argument for the reference server "
       "(repeatable; see `soak refserver --help`).", metavar="ARG", multiple=True),
    _s("reference_seed", "target.reference_seed", REFERENCE, "Seed of the reference server (default: --seed).",
       kind="int", metavar="N"),
    _s("time_scale", "target.time_scale", REFERENCE, "Reference server model-time compression (default 1).",
       kind="float", metavar="X"),
    _s("device", "target.device", REFERENCE, "Reference server device (default cpu).", kind="choice",
       choices=("cpu", "cuda")),
    _s("rate", "load.rate_rps", LOAD, "Target request rate (open-loop arrivals; default 2).", kind="float",
       metavar="RPS"),
    _s("burstiness", "load.burstiness", LOAD, "Gamma arrivals with this burstiness (default Poisson).",
       kind="float", metavar="X"),
    _s("max_concurrency", "load.max_concurrency", LOAD, "Cap on requests in flight (queue time recorded).",
       kind="int", metavar="N"),
    _s("scenario", "load.scenarios", LOAD, "Scenario and weight (repeatable; default mixed).",
       metavar="NAME[:W]|PATH", multiple=True),
    _s("phase", "load.phases", LOAD, 'Load phase "KIND FIELD=VALUE…", e.g. "ramp to_rate_rps=8 duration_s=30m" '
       "(repeatable; [[phase]] tables in TOML; see docs/load.md).", metavar="SPEC", multiple=True),
    _s("skip_unsupported", "load.skip_unsupported", LOAD, "Drop from the mix a scenario the server refuses (asked "
       "before the load starts), instead of stopping (docs/load.md, Capabilities).", kind="flag"),
    _s("dataset", "load.dataset", LOAD, "ShareGPT JSON/JSONL prompts.", kind="file", metavar="FILE"),
    _s("trace", "load.trace", LOAD, "Replay a request trace's arrival times and token counts (Mooncake JSONL, "
       "Azure LLM inference CSV or BurstGPT CSV; docs/load.md, Trace replay).", kind="file", metavar="FILE"),
    _s("trace_format", "load.trace_format", LOAD, "The --trace file's format (default: detected from it).",
       kind="choice", choices=("mooncake", "azure", "burstgpt")),
    _s("trace_speed", "load.trace_speed", LOAD, "Replay the trace this many times faster (2 = twice as fast; "
       "default 1); it loops to fill the run.", kind="float", metavar="X"),
    _s("lora", "load.loras", LOAD, "A LoRA adapter to load at start and send the lora scenario to, NAME=PATH (its "
       "path on the server's host; repeatable; docs/load.md, LoRA adapters).", metavar="NAME=PATH", multiple=True),
    _s("lora_churn_every", "load.lora_churn_every_s", LOAD, "Unload and reload one --lora adapter this often, in turn "
       "(default: never; each load and unload is an event).", kind="duration", metavar="D"),
    _s("lora_zipf", "load.lora_zipf", LOAD, "The lora scenario's spread over the adapters: Zipf with this exponent, "
       "the first adapter the most asked for (default 1; 0 = even).", kind="float", metavar="S"),
    _s("seed", "load.seed", LOAD, "Seed of prompts, arrivals and the reference server (default 0).", kind="int",
       metavar="N"),
    _s("max_context", "load.max_context", LOAD, "Context length (prompt + output tokens) every request must fit "
       "(default: what the server states, else 2048; at least 128).", kind="int", metavar="N"),
    _s("workers", "load.workers", LOAD, "Locust worker processes (default 0: in-process).", kind="int",
       metavar="N"),
    _s("expect_workers", "load.expect_workers", LOAD, "Wait for N `soak worker` processes (other hosts) to join "
       "before the load starts; they share the rate with --workers (default 0; docs/load.md).", kind="int",
       metavar="N"),
    _s("master_bind", "load.master_bind", LOAD, "Address the load master listens on for `soak worker`, HOST[:PORT] "
       "(default 127.0.0.1:5557; any other address lets that network join the run).", metavar="ADDR"),
    _s("worker_wait", "load.worker_wait_s", LOAD, "Longest wait for the --expect-workers to join (default 5m).",
       kind="duration", metavar="D"),
    _s("request_timeout", "load.request_timeout_s", LOAD, "Per-request timeout (default 5m).", kind="duration",
       metavar="D"),
    _s("canary_every", "load.canary_every_s", LOAD, "Send the golden-output canary (a fixed greedy request whose "
       "answer must never change) this often (default 10m; 0 = off).", kind="duration", metavar="D"),
    _s("idle_probe_every", "load.idle_probe_every_s", PROBES, "Idle probe interval (default run/6, 1m–60m).",
       kind="duration", metavar="D"),
    _s("idle_probe_for", "load.idle_probe_for_s", PROBES, "Hold after an idle probe's drain (default 30s).",
       kind="duration", metavar="D"),
    _s("drain_timeout", "load.drain_timeout_s", PROBES, "Longest wait at an idle probe for in-flight requests "
       "(default: the larger of 3 × the E2E P99 so far and 60s, less for short windows).", kind="duration", metavar="D"),
    _s("no_idle_probes", "load.no_idle_probes", PROBES, "Never pause arrivals for idle probes.", kind="flag"),
    _s("sample_every", "telemetry.sample_every_s", PROBES, "Telemetry sampling interval (default 5s).",
       kind="duration", metavar="D"),
    _s("forensics", "forensics.mode", FORENSICS, "Attach an allocation tracker (memray; /proc/PID/smaps for a "
       "process that is not Python) to a growing server process: auto when leak.rss is SUSPECT or FAIL at an "
       "early-stop look or before the run's last --forensics-for, always, or off (docs/forensics.md).",
       kind="choice", choices=("auto", "off", "always"), metavar="MODE"),
    _s("forensics_for", "forensics.for_s", FORENSICS, "How long the tracker watches (default 10m); the windows it "
       "overlaps are left out of every check.", kind="duration", metavar="D"),
    _s("forensics_process", "forensics.process", FORENSICS, "Which server processes it watches: engine (the "
       "EngineCore, or the process that grew most; default), api (the API server), all, or a PID.",
       metavar="engine|api|all|PID"),
    _s("gates", "gates_file", OUTPUT, "Gates file (TOML).", kind="file", metavar="FILE"),
    _s("slo", "slo", OUTPUT, "Per-request targets, e.g. ttft=500ms,itl=50ms,e2e=20s (any of ttft, itl, tpot, e2e): "
       "each window's share of requests meeting all of them is judged (goodput.*; docs/gates.md, Goodput).",
       metavar="KEY=D[,KEY=D]"),
    _s("baseline", "baseline", OUTPUT, "Compare with this earlier run.", metavar="RUN"),
    _s("label", "labels", OUTPUT, "Label the run, e.g. release=1.4.2 (repeatable; `soak runs --label`, "
       "`soak history`, docs/history.md).", metavar="KEY=VALUE", multiple=True),
    _s("keep_requests", "keep_requests", OUTPUT, "Also store one row per request.", kind="flag"),
    _s("notify_env", "notify_env", OUTPUT, "Environment variable holding a webhook URL; the summary is POSTed "
       "to it when the run ends.", metavar="VAR"),
    _s("stop_on_fail", "stop_on_fail", OUTPUT, "End the run early once a FAIL is beyond doubt (a leak, creep or "
       "hang at several looks in a row; docs/gates.md, Early stop).", kind="flag"),
    _s("json", "json_output", OUTPUT, "Also print summary.json to stdout.", kind="flag"),
    _s("web", "web", OUTPUT, "Serve a read-only live view of the run at ADDR (HOST[:PORT] or :PORT; the flag alone: "
       "127.0.0.1 at a free port) and print its URL. No authentication: docs/report.md, Live view.",
       metavar="[ADDR]", flag_value="on"),
    _s("metrics_bind", "metrics.bind", METRICS, "Serve the run's series for Prometheus at http://ADDR/metrics "
       "(HOST:PORT or :PORT; port 0: a free one, printed at start). Off by default; no authentication "
       "(docs/observability.md).", metavar="ADDR"),
    _s("otlp_endpoint", "metrics.otlp_endpoint", METRICS, "Push the same series over OTLP/HTTP (protobuf) to URL "
       "(a base URL gets /v1/metrics); headers from OTEL_EXPORTER_OTLP_HEADERS. A failed push never stops the run.",
       metavar="URL"),
    _s("otlp_every", "metrics.otlp_every_s", METRICS, "How often the OTLP push goes (default 15s).", kind="duration",
       metavar="D"),
    _s("out", "out_dir", LOCATIONS, "Output folder (default ./soak-runs).", kind="folder", metavar="DIR"),
    _s("db", "db_url", LOCATIONS, "Database URL (default sqlite:///<out>/soak.db).", metavar="URL"),
    _s("storage_buffer", "storage_buffer_bytes", LOCATIONS, "Memory the rows may take while the database refuses "
       "commits or its disk is full; beyond it the run stops (default 256MiB; docs/robustness.md).", metavar="SIZE"),
    _s("storage_outage_for", "storage_outage_s", LOCATIONS, "How long such a storage outage may last before the run "
       "stops (default 30m).", kind="duration", metavar="D"),
)
SETTINGS_BY_KEY: dict[str, Setting] = {setting.key: setting for setting in SETTINGS}
SETTINGS_BY_FIELD: dict[str, Setting] = {setting.field: setting for setting in SETTINGS}


def normalise_key(key: str) -> str:
    """`Sample-Every` and `sample_every` are the same key."""
    return key.strip().lower().replace("-", "_")


def _checked(layer: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The layer with keys normalised and None values dropped; an unknown key is a ConfigError."""
    checked: dict[str, Any] = {}
    for key, value in layer.items():
        name = normalise_key(key)
        if name not in SETTINGS_BY_KEY:
            raise ConfigError(f"unknown setting {key!r}{where}")
        if value is not None:
            checked[name] = value
    return checked


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a TOML file of flat keys; a missing or malformed file, or an unknown key, is a ConfigError."""
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a folder") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    return _checked(data, f" in config file {path}")


def read_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The `SOAK_<KEY>` variables of known settings; repeatable ones are split on commas (`;` for --replica)."""
    environ = os.environ if environ is None else environ
    found: dict[str, Any] = {}
    for setting in SETTINGS:
        value = environ.get(setting.env)
        if value:
            found[setting.key] = ([p.strip() for p in value.split(setting.separator) if p.strip()] if setting.multiple
                                  else value)
    return found


@dataclass(frozen=True)
class Layers:
    """The settings given by flags, by `SOAK_*` variables and by the config file; the first that sets a key wins."""

    flags: Mapping[str, Any]
    env: Mapping[str, Any]
    file: Mapping[str, Any]
    config_file: Path | None = None

    def value(self, key: str) -> Any:
        """The winning value of `key`, or None when no layer sets it."""
        for layer in (self.flags, self.env, self.file):
            if key in layer:
                return layer[key]
        return None

    def origin(self, key: str) -> str:
        """Where the value of `key` came from: `--rate`, `SOAK_RATE`, `rate in FILE` or `default`."""
        setting = SETTINGS_BY_KEY[key]
        if key in self.flags:
            return setting.flag
        if key in self.env:
            return setting.env
        if key in self.file:
            return f"{setting.toml_key} in {self.config_file}"
        return "default"

    def merged(self) -> dict[str, Any]:
        """One flat dict of the winning values."""
        return {**self.file, **self.env, **self.flags}


def read_layers(flags: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Layers:
    """Flag values (None = not given; `config` names the file), the environment, and the file they point at."""
    environ = os.environ if environ is None else environ
    flags = dict(flags)
    config = flags.pop("config", None) or environ.get(CONFIG_ENV) or None
    config_file = Path(config).expanduser().resolve() if config else None
    file_layer = read_config_file(config_file) if config_file else {}
    return Layers(_checked(flags, ""), read_environment(environ), file_layer, config_file)
