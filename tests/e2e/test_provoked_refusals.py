"""A finding is about the server, never about what soak did to it: a reference server that logs a traceback for
each refusal (`--log-refusals`, as vLLM 0.21 does, without the request's id) answers soak's image probe and the
`bad_input` scenario's deliberately bad requests so, and the run's `server.log_errors` still PASSes while the
capability report says images are refused; a traceback the server writes of its own (the planted
`log-engine-dead-after`) still FAILs it, beside the same refusals."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

LOUD_TEXT_ONLY = ["--reference-arg=--no-images", "--reference-arg=--log-refusals", "--scenario", "chat_short:2",
                  "--scenario", "bad_input:1"]
SHORT = ["start", "--duration", "8s", "--warmup", "2s", "--window", "2s", "--sample-every", "1s", "--rate", "3",
         "--no-idle-probes", "--canary-every", "0", "--json"]


def run(soak_cli, tmp_path, *extra: str) -> dict:
    result = soak_cli(*SHORT, *LOUD_TEXT_ONLY, *extra, "--out", str(tmp_path), timeout_s=100)
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    return json.loads(result.stdout)


def log_finding(summary: dict) -> dict:
    return next(f for f in summary["findings"] if f["check"] == "server.log_errors")


def test_the_tracebacks_a_server_logs_refusing_soaks_probes_are_their_answers_not_its_faults(soak_cli, tmp_path):
    summary = run(soak_cli, tmp_path)
    images = summary["capabilities"]["features"]["images"]
    assert images["supported"] is False and images["answer"].startswith("HTTP 400")
    assert images["logged"] and "text-only model" in images["logged"][0]  # the probe's answer, as the server logged it
    finding = log_finding(summary)
    assert finding["verdict"] == "PASS", finding["evidence"]
    assert "capability probe images" in finding["evidence"]
    assert "bad_input request expecting a refusal" in finding["evidence"]
    run_dir = next(path for path in tmp_path.iterdir() if path.is_dir())
    tracebacks = (run_dir / "server.log").read_text(errors="replace").count("Traceback (most recent call last)")
    provoked = finding["details"]["provoked_lines"]
    assert tracebacks >= 3 and provoked == tracebacks, (tracebacks, provoked)  # every one of them soak's doing


def test_a_traceback_the_server_writes_of_its_own_still_fails_the_check(soak_cli, tmp_path):
    summary = run(soak_cli, tmp_path, "--reference-fault", "log-engine-dead-after=3s")
    finding = log_finding(summary)
    assert finding["verdict"] == "FAIL" and "EngineDeadError" in json.dumps(finding["details"]), finding["evidence"]
    assert summary["capabilities"]["features"]["images"]["logged"]  # the probe's own lines stay its answer
