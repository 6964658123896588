"""Reading commands pointed at a folder without runs say so and leave no database behind."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from soak.cli import main

LISTING = [["runs"], ["runs", "--json"], ["history"], ["schedule", "list"], ["schedule", "events"],
           ["prune", "--older-than", "90d"]]
NEEDING_A_RUN = [["status"], ["report", "r1"], ["close", "r1"], ["compare", "r1", "r2"], ["export", "r1"]]


def _invoke(tmp_path, args: list[str]):
    return CliRunner().invoke(main, [*args, "--out", str(tmp_path / "runs")], catch_exceptions=False)


@pytest.mark.parametrize("args", LISTING, ids=" ".join)
def test_listing_an_empty_folder_lists_nothing_and_creates_nothing(tmp_path, args):
    result = _invoke(tmp_path, args)
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "runs" / "soak.db").exists()
    if "--json" in args:
        assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("args", NEEDING_A_RUN, ids=" ".join)
def test_a_command_that_needs_a_run_names_the_missing_database(tmp_path, args):
    result = _invoke(tmp_path, args)
    assert result.exit_code == 2
    assert f"no database at {tmp_path / 'runs' / 'soak.db'}" in result.output
    assert not (tmp_path / "runs" / "soak.db").exists()


def test_adding_a_schedule_creates_the_database(tmp_path):
    args = ["schedule", "add", "nightly", "--cron", "0 2 * * *", "--out", str(tmp_path / "runs"), "--", "--minutes", "5"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / "soak.db").exists()
