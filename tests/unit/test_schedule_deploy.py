"""The deployment files say what docs/scheduling.md promises."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy"


def test_systemd_unit_gives_the_report_time_and_signals_the_daemon_alone():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(DEPLOY / "soak-daemon.service")
    service = unit["Service"]
    assert service["KillMode"] == "mixed"
    assert int(service["TimeoutStopSec"]) >= 120
    assert " daemon " in service["ExecStart"] and "--on-stop stop" in service["ExecStart"]
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_k8s_cronjob_runs_soak_start_and_forbids_overlap():
    yaml = pytest.importorskip("yaml")
    job = yaml.safe_load((DEPLOY / "k8s-cronjob.yaml").read_text())
    assert job["kind"] == "CronJob" and job["spec"]["concurrencyPolicy"] == "Forbid"
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["terminationGracePeriodSeconds"] >= 60
    [container] = pod["containers"]
    assert container["command"] == ["soak", "start"]
