"""A server that logs its refusals loudly (`--log-refusals`, as vLLM 0.21 does for an image sent to a text-only
model): what it writes answering soak's capability probes is the probes' answer, and a traceback of its own — a
refusal soak did not ask for — still counts."""

from __future__ import annotations

import pytest
from refserver_helpers import wait_until

from soak.run.capabilities import MixCheck
from soak.target.capabilities import probe_capabilities
from soak.telemetry.server_log import scanner_for_run
from support.collector import Collector

pytestmark = pytest.mark.timeout(120)


def test_the_probes_logged_refusals_are_their_answers_and_a_traceback_of_the_servers_own_still_counts(
        start_refserver):
    server = start_refserver("--no-images", "--no-tools", "--log-refusals")
    found = probe_capabilities(server.url, "soak-reference", {}, 30.0, server.stderr_path)
    assert (found["images"].supported, found["tools"].supported, found["json_schema"].supported) == (False, False, True)
    provoked = MixCheck(config=None, found=found).provoked()
    assert sorted(exchange.what for exchange in provoked) == ["capability probe images", "capability probe tools"]
    assert server.stderr().count("Traceback (most recent call last)") == 2  # the server did log both refusals
    events = Collector()
    scanner = scanner_for_run(None, server.stderr_path, events, provoked)  # a managed log: read from its start
    scanner.poll()
    assert server.chat(model="no-such-model").status_code == 404  # a refusal nobody provoked on purpose
    wait_until(lambda: server.stderr().count("Traceback (most recent call last)") == 3, timeout_s=30)
    scanner.close()
    answers = events.events_of("server_log_provoked")
    assert sorted(data["answer_to"] for data in answers) == ["capability probe images", "capability probe tools"]
    assert {data["request_id"] for data in answers} == {found["images"].request_id, found["tools"].request_id}
    [own] = events.events_of("server_log_error")
    assert own["class"] == "traceback" and "no-such-model" in own["exception"]
    assert events.events_of("server_log_scanned")[-1]["provoked"] == 2
