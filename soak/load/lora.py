"""LoRA adapters: loaded at start, spread over by the `lora` scenario, and churned (unloaded and reloaded) on a
schedule while the load runs.

vLLM loads and unloads adapters at run time through `POST /v1/load_lora_adapter {"lora_name", "lora_path"}` and
`POST /v1/unload_lora_adapter {"lora_name"}` (it needs `--enable-lora` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`).

The churn schedule is anchored to the wall clock, not to the run: cycle k falls at k × every (epoch seconds) and
unloads then reloads adapter k mod N. So every load process — the local one and `soak worker`s on other hosts —
knows from the config alone which adapter is being cycled, and the `lora` scenario keeps its requests off that
adapter for `quiet_s` either side of its cycle: a healthy server is never asked for an adapter soak itself has
just unloaded. Each load and unload is a run event (`lora_load`, `lora_unload`; `lora_error` with the server's
answer when one fails: the run goes on).
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import gevent
from gevent.event import Event as GeventEvent

from soak.config import LoadSettings, LoraAdapter, RunConfig
from soak.contracts import EventKind, EventSink
from soak.errors import ConfigError, TargetError

log = logging.getLogger(__name__)

QUIET_MAX_S = 30.0  # an adapter is kept out of the traffic at most this long either side of its cycle
ADAPTER_TIMEOUT_S = 120.0  # a load reads the adapter's weights from disk
ANSWER_CHARS = 300
LORA_SCENARIO = "lora"
SERVER_NEEDS = ("a vLLM needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its environment to load "
                "adapters at run time")


@dataclass(frozen=True)
class ChurnSchedule:
    """Which adapter is cycled when: cycle k at k × `every_s` epoch seconds, adapter k mod N."""

    adapters: tuple[str, ...]
    every_s: float

    @property
    def quiet_s(self) -> float:
        """How long either side of its cycle an adapter gets no requests: a quarter period, at most 30 s."""
        return min(QUIET_MAX_S, self.every_s / 4)

    def adapter_of(self, cycle: int) -> str:
        return self.adapters[cycle % len(self.adapters)]

    def next_cycle(self, now: float) -> tuple[int, float]:
        """(cycle number, epoch time) of the first cycle after `now`."""
        cycle = math.floor(now / self.every_s) + 1
        return cycle, cycle * self.every_s

    def resting(self, now: float) -> str | None:
        """The adapter kept out of the traffic at `now` (within `quiet_s` of its cycle), None if none is."""
        cycle = round(now / self.every_s)
        return self.adapter_of(cycle) if abs(now - cycle * self.every_s) <= self.quiet_s else None


def churn_schedule(adapters: Sequence[str], every_s: float | None) -> ChurnSchedule | None:
    """The schedule of a run, None without churn (no --lora-churn-every, or no adapter)."""
    return ChurnSchedule(tuple(adapters), every_s) if every_s and adapters else None


def zipf_weights(count: int, exponent: float) -> list[float]:
    """Weights of ranks 1…count: 1/r^s (s = 0: all equal)."""
    return [1.0 / rank**exponent for rank in range(1, count + 1)]


def pick_adapter(rng: random.Random, adapters: Sequence[str], exponent: float, avoid: str | None = None
                 ) -> str | None:
    """An adapter drawn by Zipf rank (the first the most), never `avoid`; None when none is left."""
    weights = zipf_weights(len(adapters), exponent)
    pairs = [(name, weight) for name, weight in zip(adapters, weights) if name != avoid]
    if not pairs:
        return None
    return rng.choices([name for name, _ in pairs], weights=[weight for _, weight in pairs])[0]


def check_lora(scenarios: Sequence[str], load: LoadSettings) -> None:
    """ConfigError before anything starts: the lora scenario, or churn, without an adapter to use."""
    if load.loras:
        return
    if LORA_SCENARIO in scenarios:
        raise ConfigError("the lora scenario needs at least one --lora NAME=PATH (an adapter on the server's host)")
    if load.lora_churn_every_s:
        raise ConfigError("--lora-churn-every needs at least one --lora NAME=PATH to unload and reload")


# -- the server's endpoints -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AdapterReply:
    """What the server answered to a load or unload: HTTP status (None: no answer) and its text, on one line."""

    status: int | None
    answer: str
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.status == 200

    def describe(self) -> str:
        return f"HTTP {self.status}: {self.answer}" if self.status is not None else f"no answer: {self.answer}"


def _one_line(raw: bytes) -> str:
    """The server's message (OpenAI's `error.message`, else the body) on one short line."""
    text = raw.decode("utf-8", "replace")
    try:
        error = json.loads(text).get("error")
        text = error.get("message", text) if isinstance(error, dict) else text
    except (ValueError, AttributeError):
        pass
    line = " ".join(str(text).split())
    return line[:ANSWER_CHARS] + ("…" if len(line) > ANSWER_CHARS else "")


def post_adapter(base_url: str, path: str, body: dict, headers: dict[str, str],
                 timeout_s: float = ADAPTER_TIMEOUT_S) -> AdapterReply:
    """POST a load or unload body; never raises."""
    request = urllib.request.Request(base_url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={**headers, "Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return AdapterReply(response.status, _one_line(response.read()), time.monotonic() - started)
    except urllib.error.HTTPError as exc:
        return AdapterReply(exc.code, _one_line(exc.read()), time.monotonic() - started)
    except (OSError, ValueError) as exc:
        return AdapterReply(None, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}", time.monotonic() - started)


def load_adapter(base_url: str, adapter: LoraAdapter, headers: dict[str, str]) -> AdapterReply:
    return post_adapter(base_url, "/v1/load_lora_adapter", {"lora_name": adapter.name, "lora_path": adapter.path},
                        headers)


def unload_adapter(base_url: str, adapter: LoraAdapter, headers: dict[str, str]) -> AdapterReply:
    return post_adapter(base_url, "/v1/unload_lora_adapter", {"lora_name": adapter.name}, headers)


def load_at_start(config: RunConfig, base_url: str, listed: Sequence[str], headers: dict[str, str]
                  ) -> list[tuple[LoraAdapter, AdapterReply]]:
    """Load every --lora adapter the server does not list yet; TargetError with the server's answer when one
    fails (nothing was run). Returns each adapter loaded with the server's reply."""
    loaded = []
    for adapter in config.load.loras:
        if adapter.name in listed:
            continue
        reply = load_adapter(base_url, adapter, headers)
        if not reply.ok:
            raise TargetError(f"could not load LoRA adapter {adapter.name} from {adapter.path}: {reply.describe()} "
                              f"({SERVER_NEEDS}); nothing was run")
        loaded.append((adapter, reply))
    return loaded


