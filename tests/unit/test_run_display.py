"""Small display promises: a running run's duration so far, and a run log without scheduler noise."""

import logging
from datetime import UTC, datetime, timedelta

from soak.cli.runs import _duration_text
from soak.run.conductor import setup_run_logging
from support.records import stored_run


def test_a_running_run_shows_how_long_it_has_run():
    started = (datetime.now(UTC) - timedelta(minutes=12)).isoformat()
    text = _duration_text(stored_run(status="running", started_at=started))
    assert text == "12m so far"


def test_a_finished_run_shows_its_duration():
    assert "so far" not in _duration_text(stored_run(status="finished", duration_s=90.0))


def test_run_log_leaves_out_the_schedulers_running_job_lines(tmp_path):
    handler = setup_run_logging(tmp_path)
    try:
        logging.getLogger("apscheduler.executors.default").info('Running job "sample (trigger: interval)"')
        logging.getLogger("soak.run").info("a line of soak's own")
        logging.getLogger("apscheduler.scheduler").warning("Run time of job was missed by 0:00:02")
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
        logging.getLogger("apscheduler").setLevel(logging.NOTSET)
    text = (tmp_path / "soak.log").read_text()
    assert "Running job" not in text and "a line of soak's own" in text and "was missed" in text
