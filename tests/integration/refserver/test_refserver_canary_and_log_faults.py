"""The faults that prove the canary and the log scan: corrupt-after and log-engine-dead-after, on real servers."""

from __future__ import annotations

import pytest
from refserver_helpers import wait_until

from soak.contracts import ServerLogClass
from soak.load.canary import ask, first_difference
from soak.telemetry.server_log import scanner_for_run

pytestmark = pytest.mark.timeout(120)


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, dict]] = []

    def event(self, kind, message="", data=None):
        self.recorded.append((str(kind), data or {}))


def canary_text(server) -> str:
    answer = ask(server.url, "soak-reference", {}, timeout_s=30.0)
    assert answer.error is None and answer.text, answer
    return answer.text


def test_a_canary_the_server_refuses_is_its_refusal_and_the_log_scan_excuses_what_it_logged(start_refserver):
    server = start_refserver("--log-refusals")
    assert ask(server.url, "soak-reference", {}, timeout_s=30.0).refusal is None
    events = Events()
    scanner = scanner_for_run(None, server.stderr_path, events)  # a managed log: read from its start
    refused = ask(server.url, "soak-no-such-model", {}, timeout_s=30.0)
    assert refused.text is None and refused.error == "HTTP 404: The model `soak-no-such-model` does not exist."
    refusal = refused.refusal
    assert refusal.request_id.startswith("soak-canary-golden-") and refusal.message in refused.error
    scanner.provoke(refusal)
    wait_until(lambda: "Traceback (most recent call last)" in server.stderr(), 30, what="the logged refusal")
    scanner.close()
    kinds = [kind for kind, _ in events.recorded]
    assert "server_log_provoked" in kinds and "server_log_error" not in kinds, events.recorded


def test_the_canary_answer_is_the_same_every_time_and_on_every_start(start_refserver):
    first, second = start_refserver(), start_refserver()
    text = canary_text(first)
    first.chat("some other load", max_tokens=16)
    assert canary_text(first) == text == canary_text(second)


def test_corrupt_after_changes_every_answer_once_n_requests_finished(start_refserver):
    clean = canary_text(start_refserver())
    server = start_refserver("--fault", "corrupt-after=2")
    assert canary_text(server) == clean  # the first request: nothing finished yet
    server.chat("x", max_tokens=2)
    corrupted = canary_text(server)
    assert corrupted != clean and first_difference(clean, corrupted)["offset"] == 0
    assert server.debug()["corrupting"] is True and server.get("/health").status_code == 200


def test_log_engine_dead_after_writes_a_fatal_traceback_and_keeps_serving(start_refserver):
    server = start_refserver("--fault", "log-engine-dead-after=1s")
    events = Events()
    scanner = scanner_for_run(None, server.stderr_path, events)
    wait_until(lambda: "EngineDeadError" in server.stderr(), timeout_s=30)
    scanner.close()
    found = [data for kind, data in events.recorded if kind == "server_log_error"]
    assert {data["class"] for data in found} >= {ServerLogClass.FATAL, ServerLogClass.ENGINE_DEAD,
                                                  ServerLogClass.TRACEBACK}
    traceback = next(data for data in found if data["class"] == ServerLogClass.TRACEBACK)
    assert traceback["exception"].startswith("soak.refserver.EngineDeadError:")
    assert server.chat("still here", max_tokens=4).status_code == 200
