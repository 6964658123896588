"""A run started under SOAK_CONFIG, whose file moves the output folder and the database, is found by the other
commands under the same SOAK_CONFIG, and nothing lands in the working directory."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_runs_and_report_follow_the_config_file(tmp_path, soak_cli):
    cwd, out, db_path = tmp_path / "cwd", tmp_path / "runs-from-file", tmp_path / "db-from-file" / "soak.db"
    cwd.mkdir()
    config = tmp_path / "soak.toml"
    config.write_text(f'duration = "40s"\nwarmup = "10s"\nwindow = "5s"\nsample-every = "1s"\nrate = 3\n'
                      f'idle-probe-every = "20s"\nidle-probe-for = "2s"\nout = "{out}"\ndb = "sqlite:///{db_path}"\n')
    env = {"SOAK_CONFIG": str(config), "SOAK_OUT": "", "SOAK_DB": ""}
    started = soak_cli("start", "--json", env=env, cwd=cwd, timeout_s=240)
    assert started.returncode in (0, 1, 3), started.stderr[-3000:]
    run_id = json.loads(started.stdout)["run_id"]
    assert db_path.is_file() and (out / run_id / "report.html").is_file()

    listed = soak_cli("runs", "--json", env=env, cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    assert [run["id"] for run in json.loads(listed.stdout)] == [run_id]
    report_html = out / run_id / "report.html"
    report_html.unlink()
    rebuilt = soak_cli("report", run_id, env=env, cwd=cwd)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert report_html.is_file()
    assert list(cwd.iterdir()) == []
