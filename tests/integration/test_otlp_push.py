"""`soak start --otlp-endpoint` end to end: a real short run on the embedded reference server pushes to a real
OTLP/HTTP receiver (tests/support/otlp_receiver.py, a process of its own that decodes every protobuf body), and
what arrived is held against the run's summary.json. Then a receiver that refuses the first pushes: the run goes
on to its verdict, and the failures are counted and said."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from soak.metrics.catalog import VERDICT_VALUES
from support.otlp_receiver import otlp_receiver

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

SHORT_RUN = ("start", "--duration", "40s", "--warmup", "10s", "--window", "5s", "--sample-every", "1s", "--rate", "4",
             "--scenario", "chat_short", "--no-idle-probes", "--otlp-every", "2s", "--json")
TOKEN_ENV = {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20t0ken"}
VERDICT_EXIT = (0, 1, 3)  # PASS, FAIL, anything unsettled: a run that ended with its verdict


def run_with_receiver(tmp_path: Path, soak_cli, fail_first: int = 0) -> dict[str, Any]:
    """One short run pushing to a fresh receiver; the run's summary, stderr, folder and every push that came."""
    with otlp_receiver(tmp_path / "pushes.jsonl", fail_first=fail_first) as receiver:
        result = soak_cli(*SHORT_RUN, "--otlp-endpoint", receiver.endpoint, "--out", str(tmp_path / "runs"),
                          env=TOKEN_ENV, timeout_s=360)
        pushes = receiver.pushes()
    assert result.returncode in VERDICT_EXIT, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    return {"summary": summary, "stderr": result.stderr, "pushes": pushes, "endpoint": receiver.endpoint,
            "run_dir": tmp_path / "runs" / summary["run_id"]}


def metrics_of(push: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The push's metrics by name (one resource, one scope: soak's)."""
    (resource_metrics,) = push["request"]["resource_metrics"]
    (scope,) = resource_metrics["scope_metrics"]
    return {metric["name"]: metric for metric in scope["metrics"]}


def points(metric: dict[str, Any]) -> list[dict[str, Any]]:
    """Its data points, whatever kind of metric it is."""
    data = next(metric[kind] for kind in ("sum", "gauge", "histogram") if kind in metric)
    return data["data_points"]


def attributes(item: dict[str, Any]) -> dict[str, Any]:
    """A point's (or a resource's) attributes as {key: value}."""
    return {a["key"]: next(iter(a["value"].values()), None) for a in item.get("attributes", [])}


def total(metric: dict[str, Any]) -> float:
    """The sum of a counter's points."""
    return sum(point["as_double"] for point in points(metric))


@pytest.fixture(scope="module")
def pushed(tmp_path_factory, soak_cli) -> dict[str, Any]:
    return run_with_receiver(tmp_path_factory.mktemp("otlp"), soak_cli)


def test_every_push_came_to_v1_metrics_with_the_token(pushed):
    pushes = pushed["pushes"]
    assert len(pushes) >= 8, f"{len(pushes)} pushes in a 40 s run pushing every 2 s"
    for push in pushes:
        assert push["path"] == "/v1/metrics" and push["status"] == 200
        assert push["headers"]["authorization"] == "Bearer t0ken"
        assert push["headers"]["content-type"] == "application/x-protobuf"


def test_the_resource_names_the_run_and_its_target(pushed):
    summary, run_dir = pushed["summary"], pushed["run_dir"]
    on_disk = json.loads((run_dir / "summary.json").read_text())
    for push in pushed["pushes"]:
        (resource_metrics,) = push["request"]["resource_metrics"]
        resource = attributes(resource_metrics["resource"])
        assert resource["soak.run.id"] == summary["run_id"] == on_disk["run_id"]
        assert resource["soak.target"] == urlsplit(summary["target"]["url"]).netloc
        assert resource["service.name"] == "soak"


