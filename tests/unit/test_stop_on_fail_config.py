"""--stop-on-fail is one row of the settings table: a flag, SOAK_STOP_ON_FAIL and a TOML key, and a schedule's
start arguments may carry it (the daemon passes them to `soak start` as they were stored)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from soak.cli import SoakGroup
from soak.cli.schedule import schedule, validate_start_args
from soak.config import resolve_config

BASE = ["--target", "http://127.0.0.1:9", "--duration", "1h"]


def test_the_flag_the_variable_and_the_file_each_turn_it_on(tmp_path):
    assert validate_start_args([*BASE, "--stop-on-fail"]).stop_on_fail is True
    assert validate_start_args(BASE).stop_on_fail is False
    env = {"SOAK_STOP_ON_FAIL": "true", "SOAK_OUT": str(tmp_path)}
    assert resolve_config({"duration": "1h"}, env).stop_on_fail is True
    config_file = tmp_path / "soak.toml"
    config_file.write_text('duration = "1h"\nstop-on-fail = true\n', encoding="utf-8")
    assert resolve_config({"config": str(config_file)}, {"SOAK_OUT": str(tmp_path)}).stop_on_fail is True


def test_a_schedule_stores_it_with_its_start_arguments(tmp_path, monkeypatch):
    monkeypatch.delenv("SOAK_DB", raising=False)
    monkeypatch.setenv("SOAK_OUT", str(tmp_path / "out"))
    root = SoakGroup(name="soak")
    root.add_command(schedule)
    runner = CliRunner()
    added = runner.invoke(root, ["schedule", "add", "nightly", "--cron", "0 2 * * *", "--", *BASE, "--stop-on-fail"])
    assert added.exit_code == 0, added.output
    [stored] = json.loads(runner.invoke(root, ["schedule", "list", "--json"]).stdout)
    assert stored["start_args"][-1] == "--stop-on-fail"
    assert validate_start_args(stored["start_args"]).stop_on_fail is True


def test_it_windows_the_run_six_times_finer_unless_a_window_is_given():
    plain = validate_start_args(["--target", "http://127.0.0.1:9", "--duration", "24h", "--warmup", "0s"])
    stopping = validate_start_args(["--target", "http://127.0.0.1:9", "--duration", "24h", "--warmup", "0s",
                                    "--stop-on-fail"])
    assert plain.window_s == 1800.0 and stopping.window_s == 300.0
    given = validate_start_args([*BASE, "--stop-on-fail", "--window", "2m"])
    assert given.window_s == 120.0
