"""The vLLM target's server.log is what the log scan reads: a clean start matches nothing, a planted engine death
and a crash's CUDA error are found (the stand-in `vllm` in front of the real reference server)."""

from __future__ import annotations

import pytest
from vllm_helpers import poll_until

from soak.target import make_target
from soak.telemetry.server_log import scanner_for_run

pytestmark = pytest.mark.timeout(90)


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, dict]] = []

    def event(self, kind, message="", data=None):
        self.recorded.append((str(kind), data or {}))

    def classes(self) -> set[str]:
        return {data["class"] for kind, data in self.recorded if kind == "server_log_error"}


def test_a_planted_engine_death_in_the_vllm_log_is_found(vllm_config, tmp_path, targets, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_BACKEND", "refserver")
    monkeypatch.setenv("FAKE_VLLM_REFSERVER_ARGS", "--fault log-engine-dead-after=2s")
    target = make_target(vllm_config(), tmp_path / "run")
    targets.append(target)
    info = target.start()
    events = Events()
    scanner = scanner_for_run(None, info.log_path, events)
    scanner.poll()
    assert events.classes() == set(), "a clean start (argv line, READY, separator) matches nothing"
    assert poll_until(lambda: "EngineDeadError" in target.log_tail(), 20)
    scanner.close()
    assert {"fatal", "engine_dead", "traceback"} <= events.classes()


def test_a_crash_line_in_the_vllm_log_is_a_cuda_error(vllm_config, tmp_path, targets, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_MODE", "crash_after=0.5")
    target = make_target(vllm_config(), tmp_path / "run")
    targets.append(target)
    info = target.start()
    events = Events()
    scanner = scanner_for_run(None, info.log_path, events)
    assert poll_until(lambda: target.exit_code() is not None, 20)
    scanner.close()
    assert events.classes() == {"cuda_error"}
