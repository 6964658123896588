"""Helpers for the load stage's integration tests: start the mock OpenAI server (a subprocess on 127.0.0.1,
port 0), run `start_load` for a few seconds and collect what the hooks saw, poll for a condition."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent

from soak.config import LoadSettings, RunConfig
from soak.load import LoadHooks, RequestRecord, start_load
from soak.load.health import LoadCounters

MOCK_PATH = Path(__file__).with_name("mockserver.py")
READY_TIMEOUT_S = 30.0
_tags = itertools.count()


@dataclass
class MockServer:
    """The running mock: its URL, and helpers to build a model name and read per-tag counts."""

    url: str
    process: subprocess.Popen

    def model(self, **params: Any) -> str:
        """`mock?…` with a fresh tag unless one is given, so each test counts only its own requests."""
        params.setdefault("tag", f"t{next(_tags)}-{time.monotonic_ns()}")
        return "mock?" + urllib.parse.urlencode(params)

    @staticmethod
    def tag_of(model: str) -> str:
        return dict(urllib.parse.parse_qsl(model.partition("?")[2]))["tag"]

    def stats(self, model_or_tag: str) -> dict[str, Any]:
        tag = self.tag_of(model_or_tag) if model_or_tag.startswith("mock") else model_or_tag
        with urllib.request.urlopen(f"{self.url}/_mock/stats?tag={urllib.parse.quote(tag)}", timeout=10) as resp:
            return json.loads(resp.read())


def start_mock(*args: str) -> MockServer:
    process = subprocess.Popen([sys.executable, str(MOCK_PATH), *args], stdout=subprocess.PIPE, text=True)
    with gevent.Timeout(READY_TIMEOUT_S, RuntimeError("mock server did not start")):
        line = process.stdout.readline()
    if not line.startswith("MOCK_READY "):
        process.kill()
        raise RuntimeError(f"mock server printed {line!r}")
    return MockServer(line.split()[1], process)


def make_config(duration_s: float, warmup_s: float = 0.0, **load: Any) -> RunConfig:
    """A RunConfig for a short run; idle probes off unless asked for."""
    load.setdefault("idle_probe_every_s", 0)
    load.setdefault("scenarios", ["chat_short"])
    return RunConfig(duration_s=duration_s, warmup_s=warmup_s, window_s=5.0, out_dir=Path("/tmp/soak-test-out"),
                     db_url="sqlite://", load=LoadSettings(**load))


@dataclass
class LoadRun:
    """What one short run produced."""

    handle: Any
    t0: float
    records: list[RequestRecord] = field(default_factory=list)
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    probes: list[tuple[int, bool, int, float]] = field(default_factory=list)
    counters: LoadCounters = field(default_factory=LoadCounters)

    def events_of(self, kind: str) -> list[dict[str, Any]]:
        return [data for k, _, data in self.events if k == kind]

    def by_time(self) -> list[RequestRecord]:
        return sorted(self.records, key=lambda r: r.intended_t)


def run_load(config: RunConfig, url: str, model: str, *, drain_timeout_s: float = 5.0,
             during: Any = None, t0: float | None = None) -> LoadRun:
    """Run load for the config's duration (calling `during(run)` once after start), stop, and collect."""
    t0 = time.time() if t0 is None else t0
    run = LoadRun(handle=None, t0=t0)

    def on_idle_probe(index: int, drained: bool) -> None:
        run.probes.append((index, drained, run.handle.in_flight, time.time()))

    hooks = LoadHooks(on_request=run.records.append, on_event=lambda k, m, d: run.events.append((k, m, d)),
                      on_idle_probe=on_idle_probe)
    run.handle = start_load(config, base_url=url, model=model, t0=t0, hooks=hooks)
    try:
        if during is not None:
            during(run)
        end_t = t0 + config.duration_s + 0.1  # a little past the end: the last arrival has been sent
        while time.time() < end_t:
            gevent.sleep(min(0.1, max(end_t - time.time(), 0)))
        run.counters = run.handle.counters()
    finally:
        run.handle.stop(drain_timeout_s)
    return run


def wait_for(condition, timeout_s: float, poll_s: float = 0.05) -> bool:
    """Poll `condition` until true or the deadline; the last answer."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        gevent.sleep(poll_s)
    return condition()


def scenario_instances(url: str, name: str, model: str, records: list, **settings: Any) -> list[Any]:
    """One started instance of each class of a scenario, recording into `records`, without a runner."""
    from locust.env import Environment

    from soak.config import ScenarioSpec
    from soak.load.scenarios import load_scenarios
    from soak.load.settings import ClientSettings

    [scenario] = load_scenarios([ScenarioSpec(name=name)])
    environment = Environment(host=url)
    settings.setdefault("request_timeout_s", 10.0)
    client_settings = ClientSettings(model=model, **settings)
    instances = []
    for cls in scenario.user_classes:
        instance = cls(environment, client_settings)
        instance.record_sink = records.append
        instance.on_start()
        instances.append(instance)
    return instances


def run_tasks(url: str, name: str, model: str, per_task: int = 3, **settings: Any) -> list[RequestRecord]:
    """Run every task of a scenario `per_task` times, one after another, as the dispatcher would."""
    import random

    from soak.load.client import Arrival, set_arrival

    records: list[RequestRecord] = []
    for instance in scenario_instances(url, name, model, records, **settings):
        for task in dict.fromkeys(type(instance).tasks):
            for index in range(per_task):
                set_arrival(Arrival(name, time.time(), random.Random(index)))
                try:
                    task(instance)
                finally:
                    set_arrival(None)
    return records
