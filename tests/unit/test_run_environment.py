"""The recorded environment: the config hash depends on the config and scenario sources, never on the machine."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soak.config import LoadSettings, RunConfig, ScenarioSpec, TargetSettings
from soak.run.conductor import Conductor
from soak.run.environment import config_hash
from soak.target import ServerInfo
from soak.telemetry.gpu import GpuFacts

FAKE_GPU = GpuFacts(index=0, name="NVIDIA H200", uuid="GPU-aaaa", memory_total_bytes=141 * 2**30, driver="550.54",
                    cuda_driver_version=12040)


class FakeGpus:
    def __init__(self, gpus: list[GpuFacts]) -> None:
        self.gpus = gpus

    def describe(self) -> list[GpuFacts]:
        return self.gpus


class FakeTelemetry:
    def __init__(self, gpus: list[GpuFacts]) -> None:
        self.gpus = FakeGpus(gpus)


class FakeRecorder:
    """Keeps the run-row updates the conductor makes."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []

    def update_run(self, **values: Any) -> None:
        self.updates.append(values)


def make_config(tmp_path: Path, scenario: Path) -> RunConfig:
    return RunConfig(duration_s=60, warmup_s=0, window_s=5.0, out_dir=tmp_path, db_url="sqlite://",
                     target=TargetSettings(url="http://127.0.0.1:9"),
                     load=LoadSettings(scenarios=[ScenarioSpec(name=str(scenario))]))


def recorded_environment(config: RunConfig, gpus: list[GpuFacts]) -> dict[str, Any]:
    """The environment a run on a machine with `gpus` ends up recording, through the conductor's own steps."""
    conductor = Conductor(config)
    conductor.state.info = ServerInfo(kind="external", base_url="http://127.0.0.1:9", model="m")
    environment = json.loads(conductor._run_row()["environment_json"])
    conductor.state.telemetry, conductor.state.recorder = FakeTelemetry(gpus), FakeRecorder()
    conductor._record_gpus()
    for update in conductor.state.recorder.updates:
        environment = json.loads(update.get("environment_json", json.dumps(environment)))
    return environment


def scenario_file(tmp_path: Path, body: str = "x = 1\n") -> Path:
    path = tmp_path / "my_scenario.py"
    path.write_text(body)
    return path


def test_same_config_hashes_the_same_on_gpu_and_cpu_hosts(tmp_path):
    config = make_config(tmp_path, scenario_file(tmp_path))
    on_cpu, on_gpu = recorded_environment(config, []), recorded_environment(config, [FAKE_GPU])
    assert on_gpu["gpus"] == [FAKE_GPU.to_dict()] and on_cpu["gpus"] == []
    assert on_gpu["config_hash"] == on_cpu["config_hash"]
    assert on_gpu["scenarios"] == on_cpu["scenarios"] == [str(tmp_path / "my_scenario.py")]


def test_hash_follows_the_scenario_source(tmp_path):
    config = make_config(tmp_path, scenario_file(tmp_path))
    before = config_hash(config)
    scenario_file(tmp_path, "x = 2\n")
    assert config_hash(config) != before
    assert recorded_environment(config, [FAKE_GPU])["config_hash"] == config_hash(config)


def test_labels_and_json_output_leave_the_hash_alone(tmp_path):
    config = make_config(tmp_path, scenario_file(tmp_path))
    relabelled = config.model_copy(update={"labels": {"release": "1.4.2"}, "json_output": not config.json_output})
    assert config_hash(relabelled) == config_hash(config)
    assert config_hash(config.model_copy(update={"keep_requests": not config.keep_requests})) != config_hash(config)


def hashes_in_two_checkouts(tmp_path: Path, setup: Callable[[Path, Path], RunConfig], named: str,
                            body: str) -> tuple[list[str], RunConfig, Path]:
    """The config hash of one setup made in two checkouts (…/a/soak and …/b/soak), each with its own file
    `named` holding `body`; also the second checkout's config and file."""
    hashes = []
    for checkout in ("a", "b"):
        folder = tmp_path / checkout / "soak"
        folder.mkdir(parents=True)
        file = folder / named
        file.write_text(body)
        config = setup(folder, file)
        hashes.append(config_hash(config))
    return hashes, config, file


def test_the_same_setup_in_two_checkouts_hashes_the_same(tmp_path):
    def setup(folder: Path, gates: Path) -> RunConfig:
        return make_config(folder, scenario_file(folder)).model_copy(
            update={"gates_file": gates, "db_url": f"sqlite:///{folder}/soak.db"})

    hashes, config, gates = hashes_in_two_checkouts(tmp_path, setup, "gates.toml", "[leak]\n")
    assert hashes[0] == hashes[1]
    gates.write_text("[leak]\nrss_mib_per_h = 1\n")
    assert config_hash(config) != hashes[1]  # a named file counts by what it holds


def test_a_server_flag_naming_a_file_in_the_checkout_hashes_by_the_file(tmp_path):
    def setup(folder: Path, template: Path) -> RunConfig:
        target = TargetSettings(url="http://127.0.0.1:9", serve_args=[f"--chat-template={template}", str(folder)])
        return make_config(folder, scenario_file(folder)).model_copy(update={"target": target})

    hashes, config, template = hashes_in_two_checkouts(tmp_path, setup, "chat.jinja", "{{ messages }}")
    assert hashes[0] == hashes[1]
    template.write_text("{{ other }}")
    assert config_hash(config) != hashes[1]
