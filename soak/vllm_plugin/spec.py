"""The `--vllm-fault NAME[=VALUE]` specs: parsed and checked here, without vLLM, by soak and by the plugin alike.

soak hands the faults to vLLM's processes in one environment variable (`SOAK_VLLM_FAULTS`, the specs joined by
commas), and adds the plugin to a `VLLM_PLUGINS` the user set; `fault_environment` builds both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from soak.errors import ConfigError
from soak.units import parse_bytes, parse_duration

FAULTS_ENV = "SOAK_VLLM_FAULTS"
PLUGINS_ENV = "VLLM_PLUGINS"
PLUGIN_NAME = "soak_faults"  # the entry point's name in the vllm.general_plugins group (pyproject.toml)
ARMED_LINE = "soak fault plugin armed"  # what the plugin logs once it has planted the faults
# What each fault's VALUE is: a byte size, a duration, an optional block count.
FAULT_VALUES = {
    "rss-leak": "a byte size, e.g. rss-leak=1MiB",
    "kv-leak-on-abort": "nothing, or a block count, e.g. kv-leak-on-abort=1",
    "hang-after": "a duration, e.g. hang-after=60s",
    "garble-after": "a duration, e.g. garble-after=60s",
}


@dataclass(frozen=True)
class VllmFaults:
    """The faults to plant in vLLM's engine; None (or 0 blocks) where a fault is not asked for."""

    rss_leak_bytes: int | None = None
    kv_leak_on_abort: bool = False
    kv_leak_blocks: int | None = None  # with kv_leak_on_abort: keep only this many of the last blocks; None: all
    hang_after_s: float | None = None
    garble_after_s: float | None = None


def _value(name: str, value: str | None) -> dict[str, object]:
    """The VllmFaults fields one fault sets; ConfigError (one line) for a value that does not fit."""
    wants = FAULT_VALUES[name]
    if name == "kv-leak-on-abort":
        if value is None:
            return {"kv_leak_on_abort": True}
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"fault kv-leak-on-abort={value}: the value must be {wants}")
        return {"kv_leak_on_abort": True, "kv_leak_blocks": int(value)}
    if value is None or not value.strip():
        raise ConfigError(f"fault {name} needs a value: {wants}")
    try:
        number = parse_bytes(value) if name == "rss-leak" else parse_duration(value)
    except ConfigError as exc:
        raise ConfigError(f"fault {name}={value}: {exc}") from None
    if number <= 0:
        raise ConfigError(f"fault {name}={value}: the value must be above 0 ({wants})")
    field = {"rss-leak": "rss_leak_bytes", "hang-after": "hang_after_s", "garble-after": "garble_after_s"}[name]
    return {field: number}


def parse_faults(specs: Iterable[str]) -> VllmFaults:
    """`rss-leak=1MiB`, `kv-leak-on-abort`, … as VllmFaults; ConfigError naming the first bad or repeated one."""
    fields: dict[str, object] = {}
    seen: set[str] = set()
    for spec in specs:
        name, sep, value = spec.strip().partition("=")
        if name not in FAULT_VALUES:
            raise ConfigError(f"unknown fault {name!r}; known: {', '.join(FAULT_VALUES)}")
        if name in seen:
            raise ConfigError(f"fault {name} is given twice; give each fault once")
        seen.add(name)
        fields.update(_value(name, value if sep else None))
    return VllmFaults(**fields)


def fault_environment(specs: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that arm the plugin in vLLM's processes; empty without faults.

    vLLM loads every installed plugin while `VLLM_PLUGINS` is unset, soak's among them, so it stays unset then
    (naming only soak's would turn the others off); a `VLLM_PLUGINS` the user set gets soak's plugin added.
    """
    specs = [spec.strip() for spec in specs]
    if not specs:
        return {}
    armed = {FAULTS_ENV: ",".join(specs)}
    if environ.get(PLUGINS_ENV) is None:
        return armed
    plugins = [name for name in environ[PLUGINS_ENV].split(",") if name.strip()]
    return {**armed, PLUGINS_ENV: ",".join([*plugins, PLUGIN_NAME] if PLUGIN_NAME not in plugins else plugins)}


def faults_armed(log_text: str) -> bool:
    """Whether a vLLM log (of one start) says the plugin planted the faults."""
    return ARMED_LINE in log_text