def record_reply(recorder: EventSink, action: str, adapter: LoraAdapter, reply: AdapterReply,
                 cycle: int | None = None) -> bool:
    """One `lora_load` or `lora_unload` event, or `lora_error` with the server's answer; True if it succeeded.
    `cycle` is the churn cycle (None: a load at start or after a restart, no part of the churn)."""
    data = {"adapter": adapter.name, "path": adapter.path, "cycle": cycle, "action": action,
            "status": reply.status, "answer": reply.answer, "elapsed_s": round(reply.elapsed_s, 4)}
    if not reply.ok:
        recorder.event(EventKind.LORA_ERROR, f"{action} of LoRA adapter {adapter.name} failed: {reply.describe()}",
                       data)
    elif action == "load":
        recorder.event(EventKind.LORA_LOAD, f"LoRA adapter {adapter.name} loaded ({reply.elapsed_s:.2f}s)", data)
    else:
        recorder.event(EventKind.LORA_UNLOAD, f"LoRA adapter {adapter.name} unloaded", data)
    return reply.ok


def reload_adapters(adapters: Sequence[LoraAdapter], base_url: str, headers: dict[str, str],
                    recorder: EventSink) -> None:
    """After a server restart, which forgets the adapters loaded at run time: load each again, as events."""
    for adapter in adapters:
        record_reply(recorder, "load", adapter, load_adapter(base_url, adapter, headers))


# -- the churn loop -------------------------------------------------------------------------------------------
class LoraChurn:
    """Unloads and reloads one adapter at each cycle of the schedule, recording each step as an event."""

    def __init__(self, schedule: ChurnSchedule, adapters: Sequence[LoraAdapter], base_url: Callable[[], str],
                 headers: dict[str, str], recorder: EventSink) -> None:
        self.schedule = schedule
        self.adapters = {adapter.name: adapter for adapter in adapters}
        self.base_url = base_url
        self.headers = headers
        self.recorder = recorder
        self.cycles = 0
        self._stop = GeventEvent()
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> LoraChurn:
        self._greenlet = gevent.spawn(self._run)
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._greenlet is not None:
            self._greenlet.join(timeout=ADAPTER_TIMEOUT_S)

    def _run(self) -> None:
        while not self._stop.is_set():
            cycle, at = self.schedule.next_cycle(time.time())
            if self._stop.wait(max(at - time.time(), 0.0)):
                return
            try:
                self.cycle(cycle)
            except Exception:  # a bug here must not end the run
                log.exception("lora churn cycle %d failed", cycle)

    def cycle(self, cycle: int) -> bool:
        """Unload the cycle's adapter, then load it again; True when both succeeded."""
        adapter = self.adapters[self.schedule.adapter_of(cycle)]
        unloaded = self._record("unload", adapter, cycle, unload_adapter(self.base_url(), adapter, self.headers))
        loaded = self._record("load", adapter, cycle, load_adapter(self.base_url(), adapter, self.headers))
        self.cycles += 1
        return unloaded and loaded

    def _record(self, action: str, adapter: LoraAdapter, cycle: int, reply: AdapterReply) -> bool:
        return record_reply(self.recorder, action, adapter, reply, cycle)



def start_churn(config: RunConfig, base_url: Callable[[], str], headers: dict[str, str],
                recorder: EventSink) -> LoraChurn | None:
    """The churn loop of a run, started; None without --lora-churn-every."""
    load = config.load
    schedule = churn_schedule([adapter.name for adapter in load.loras], load.lora_churn_every_s)
    if schedule is None:
        return None
    return LoraChurn(schedule, load.loras, base_url, headers, recorder).start()
