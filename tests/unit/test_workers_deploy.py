"""The worker Job in docs/deploy runs `soak worker` with options the command has, against the master's Service."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from soak.cli import main

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy"


def _documents() -> dict[str, dict]:
    yaml = pytest.importorskip("yaml")
    return {doc["kind"]: doc for doc in yaml.safe_load_all((DEPLOY / "k8s-workers-job.yaml").read_text())}


def test_the_job_runs_soak_worker_against_the_masters_service():
    docs = _documents()
    job, service = docs["Job"], docs["Service"]
    assert job["spec"]["parallelism"] == job["spec"]["completions"]
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["soak", "worker"]
    master = next(arg for arg in container["args"] if arg.startswith("--master="))
    host, port = master.removeprefix("--master=").split(":")
    assert host == service["metadata"]["name"] and int(port) == service["spec"]["ports"][0]["port"]
    options = {arg.split("=")[0] for arg in container["args"]}
    help_text = CliRunner().invoke(main, ["worker", "--help"]).output
    assert all(option in help_text for option in options)


def test_only_the_workers_may_reach_the_master():
    docs = _documents()
    policy, pod_labels = docs["NetworkPolicy"], docs["Job"]["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/component": "soak-master"}
    [rule] = policy["spec"]["ingress"]
    [source] = rule["from"]
    assert source["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert docs["Service"]["spec"]["selector"]["app.kubernetes.io/component"] == "soak-master"
