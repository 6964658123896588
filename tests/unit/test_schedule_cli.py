"""`soak schedule` and `soak daemon` as commands: one clear line and exit 2 for anything invalid."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from soak.cli import SoakGroup
from soak.cli.schedule import daemon, schedule

pytestmark = pytest.mark.timeout(60)

START = ["--", "--target", "http://127.0.0.1:9", "--duration", "20s"]


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.delenv("SOAK_DB", raising=False)
    monkeypatch.setenv("SOAK_OUT", str(tmp_path / "out"))
    root = SoakGroup(name="soak")
    root.add_command(schedule)
    root.add_command(daemon)
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(root, list(args))

    return invoke


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("soak: error:")]


@pytest.mark.parametrize("args, fragment", [
    (["--cron", "0 20 * * FRX", *START], "invalid cron expression '0 20 * * FRX'"),
    (["--cron", "0 20 * *", *START], "expected 5 fields"),
    (["--cron", "0 20 * * 5", "--timezone", "Atlantis/Capital", *START], "unknown time zone"),
    (["--cron", "0 20 * * 5", "--", "--duration", "20s", "--bogus"], "No such option '--bogus'"),
    (["--cron", "0 20 * * 5", "--", "--target", "http://127.0.0.1:9"], "no duration"),
    (["--cron", "0 20 * * 5", "--", "--duration", "20s", "--out", "x"], "--out is not a start argument"),
    (["--cron", "0 20 * * 5", "--misfire-grace", "soon", *START], "malformed duration"),
])
def test_add_refuses_with_one_line_and_exit_2(cli, args, fragment):
    result = cli("schedule", "add", "weekend", *args)
    assert result.exit_code == 2, result.output
    [line] = error_lines(result)
    assert fragment in line
    assert json.loads(cli("schedule", "list", "--json").stdout) == []


def test_add_list_pause_resume_remove(cli):
    added = cli("schedule", "add", "weekend", "--cron", "0 20 * * FRI", "--timezone", "UTC", "--json", *START)
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout)["next_fire_at"].endswith("20:00:00+00:00")
    assert "no soak daemon is running" in added.stderr
    [listed] = json.loads(cli("schedule", "list", "--json").stdout)
    assert listed["name"] == "weekend" and listed["start_args"] == START[1:]
    assert "weekend" in cli("schedule", "list").stdout
    assert cli("schedule", "pause", "weekend").exit_code == 0
    assert json.loads(cli("schedule", "list", "--json").stdout)[0]["paused"]
    assert cli("schedule", "resume", "weekend").exit_code == 0
    queued = cli("schedule", "run-now", "weekend")
    assert queued.exit_code == 0 and "no soak daemon is running" in queued.stderr
    assert cli("schedule", "remove", "weekend").exit_code == 0
    assert json.loads(cli("schedule", "list", "--json").stdout) == []


def test_start_arguments_also_work_without_the_separator(cli):
    result = cli("schedule", "add", "nightly", "--cron", "@daily", "--target", "http://127.0.0.1:9",
                 "--duration", "1h", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["start_args"] == ["--target", "http://127.0.0.1:9", "--duration", "1h"]


@pytest.mark.parametrize("command", ["remove", "pause", "resume", "run-now"])
def test_unknown_schedule_is_exit_2(cli, command):
    result = cli("schedule", command, "nope")
    assert result.exit_code == 2
    assert error_lines(result) == ["soak: error: unknown schedule 'nope'"]


def test_notify_variable_is_named_never_resolved(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("SOAK_TEST_HOOK", "https://hooks.example/T0/SECRET-TOKEN")
    result = cli("schedule", "add", "weekend", "--cron", "0 20 * * 5", "--notify-env", "SOAK_TEST_HOOK", "--json",
                 *START)
    assert result.exit_code == 0, result.output
    assert "SECRET-TOKEN" not in result.output
    assert "SECRET-TOKEN" not in cli("schedule", "list", "--json").stdout
    for stored in (tmp_path / "out").glob("soak.db*"):  # the job's pickle included
        assert b"SECRET-TOKEN" not in stored.read_bytes()


def test_events_command(cli):
    cli("schedule", "add", "weekend", "--cron", "0 20 * * 5", *START)
    result = cli("schedule", "events", "weekend", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []
