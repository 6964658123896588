"""The report's "Server capabilities": each feature's answer from the run's `capabilities` event, and the
scenarios dropped for what the server refused."""

from __future__ import annotations

from soak.report.sections import capability_facts
from support.records import stored_event

DATA = {"features": {
    "adapters": {"supported": False, "answer": "no adapter listed by /v1/models", "names": []},
    "tools": {"supported": True, "answer": "HTTP 200", "names": []},
    "images": {"supported": False, "answer": "HTTP 400: text-only model", "names": []},
    "json_schema": {"supported": None, "answer": "no answer: timed out", "names": []}},
    "dropped": [{"scenario": "multimodal", "feature": "images", "answer": "HTTP 400: text-only model"}]}


def test_each_feature_reads_as_what_the_server_answered():
    facts = capability_facts([stored_event(0.0, "server_start"), stored_event(0.0, "capabilities", DATA)])
    assert [(row["feature"], row["verdict"]) for row in facts["features"]] == [
        ("adapters", "none listed"), ("tools", "accepted"), ("images", "refused"), ("json_schema", "could not tell")]
    assert facts["dropped"] == DATA["dropped"]


def test_a_run_recorded_before_soak_asked_has_no_section():
    assert capability_facts([stored_event(0.0, "server_start")]) is None
