"""The settings table, the `soak start` flags, the SOAK_* variables and the TOML keys agree with each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import click
import pytest
from pydantic import BaseModel

from soak.cli.start import start, start_flags
from soak.config import LoraAdapter, ReplicaSpec, RunConfig, ScenarioSpec, resolve_config
from soak.settings import SETTINGS, SETTINGS_BY_KEY
from soak.slo import SloTargets

# What users had before the table; every one of these must keep working.
OLD_KEYS = {
    "duration", "warmup", "window", "out", "db", "gates", "baseline", "json", "keep_requests", "notify_env", "target",
    "model", "served_model", "vllm_bin", "serve_arg", "reference_fault", "reference_arg", "time_scale",
    "reference_seed", "device", "server_pid", "metrics_url", "restart", "max_restarts", "startup_timeout",
    "api_key_env", "rate", "burstiness", "max_concurrency", "scenario", "phase", "idle_probe_every",
    "idle_probe_for", "drain_timeout", "no_idle_probes", "seed", "dataset", "workers", "request_timeout",
    "sample_every"}
OLD_START_FLAGS = {
    "--duration", "--hours", "--minutes", "--target", "--model", "--served-model", "--vllm-bin", "--serve-arg",
    "--scenario", "--rate", "--burstiness", "--max-concurrency", "--warmup", "--window", "--sample-every",
    "--idle-probe-every", "--idle-probe-for", "--no-idle-probes", "--server-pid", "--metrics-url", "--workers",
    "--dataset", "--seed", "--reference-fault", "--time-scale", "--device", "--restart", "--max-restarts",
    "--startup-timeout", "--request-timeout", "--api-key-env", "--gates", "--baseline", "--keep-requests", "--db",
    "--out", "--config", "--json"}
# Flags of `soak start` that are not settings: other spellings of --duration, and the file itself.
START_EXTRAS = {"--hours", "--minutes", "--config"}
# RunConfig fields no user sets directly.
INTERNAL_FIELDS = {"config_file", "telemetry.flush_every_s", "target.url", "fleet_id", "replica", "observe_only",
                   "target.gpus", "target.k8s_pods"}


class Example(NamedTuple):
    """One value of a setting written three ways, and what RunConfig holds for it."""

    args: tuple[str, ...]
    env: str
    toml: str
    expected: Any


def ex(value: str, expected: Any, toml: str | None = None) -> Example:
    return Example((value,), value, toml if toml is not None else f'"{value}"', expected)


def repeated(values: list[str], expected: Any, toml: str | None = None) -> Example:
    return Example(tuple(values), ",".join(values), toml or "[" + ", ".join(f'"{v}"' for v in values) + "]", expected)


FLAG = Example((), "true", "true", True)
EXAMPLES: dict[str, Example] = {
    "duration": ex("10m", 600.0), "warmup": ex("2m", 120.0), "window": ex("30s", 30.0), "horizon": ex("72h", 259200.0),
    "target": repeated(["gpu-0=http://127.0.0.1:9/v1", "http://127.0.0.1:8 2"],
                      (ReplicaSpec(name="gpu-0", url="http://127.0.0.1:9"),
                       ReplicaSpec(url="http://127.0.0.1:8", weight=2.0))),
    "replica": Example(("a=http://127.0.0.1:9,GPU-1,GPU-2", "b=http://127.0.0.1:8,GPU-3 2"),
                       "a=http://127.0.0.1:9,GPU-1,GPU-2;b=http://127.0.0.1:8,GPU-3 2",
                       '["a=http://127.0.0.1:9,GPU-1,GPU-2", "b=http://127.0.0.1:8,GPU-3 2"]',
                       (ReplicaSpec(name="a", url="http://127.0.0.1:9", gpus=("GPU-1", "GPU-2")),
                        ReplicaSpec(name="b", url="http://127.0.0.1:8", weight=2.0, gpus=("GPU-3",)))),
    "router": ex("http://127.0.0.1:7/v1", "http://127.0.0.1:7"),
    "targets_file": ex("/etc/fleet.txt", Path("/etc/fleet.txt")), "model": ex("org/model", "org/model"),
    "k8s_selector": ex("app=vllm,tier!=canary", "app=vllm,tier!=canary"), "k8s_namespace": ex("serving", "serving"),
    "k8s_port": ex("http", "http"),
    "served_model": ex("model", "model"), "vllm_bin": ex("/opt/vllm", "/opt/vllm"),
    "serve_arg": repeated(["--enforce-eager", "--max-num-seqs=8"], ("--enforce-eager", "--max-num-seqs=8")),
    "vllm_fault": repeated(["rss-leak=1MiB", "hang-after=60s"], ("rss-leak=1MiB", "hang-after=60s")),
    "server_pid": repeated(["12", "13"], (12, 13), toml="[12, 13]"),
    "metrics_url": repeated(["http://h:1/metrics"], ("http://h:1/metrics",)),
    "server_kind": ex("llamacpp", "llamacpp"), "restart": ex("on-crash", "on-crash"), "max_restarts": ex("5", 5, toml="5"),
    "startup_timeout": ex("2m", 120.0), "api_key_env": ex("MY_KEY", "MY_KEY"),
    "server_log": ex("/var/log/vllm.log", Path("/var/log/vllm.log")), "canary_every": ex("5m", 300.0),
    "reference_fault": repeated(["leak_rss", "crash_after=60"], ("leak_rss", "crash_after=60")),
    "reference_arg": repeated(["--vocab=64"], ("--vocab=64",)), "reference_seed": ex("9", 9, toml="9"),
    "time_scale": ex("2.5", 2.5, toml="2.5"), "device": ex("cuda", "cuda"), "rate": ex("4.5", 4.5, toml="4.5"),
    "burstiness": ex("0.5", 0.5, toml="0.5"), "max_concurrency": ex("8", 8, toml="8"),
    "scenario": repeated(["cancel:2", "mixed"], (ScenarioSpec(name="cancel", weight=2), ScenarioSpec(name="mixed"))),
    "phase": Example(("steady rate_rps=3",), "steady rate_rps=3", '[{kind = "steady", rate_rps = 3}]', None),
    "dataset": ex("/data/prompts.jsonl", Path("/data/prompts.jsonl")), "seed": ex("3", 3, toml="3"),
    "trace": ex("/data/trace.jsonl", Path("/data/trace.jsonl")), "trace_format": ex("azure", "azure"),
    "trace_speed": ex("2.5", 2.5, toml="2.5"),
    "lora": repeated(["sql=/models/sql-lora", "chat=/models/chat"],
                     (LoraAdapter(name="sql", path="/models/sql-lora"), LoraAdapter(name="chat", path="/models/chat"))),
    "lora_churn_every": ex("10m", 600.0), "lora_zipf": ex("1.2", 1.2, toml="1.2"),
    "workers": ex("2", 2, toml="2"), "request_timeout": ex("1m", 60.0), "idle_probe_every": ex("10m", 600.0),
    "expect_workers": ex("3", 3, toml="3"), "master_bind": ex("0.0.0.0:6000", "0.0.0.0:6000"),
    "worker_wait": ex("90s", 90.0),
    "max_context": ex("1024", 1024, toml="1024"),
    "idle_probe_for": ex("5s", 5.0), "drain_timeout": ex("20s", 20.0), "no_idle_probes": FLAG,
    "skip_unsupported": FLAG,
    "sample_every": ex("2s", 2.0), "gates": ex("/etc/gates.toml", Path("/etc/gates.toml")),
    "label": repeated(["release=1.4.2", "gpu=h200"], {"release": "1.4.2", "gpu": "h200"}),
    "web": ex("0.0.0.0:8090", "0.0.0.0:8090"),
    "baseline": ex("RUN-1", "RUN-1"), "keep_requests": FLAG, "notify_env": ex("HOOK", "HOOK"), "json": FLAG,
    "stop_on_fail": FLAG,
    "forensics": ex("always", "always"), "forensics_for": ex("2m", 120.0), "forensics_process": ex("4242", "4242"),
    "metrics_bind": ex(":9464", "127.0.0.1:9464"), "otlp_endpoint": ex("http://127.0.0.1:4318", "http://127.0.0.1:4318"),
    "otlp_every": ex("30s", 30.0),
    "slo": ex("ttft=500ms,e2e=20s", SloTargets(ttft_ms=500.0, e2e_ms=20000.0)),
    "out": ex("/tmp/soak-settings-test", Path("/tmp/soak-settings-test")),
    "db": ex("sqlite:////tmp/soak-settings-test.db", "sqlite:////tmp/soak-settings-test.db"),
    "storage_buffer": ex("64MiB", 64 * 2**20), "storage_outage_for": ex("2h", 7200.0),
}


def field_value(config: RunConfig, field: str) -> Any:
    value: Any = config
    for part in field.split("."):
        value = getattr(value, part)
    return value


def model_fields(model: type[BaseModel], prefix: str = "") -> set[str]:
    found = set()
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found |= model_fields(annotation, f"{prefix}{name}.")
        else:
            found.add(prefix + name)
    return found


def start_option_names() -> dict[str, click.Option]:
    return {opt: param for param in start.params if isinstance(param, click.Option) for opt in param.opts}


def test_every_setting_is_a_start_flag_and_every_start_flag_a_setting():
    options = start_option_names()
    assert set(options) == {s.flag for s in SETTINGS} | START_EXTRAS
    for setting in SETTINGS:
        option = options[setting.flag]
        assert option.name == setting.key and option.help == setting.help
        assert option.multiple == setting.multiple and option.is_flag == (setting.kind == "flag")


def test_the_table_covers_the_run_config():
    fields = [s.field for s in SETTINGS]
    assert len(fields) == len(set(fields))
    assert set(fields) | INTERNAL_FIELDS == model_fields(RunConfig)


def test_names_users_already_rely_on_still_work():
    assert OLD_KEYS <= set(SETTINGS_BY_KEY)
    assert OLD_START_FLAGS <= set(start_option_names())
    assert {"SOAK_" + key.upper() for key in OLD_KEYS} <= {s.env for s in SETTINGS}


def test_every_setting_has_an_example():
    assert set(EXAMPLES) == set(SETTINGS_BY_KEY)


def _from_flags(setting_key: str, example: Example) -> RunConfig:
    setting = SETTINGS_BY_KEY[setting_key]
    args = [setting.flag] if setting.kind == "flag" else [f"{setting.flag}={value}" for value in example.args]
    base = [] if setting_key == "duration" else ["--duration", "1h"]
    ctx = start.make_context("start", [*base, *args])
    return resolve_config(start_flags(dict(ctx.params)), environ={})


def _from_env(setting_key: str, example: Example) -> RunConfig:
    base = {} if setting_key == "duration" else {"SOAK_DURATION": "1h"}
    return resolve_config({}, environ={**base, SETTINGS_BY_KEY[setting_key].env: example.env})


def _from_toml(setting_key: str, example: Example, path: Path, spelling: str) -> RunConfig:
    base = "" if setting_key == "duration" else 'duration = "1h"\n'
    path.write_text(f"{base}{spelling} = {example.toml}\n")
    return resolve_config({"config": str(path)}, environ={})


@pytest.mark.parametrize("key", sorted(EXAMPLES))
def test_flag_env_and_toml_give_the_same_value(key, tmp_path):
    setting, example = SETTINGS_BY_KEY[key], EXAMPLES[key]
    values = [field_value(config, setting.field) for config in (
        _from_flags(key, example), _from_env(key, example),
        _from_toml(key, example, tmp_path / "dashes.toml", setting.toml_key),
        _from_toml(key, example, tmp_path / "underscores.toml", key))]
    assert values[0] == values[1] == values[2] == values[3]
    if example.expected is not None:
        assert values[0] == example.expected
    assert values[0] != field_value(resolve_config({"duration": "1h"}, environ={}), setting.field)


def test_every_setting_is_documented():
    text = (Path(__file__).resolve().parents[2] / "docs" / "settings.md").read_text()
    for setting in SETTINGS:
        assert f"`{setting.flag}`" in text and f"`{setting.env}`" in text, setting.key


def test_server_kinds_are_the_known_dialects():
    from soak.settings import SERVER_KINDS
    from soak.telemetry.dialects import DIALECTS

    assert set(SERVER_KINDS) == set(DIALECTS)
