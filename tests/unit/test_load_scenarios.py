"""Scenario loading by name or path, weights, dataset files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soak.config import LoadSettings, ScenarioSpec
from soak.errors import ConfigError
from soak.load.dataset import load_dataset
from soak.load.scenarios import (
    builtin_names,
    check_dataset,
    effective_specs,
    load_scenarios,
    scenario_path,
    scenario_sources,
    weighted_tasks,
)

BUILTINS = {"mixed", "chat_short", "long_tail", "long_context", "prefix_multiturn", "cancel", "bad_input", "unicode",
            "non_streaming", "dataset", "trace", "structured", "tools", "sampling", "multimodal", "lora"}


def test_every_builtin_is_listed_and_loads():
    assert set(builtin_names()) == BUILTINS
    loaded = load_scenarios([ScenarioSpec(name=name) for name in sorted(BUILTINS)])
    assert all(s.user_classes and s.path.name == f"{s.name}.py" for s in loaded)


def test_an_unknown_name_is_a_config_error_naming_the_builtins():
    with pytest.raises(ConfigError) as error:
        scenario_path("nope")
    assert "unknown scenario 'nope'" in str(error.value) and "chat_short" in str(error.value)
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="does not exist"):
        scenario_path("/no/such/file.py")


def test_a_users_file_is_loaded_by_path(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("from soak.load import OpenAIUser, task\n\n"
                    "class A(OpenAIUser):\n    weight = 3\n"
                    "    @task(2)\n    def x(self): pass\n    @task\n    def y(self): pass\n\n"
                    "class B(OpenAIUser):\n    @task\n    def z(self): pass\n")
    [scenario] = load_scenarios([ScenarioSpec(name=str(path), weight=2)])
    assert scenario.name == "mine" and {c.__name__ for c in scenario.user_classes} == {"A", "B"}
    weights = {}
    for _, cls, task, weight in weighted_tasks([scenario]):
        weights[(cls.__name__, task.__name__)] = weights.get((cls.__name__, task.__name__), 0) + weight
    assert weights == pytest.approx({("A", "x"): 1.0, ("A", "y"): 0.5, ("B", "z"): 0.5})
    assert scenario_sources([ScenarioSpec(name=str(path))]) == [path.read_text()]


@pytest.mark.parametrize("source, message", [
    ("x = 1\n", "no OpenAIUser subclass"),
    ("raise RuntimeError('boom')\n", "failed to import: RuntimeError: boom"),
    ("from soak.load import OpenAIUser\nclass A(OpenAIUser):\n    pass\n", "needs @task"),
])
def test_broken_user_files_are_config_errors(tmp_path, source, message):
    path = tmp_path / f"bad_{abs(hash(source))}.py"
    path.write_text(source)
    with pytest.raises(ConfigError, match=message):
        load_scenarios([ScenarioSpec(name=str(path))])


def test_dataset_alone_replays_the_dataset_and_needs_a_file(tmp_path):
    dataset = tmp_path / "d.jsonl"
    assert [s.name for s in effective_specs(LoadSettings(dataset=dataset))] == ["dataset"]
    assert [s.name for s in effective_specs(LoadSettings(dataset=dataset, scenarios=["cancel"]))] == ["cancel"]
    with pytest.raises(ConfigError, match="needs --dataset"):
        check_dataset([ScenarioSpec(name="dataset")], None)
    with pytest.raises(ConfigError, match="cannot be read"):
        check_dataset([ScenarioSpec(name="dataset")], dataset)


def test_dataset_formats(tmp_path):
    sharegpt = [{"id": "1", "conversations": [{"from": "system", "value": "Be brief."},
                                              {"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "y" * 800}]},
                {"conversations": [{"from": "gpt", "value": "no question here"}]}]
    (tmp_path / "a.json").write_text(json.dumps(sharegpt))
    [item] = load_dataset(tmp_path / "a.json")
    assert item.messages == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"})
    assert item.max_tokens == 200
    lines = [{"messages": [{"role": "user", "content": "a"}]}, {"prompt": "b", "output": "zz"}]
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    items = load_dataset(tmp_path / "b.jsonl")
    assert [i.messages[-1]["content"] for i in items] == ["a", "b"] and items[1].max_tokens == 16
    (tmp_path / "c.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        load_dataset(tmp_path / "c.json")
    (tmp_path / "d.json").write_text("[]")
    with pytest.raises(ConfigError, match="no usable prompts"):
        load_dataset(Path(tmp_path / "d.json"))


def test_the_trace_scenario_without_a_trace_is_a_config_error():
    with pytest.raises(ConfigError, match="--trace FILE"):
        effective_specs(LoadSettings(scenarios=["chat_short", "trace"]))
