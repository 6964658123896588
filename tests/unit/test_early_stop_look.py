"""A look as `soak start --stop-on-fail` runs it: a child process that reads the stored run and prints what it
found; one that cannot judge the run answers with an error, and the run goes on without that look."""

from __future__ import annotations

import logging
import subprocess
import sys

from soak.run.early_stop import DB_URL_ENV, read_look, start_look
from soak.store import Store


def test_a_look_at_a_run_the_database_does_not_hold_is_no_look(tmp_path, caplog):
    db_url = f"sqlite:///{tmp_path}/soak.db"
    Store.open(db_url)
    child = start_look(db_url, "20261203T000000Z-none", windows=20, looks=14, gates_file=None)
    child.wait(timeout=60)
    with caplog.at_level(logging.WARNING, logger="soak.run.early_stop"):
        assert read_look(child) is None
    assert "a look failed: UnknownRunError" in caplog.text


def test_a_database_it_cannot_read_is_an_error_answer_not_a_crash(tmp_path):
    result = subprocess.run([sys.executable, "-m", "soak.run.early_stop", "RUN", "20", "14"], capture_output=True,
                            text=True, timeout=60, env={"PATH": "", DB_URL_ENV: f"sqlite:///{tmp_path}/none/x.db"})
    assert result.returncode == 0 and result.stdout.startswith('{"error": ')
