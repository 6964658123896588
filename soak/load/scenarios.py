"""Finding and loading scenarios at run time, like Locust loads a locustfile.

A scenario is a Python file of `OpenAIUser` subclasses: a built-in one by name (shipped in the package as
`soak._scenarios`, from the repository's `scenarios/`), or the user's own by path. No module of soak imports
a scenario statically. The dispatcher picks a scenario by its weight, then a class by `weight`, then a task
by its `@task` weight, once per planned arrival.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from soak.config import LoadSettings, ScenarioSpec
from soak.errors import ConfigError

DEFAULT_SCENARIOS = (ScenarioSpec(name="mixed"),)
DATASET_SCENARIO = "dataset"
TRACE_SCENARIO = "trace"  # --trace replays through it (soak/load/trace.py)


@dataclass(frozen=True)
class LoadedScenario:
    """A scenario ready to run: its name, weight in the mix, user classes and source path."""

    name: str
    weight: float
    user_classes: tuple[type, ...]
    path: Path


def builtin_names() -> list[str]:
    """Names of the built-in scenarios, sorted (`trace` among them, which only `--trace` selects)."""
    root = importlib.resources.files("soak._scenarios")
    return sorted(item.name[:-3] for item in root.iterdir()
                  if item.name.endswith(".py") and not item.name.startswith("_"))


def _looks_like_path(name: str) -> bool:
    return name.endswith(".py") or "/" in name or "\\" in name


def scenario_path(name: str) -> Path:
    """The file of a built-in scenario name or a user's path; ConfigError naming the built-ins if neither."""
    if _looks_like_path(name):
        path = Path(name).expanduser()
        if path.is_file():
            return path.resolve()
        raise ConfigError(f"scenario file {name} does not exist")
    candidate = importlib.resources.files("soak._scenarios") / f"{name}.py"
    if not name.startswith("_") and candidate.is_file():
        return Path(str(candidate))
    raise ConfigError(f"unknown scenario {name!r}: built-in scenarios are {', '.join(builtin_names())}; "
                      "or give the path to your own .py file")


def scenario_name(name: str) -> str:
    """The name a scenario's records carry: the built-in name, or a user file's stem."""
    return Path(name).stem if _looks_like_path(name) else name


def effective_specs(load: LoadSettings) -> tuple[ScenarioSpec, ...]:
    """The scenario mix to run: `--trace` replays the trace alone; `--dataset` with the default mix replays the
    dataset instead."""
    if load.trace is not None:
        return (ScenarioSpec(name=TRACE_SCENARIO),)
    if any(spec.name == TRACE_SCENARIO for spec in load.scenarios):
        raise ConfigError(f"scenario {TRACE_SCENARIO!r} replays a request trace: give it with --trace FILE "
                          "(it is not part of a mix)")
    if load.dataset is not None and tuple(load.scenarios) == DEFAULT_SCENARIOS:
        return (ScenarioSpec(name=DATASET_SCENARIO),)
    return tuple(load.scenarios)


def scenario_sources(specs: tuple[ScenarioSpec, ...] | list[ScenarioSpec]) -> list[str]:
    """The source text of each scenario in the mix (for the run's config hash)."""
    return [scenario_path(spec.name).read_text(encoding="utf-8") for spec in specs]


def import_scenario_file(path: Path) -> ModuleType:
    """Import a scenario file under a private module name (once per path and process)."""
    module_name = "soak_scenario_" + path.stem + "_" + hashlib.sha1(str(path).encode()).hexdigest()[:8]
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"scenario file {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # any error in a user's file is a configuration problem
        del sys.modules[module_name]
        raise ConfigError(f"scenario file {path} failed to import: {type(exc).__name__}: {exc}") from None
    return module


def user_classes_in(module: ModuleType, path: Path) -> tuple[type, ...]:
    """The concrete OpenAIUser subclasses a scenario file defines, each with at least one plain @task."""
    from soak.load.user import OpenAIUser

    found = tuple(cls for _, cls in inspect.getmembers(module, inspect.isclass)
                  if issubclass(cls, OpenAIUser) and cls.__module__ == module.__name__
                  and not cls.__dict__.get("abstract", False))
    if not found:
        raise ConfigError(f"scenario file {path} defines no OpenAIUser subclass (see docs/load.md)")
    for cls in found:
        if not cls.tasks or not all(callable(t) and not inspect.isclass(t) for t in cls.tasks):
            raise ConfigError(f"scenario class {cls.__name__} in {path} needs @task methods "
                              "(TaskSets are not supported)")
    return found


def check_dataset(specs: tuple[ScenarioSpec, ...] | list[ScenarioSpec], dataset: Path | None) -> None:
    """The dataset scenario needs `--dataset FILE`, readable and non-empty; checked before load starts."""
    if dataset is not None:
        from soak.load.dataset import load_dataset

        load_dataset(Path(dataset))
    elif any(spec.name == DATASET_SCENARIO for spec in specs):
        raise ConfigError("the dataset scenario needs --dataset FILE (ShareGPT-style JSON or JSONL)")


def load_scenarios(specs: tuple[ScenarioSpec, ...] | list[ScenarioSpec]) -> list[LoadedScenario]:
    """Resolve, import and check every scenario of the mix; ConfigError on the first bad one."""
    loaded = []
    for spec in specs:
        path = scenario_path(spec.name)
        classes = user_classes_in(import_scenario_file(path), path)
        loaded.append(LoadedScenario(scenario_name(spec.name), spec.weight, classes, path))
    return loaded


def weighted_tasks(scenarios: list[LoadedScenario]) -> list[tuple[str, type, Any, float]]:
    """(scenario, class, task, weight) for every task; weights multiply down scenario → class → task."""
    entries = []
    for scenario in scenarios:
        class_total = sum(max(float(getattr(cls, "weight", 1)), 0.0) for cls in scenario.user_classes) or 1.0
        for cls in scenario.user_classes:
            class_share = max(float(getattr(cls, "weight", 1)), 0.0) / class_total
            for task in cls.tasks:  # Locust repeats a task in `tasks` once per unit of its weight
                entries.append((scenario.name, cls, task, scenario.weight * class_share / len(cls.tasks)))
    return [entry for entry in entries if entry[3] > 0]
