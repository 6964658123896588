from pathlib import Path

import pytest

from soak.config import ScenarioSpec, default_warmup_s, default_window_s, resolve_config
from soak.errors import ConfigError


def test_defaults_follow_design_for_a_24h_run(tmp_path):
    config = resolve_config({"duration": "24h", "out": str(tmp_path)}, environ={})
    assert config.warmup_s == 3600  # 5 % = 72 min, clamped to 60 min
    assert config.window_s == pytest.approx((86400 - 3600) / 48)
    assert config.probe_every_s == 3600  # run/6 = 4 h, clamped to 60 min
    assert config.db_url == f"sqlite:///{tmp_path / 'soak.db'}"
    assert config.target.kind == "reference"


def test_short_runs_clamp_warmup_and_window():
    assert default_warmup_s(60) == 30
    assert default_warmup_s(20) == 10  # never more than half the run
    assert default_window_s(60, 30) == 5


def test_precedence_flags_over_env_over_file(tmp_path):
    config_file = tmp_path / "soak.toml"
    config_file.write_text('duration = "10m"\nrate = 1.0\nsample-every = "2s"\nscenario = ["cancel:2"]\n')
    environ = {"SOAK_RATE": "3", "SOAK_OUT": str(tmp_path / "env-out")}
    config = resolve_config({"config": str(config_file), "rate": 7.0}, environ=environ)
    assert config.load.rate_rps == 7.0  # flag wins
    assert config.telemetry.sample_every_s == 2.0  # from the file
    assert config.out_dir == (tmp_path / "env-out").resolve()  # env beats the default
    assert config.load.scenarios == (ScenarioSpec(name="cancel", weight=2.0),)
    assert config.config_file == config_file.resolve()


def test_unknown_key_in_file_is_named(tmp_path):
    config_file = tmp_path / "bad.toml"
    config_file.write_text('duration = "10m"\nrat = 1.0\n')
    with pytest.raises(ConfigError, match="rat"):
        resolve_config({"config": str(config_file)}, environ={})


def test_invalid_values_give_one_line_naming_the_setting(tmp_path):
    with pytest.raises(ConfigError, match=r"^invalid setting rate \(--rate\): .*greater than 0"):
        resolve_config({"duration": "5m", "rate": -1}, environ={})
    with pytest.raises(ConfigError, match=r"^invalid setting rate \(SOAK_RATE\): .*valid number.*'fast'"):
        resolve_config({"duration": "5m"}, environ={"SOAK_RATE": "fast"})
    config_file = tmp_path / "soak.toml"
    config_file.write_text('duration = "5m"\nsample-every = "often"\n')
    with pytest.raises(ConfigError, match=rf"^invalid setting sample-every \(sample-every in {config_file}\): "
                       "malformed duration"):
        resolve_config({"config": str(config_file)}, environ={})
    with pytest.raises(ConfigError, match=r"^invalid setting duration \(SOAK_DURATION\): malformed"):
        resolve_config({}, environ={"SOAK_DURATION": "a while"})
    with pytest.raises(ConfigError, match="warm-up"):
        resolve_config({"duration": "1m", "warmup": "2m"}, environ={})
    with pytest.raises(ConfigError, match="no duration"):
        resolve_config({}, environ={})


def test_target_url_strips_v1_and_checks_scheme():
    config = resolve_config({"duration": "5m", "target": "http://127.0.0.1:8000/v1/"}, environ={})
    assert config.target.url == "http://127.0.0.1:8000"
    assert config.target.kind == "external"
    with pytest.raises(ConfigError, match="http"):
        resolve_config({"duration": "5m", "target": "127.0.0.1:8000"}, environ={})


def test_scenario_spec_parsing():
    assert ScenarioSpec.parse("long_tail:3") == ScenarioSpec(name="long_tail", weight=3)
    assert ScenarioSpec.parse("my/file.py") == ScenarioSpec(name="my/file.py")
    assert ScenarioSpec.parse(str(Path("/x/y.py")) + ":2").weight == 2


def test_missing_config_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_config({"config": str(tmp_path / "nope.toml"), "duration": "5m"}, environ={})


def test_phases_from_flags_env_or_tables_are_the_same(tmp_path):
    text = "ramp to_rate_rps=8 duration_s=1m"
    from_flag = resolve_config({"duration": "5m", "phase": [text, "steady"]}, environ={}).load.phases
    from_env = resolve_config({"duration": "5m"}, environ={"SOAK_PHASE": f"{text}, steady"}).load.phases
    config_file = tmp_path / "soak.toml"
    config_file.write_text('duration = "5m"\n[[phase]]\nkind = "ramp"\nto_rate_rps = 8\nduration_s = "1m"\n'
                           '[[phase]]\nkind = "steady"\n')
    from_file = resolve_config({"config": str(config_file)}, environ={}).load.phases
    assert from_flag == from_env == from_file
    assert (from_flag[0].kind, from_flag[0].to_rate_rps, from_flag[0].duration_s) == ("ramp", 8, 60)
    with pytest.raises(ConfigError, match=r"phase\[0\]\.to_rate \(--phase\): Extra inputs"):
        resolve_config({"duration": "5m", "phase": ["ramp to_rate=8"]}, environ={})


def test_one_seed_drives_the_reference_server_unless_it_has_its_own(tmp_path):
    config_file = tmp_path / "soak.toml"
    config_file.write_text('duration = "5m"\nseed = 7\n')
    assert resolve_config({"config": str(config_file)}, environ={}).target.reference_seed == 7
    config = resolve_config({"config": str(config_file), "reference_seed": 2}, environ={})
    assert (config.load.seed, config.target.reference_seed) == (7, 2)


def test_an_empty_environment_means_no_soak_config(tmp_path, monkeypatch):
    config_file = tmp_path / "soak.toml"
    config_file.write_text('duration = "5m"\nrate = 9\n')
    monkeypatch.setenv("SOAK_CONFIG", str(config_file))
    assert resolve_config({"duration": "5m"}, environ={}).load.rate_rps == 2.0
    assert resolve_config({}).load.rate_rps == 9.0


def test_canary_every_is_a_setting_again(tmp_path):
    # It was a key read by nothing; the golden-output canary now reads it (docs/settings.md).
    config_file = tmp_path / "soak.toml"
    config_file.write_text('duration = "5m"\ncanary-every = "1m"\n')
    assert resolve_config({"config": str(config_file)}, environ={}).load.canary_every_s == 60.0

