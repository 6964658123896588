"""Every command finds the output folder and database the same way: flags > SOAK_* > the TOML file > defaults."""

from __future__ import annotations

import json
import pathlib
import time
from datetime import UTC, datetime

import click
import pytest
from click.testing import CliRunner
from sqlalchemy import insert

from soak.cli import main
from soak.store import Store
from soak.store.models import Run

pytestmark = pytest.mark.timeout(120)

RUN_ID = "20260101T000000Z-c0f1"


@pytest.fixture
def here(tmp_path, monkeypatch):
    """An empty working directory and no SOAK_* locations from the outer environment."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    for name in ("SOAK_OUT", "SOAK_DB", "SOAK_CONFIG", "SOAK_VLLM_BIN"):
        monkeypatch.delenv(name, raising=False)
    return cwd


@pytest.fixture
def configured(tmp_path):
    """A TOML file naming its own database and output folder, and a finished run stored in that database."""
    out, db_path = tmp_path / "from-file-out", tmp_path / "elsewhere" / "runs.db"
    config = tmp_path / "soak.toml"
    config.write_text(f'duration = "1m"\nrate = 2\nout = "{out}"\ndb = "sqlite:///{db_path}"\n')
    store = Store.open(f"sqlite:///{db_path}")
    now = datetime.now(UTC).isoformat()
    with store.engine.begin() as connection:
        connection.execute(insert(Run), [{
            "id": RUN_ID, "status": "completed", "started_at": now, "ended_at": now, "t0_epoch_s": time.time() - 60,
            "planned_duration_s": 60, "duration_s": 60, "warmup_s": 10, "window_s": 5,
            "out_dir": str(out / RUN_ID), "target_kind": "reference", "config_json": "{}",
            "environment_json": "{}"}])
    store.engine.dispose()
    return {"config": config, "out": out, "db_path": db_path}


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_soak_config_database_is_read_by_runs_status_and_report(here, configured):
    env = {"SOAK_CONFIG": str(configured["config"])}
    listed = invoke("runs", "--json", env=env)
    assert listed.exit_code == 0, listed.output
    assert [run["id"] for run in json.loads(listed.output)] == [RUN_ID]
    shown = invoke("status", RUN_ID, "--json", env=env)
    assert shown.exit_code == 0, shown.output
    rebuilt = invoke("report", RUN_ID, env=env)
    assert rebuilt.exit_code == 0, rebuilt.output
    assert (configured["out"] / RUN_ID / "report.html").is_file()
    assert list(here.iterdir()) == []  # no ./soak-runs/soak.db made on the side


def test_config_flag_is_read_by_every_reading_command(here, configured):
    config = str(configured["config"])
    for args in (["runs", "--json"], ["status", "--json"], ["report", RUN_ID, "--json"],
                 ["compare", RUN_ID, RUN_ID, "--json"], ["schedule", "list", "--json"],
                 ["schedule", "events", "--json"]):
        result = invoke(*args, "--config", config)
        assert result.exit_code == 0, (args, result.output)
    assert list(here.iterdir()) == []


def test_flags_beat_the_environment_which_beats_the_file(here, configured, tmp_path):
    other = tmp_path / "other-out"
    env = {"SOAK_CONFIG": str(configured["config"]), "SOAK_DB": f"sqlite:///{other / 'env.db'}"}
    result = invoke("runs", "--out", str(other), env=env)
    assert result.exit_code == 0, result.output  # SOAK_DB, not the file's db, which holds a run
    assert f"no runs yet: there is no database at sqlite:///{other / 'env.db'}" in result.stderr
    assert not (other / "env.db").exists()  # reading never creates one


def _walk(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _walk(command, prefix + (name,))
        elif name not in ("refserver", "worker") and prefix[:1] != ("model",):  # none of these touches runs
            if not command.hidden:  # `soak replica`, a fleet's child: its config, locations included, is a file
                yield prefix + (name,), command


COMMANDS = list(_walk(main))


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(path) for path, _ in COMMANDS])
def test_every_command_takes_out_db_and_config(path, command):
    flags = {opt for param in command.params for opt in getattr(param, "opts", ())}
    assert {"--out", "--db", "--config"} <= flags, f"soak {' '.join(path)}"


def test_doctor_in_an_empty_folder_creates_nothing(here):
    result = invoke("doctor", "--json")
    assert result.exit_code in (0, 2), result.output
    database = next(c for c in json.loads(result.output)["checks"] if c["name"] == "database")
    assert database["status"] == "ok", database
    assert list(here.iterdir()) == []


def test_doctor_checks_the_database_the_config_file_names(here, configured):
    result = invoke("doctor", "--json", "--config", str(configured["config"]))
    database = next(c for c in json.loads(result.output)["checks"] if c["name"] == "database")
    assert str(configured["db_path"]) in database["detail"]
    assert list(here.iterdir()) == []


def test_compare_prints_a_table_of_two_finished_runs(here, configured):
    from sqlalchemy import update

    summary = json.loads((pathlib.Path(__file__).parent / "data" / "reference_run_summary.json").read_text())
    store = Store.open(f"sqlite:///{configured['db_path']}")
    with store.engine.begin() as connection:
        connection.execute(update(Run).values(summary_json=json.dumps(summary)))
    store.engine.dispose()
    result = invoke("compare", RUN_ID, RUN_ID, "--config", str(configured["config"]))
    assert result.exit_code == 0, result.output
    assert "latency.ttft.p99" in result.output and "within noise" in result.output
    assert ".count" not in result.output