def test_the_genai_and_soak_series_carry_their_names_and_units(pushed):
    last = metrics_of(pushed["pushes"][-1])
    units = {name: last[name]["unit"] for name in ("gen_ai.client.operation.duration",
                                                   "gen_ai.client.operation.time_to_first_chunk",
                                                   "gen_ai.client.token.usage", "soak.requests")}
    assert units == {"gen_ai.client.operation.duration": "s", "gen_ai.client.operation.time_to_first_chunk": "s",
                     "gen_ai.client.token.usage": "{token}", "soak.requests": "{request}"}
    assert "histogram" in last["gen_ai.client.operation.duration"] and "sum" in last["soak.requests"]
    for point in points(last["gen_ai.client.operation.duration"]):
        assert len(point["bucket_counts"]) == len(point["explicit_bounds"]) + 1
        assert sum(int(count) for count in point["bucket_counts"]) == int(point["count"])


def test_the_last_push_counts_every_request_of_the_summary(pushed):
    summary, last = pushed["summary"], metrics_of(pushed["pushes"][-1])
    # summary.json's totals count every window, warm-up included (docs/summary.md); so does soak.requests
    assert total(last["soak.requests"]) == summary["totals"]["requests"] > 0
    errors = sum(point["as_double"] for point in points(last["soak.requests"])
                 if attributes(point)["soak.outcome"] == "error")
    assert errors == summary["totals"]["errors"]
    output = [p for p in points(last["gen_ai.client.token.usage"]) if attributes(p)["gen_ai.token.type"] == "output"]
    assert sum(point["sum"] for point in output) == summary["totals"]["output_tokens"]
    assert points(last["soak.run.finished"])[0]["as_double"] == 1.0  # pushed after the final verdicts


def test_the_last_push_has_a_verdict_point_per_check(pushed):
    summary, last = pushed["summary"], metrics_of(pushed["pushes"][-1])
    sent = {attributes(point)["soak.check"]: point["as_double"] for point in points(last["soak.check.verdict"])}
    assert sent == {finding["check"]: float(VERDICT_VALUES[finding["verdict"]]) for finding in summary["findings"]}


def test_the_pushes_are_cumulative_from_the_runs_start(pushed):
    requests = [metrics_of(push)["soak.requests"] for push in pushed["pushes"] if "soak.requests" in metrics_of(push)]
    totals = [total(metric) for metric in requests]
    assert totals == sorted(totals) and totals[0] < totals[-1]
    starts = {point["start_time_unix_nano"] for metric in requests for point in points(metric)}
    assert len(starts) == 1  # one start for the whole run: cumulative temporality
    assert all(metric["sum"]["aggregation_temporality"] == "AGGREGATION_TEMPORALITY_CUMULATIVE" for metric in requests)


def test_a_receiver_that_refuses_the_first_pushes_costs_the_run_nothing_but_a_count(tmp_path, soak_cli):
    refused = 4  # the exporter retries a 503 three times (1, 2, 4 s) within its 10 s; the 4th refusal fails the push
    pushed = run_with_receiver(tmp_path, soak_cli, fail_first=refused)
    summary, pushes = pushed["summary"], pushed["pushes"]
    assert summary["status"] == "completed" and summary["verdict"]
    assert [push["status"] for push in pushes[:refused]] == [503] * refused
    assert pushes[-1]["status"] == 200
    last = metrics_of(pushes[-1])
    failures = total(last["soak.otlp.export.failures"])
    assert 1 <= failures <= refused
    assert total(last["soak.requests"]) == summary["totals"]["requests"]
    log = (pushed["run_dir"] / "soak.log").read_text()
    said = [line for line in log.splitlines() if f"OTLP push to {pushed['endpoint']}/v1/metrics failed" in line]
    assert len(said) == 1 and "the run goes on" in said[0], said
    assert "Transient error" not in log.replace(said[0], "")  # the exporter's own retry lines stay out of the log
