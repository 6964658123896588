"""The faults themselves, planted in vLLM's engine process by wrapping a few methods of its V1 scheduler and engine
core (the classes are patched in every process vLLM loads plugins in, but these methods run in the EngineCore only).

Each fault wraps one method, checked at install: a vLLM without it stops at start with a one-line error naming the
method, rather than run a soak in which the fault was silently missing.

- `rss-leak=BYTES`: `Scheduler._free_request` (every finished request, aborted ones too) keeps BYTES allocated and
  written, so the EngineCore's resident memory grows.
- `kv-leak-on-abort[=N]`: `Scheduler._free_request_blocks`, for a request the client aborted, takes the request's
  KV blocks off its books without returning them to the block pool (or returns all but the last N).
- `hang-after=D`: `EngineCoreProc._process_engine_step`, D after the engine's first request, schedules the batch,
  publishes the scheduler's gauges (requests running) and never returns: no token is produced while `/health`
  stays 200, until the process is told to shut down.
- `garble-after=D`: `Scheduler.update_from_output`, D after the first request, flips the lowest bit of every
  generated token id on its way to the API server: answers keep coming at the usual pace, wrong.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from soak.vllm_plugin.spec import VllmFaults

log = logging.getLogger("vllm.soak_faults")  # under vLLM's logger, so the lines read like the rest of its log

SCHEDULER = ("vllm.v1.core.sched.scheduler", "Scheduler")
ENGINE_CORE = ("vllm.v1.engine.core", "EngineCoreProc")
KV_CACHE_MANAGER = ("vllm.v1.core.kv_cache_manager", "KVCacheManager")
PAGE_BYTES = 4096
HANG_POLL_S = 0.2
WRAPPED_MARK = "__soak_fault__"


class FaultError(RuntimeError):
    """vLLM lacks a method a fault wraps: the plugin cannot plant it."""


class FirstWorkClock:
    """Seconds since the engine first had a request to work on (faults with an `after` count from there, so a
    slow model load does not eat into them)."""

    def __init__(self) -> None:
        self._started: float | None = None
        self._lock = threading.Lock()

    def elapsed_s(self) -> float:
        with self._lock:
            if self._started is None:
                self._started = time.monotonic()
            return time.monotonic() - self._started

    def due(self, after_s: float | None) -> bool:
        return after_s is not None and self.elapsed_s() >= after_s


CLOCK = FirstWorkClock()
RETAINED: list[bytearray] = []  # what rss-leak keeps, for the life of the process


def seam(where: tuple[str, str], method: str, fault: str) -> type:
    """The class at `where` after checking it has `method`; FaultError naming both when it does not."""
    module_name, class_name = where
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise FaultError(f"--vllm-fault {fault}: this vLLM has no {module_name}.{class_name} ({exc})") from None
    if not callable(getattr(cls, method, None)):
        raise FaultError(f"--vllm-fault {fault}: this vLLM's {class_name} has no method {method}; "
                         "the fault cannot be planted in this version")
    return cls


def wrap(cls: type, method: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace `cls.method` by `make(original)`, once (a forked child inherits the patched class)."""
    original = getattr(cls, method)
    if getattr(original, WRAPPED_MARK, False):
        return
    wrapper = make(original)
    setattr(wrapper, WRAPPED_MARK, True)
    wrapper.__name__ = method
    setattr(cls, method, wrapper)


def written_bytes(size: int) -> bytearray:
    """`size` bytes allocated and written page by page, so they count in the resident set."""
    buffer = bytearray(size)
    buffer[::PAGE_BYTES] = b"\x5a" * len(range(0, size, PAGE_BYTES))
    return buffer


def plant_rss_leak(size: int) -> None:
    cls = seam(SCHEDULER, "_free_request", "rss-leak")

    def make(original):
        def _free_request(self, request, *args, **kwargs):
            result = original(self, request, *args, **kwargs)
            RETAINED.append(written_bytes(size))
            return result
        return _free_request

    wrap(cls, "_free_request", make)


def leak_blocks(manager: Any, request: Any, kept_blocks: int | None) -> None:
    """Take the request's KV blocks off the manager's books without returning them to the pool; with
    `kept_blocks`, only its last that many (the rest go back, tail first, as vLLM frees them)."""
    blocks = manager.pop_blocks_for_free(request)
    if kept_blocks is not None and len(blocks) > kept_blocks:
        manager.block_pool.free_blocks(reversed(blocks[:-kept_blocks]))


def plant_kv_leak(kept_blocks: int | None) -> None:
    cls = seam(SCHEDULER, "_free_request_blocks", "kv-leak-on-abort")
    seam(KV_CACHE_MANAGER, "pop_blocks_for_free", "kv-leak-on-abort")  # called on the scheduler's own manager
    from vllm.v1.request import RequestStatus

    aborted = RequestStatus.FINISHED_ABORTED

    def make(original):
        def _free_request_blocks(self, request):
            if request.status != aborted:
                return original(self, request)
            return leak_blocks(self.kv_cache_manager, request, kept_blocks)
        return _free_request_blocks

    wrap(cls, "_free_request_blocks", make)


def hang_forever(engine: Any, after_s: float) -> None:
    """Schedule the batch, publish the gauges that show it running, then block until a shutdown is asked for."""
    from vllm.v1.engine import EngineCoreOutputs
    from vllm.v1.engine.core import EngineShutdownState

    log.warning("soak fault hang-after=%gs reached: the engine stops producing tokens (pid %d)", after_s, os.getpid())
    engine.scheduler.schedule()  # waiting requests join the running batch, as in a step that never returns
    stats = engine.scheduler.make_stats()
    if stats is not None:
        engine.output_queue.put_nowait((0, EngineCoreOutputs(scheduler_stats=stats)))
    while engine.shutdown_state == EngineShutdownState.RUNNING:
        time.sleep(HANG_POLL_S)
    raise SystemExit  # what vLLM's busy loop raises itself once a shutdown is asked for


def plant_hang(after_s: float) -> None:
    cls = seam(ENGINE_CORE, "_process_engine_step", "hang-after")
    seam(SCHEDULER, "make_stats", "hang-after")

    def make(original):
        def _process_engine_step(self):
            if CLOCK.due(after_s) and self.scheduler.has_requests():
                hang_forever(self, after_s)
            return original(self)
        return _process_engine_step

    wrap(cls, "_process_engine_step", make)


def flipped(token_id: int, vocab_size: int) -> int:
    """The token id with its lowest bit flipped (one below, where that would leave the vocabulary)."""
    other = token_id ^ 1
    return other if other < vocab_size else token_id - 1


def garble(outputs: dict[int, Any], vocab_size: int) -> None:
    """Replace every new token id in `outputs` (EngineCoreOutputs by client) by a flipped one."""
    for batch in outputs.values():
        for output in batch.outputs:
            output.new_token_ids = [flipped(t, vocab_size) for t in output.new_token_ids]


def plant_garble(after_s: float) -> None:
    cls = seam(SCHEDULER, "update_from_output", "garble-after")
    announced = threading.Event()

    def make(original):
        def update_from_output(self, scheduler_output, model_runner_output):
            outputs = original(self, scheduler_output, model_runner_output)
            if CLOCK.due(after_s):
                if not announced.is_set():
                    announced.set()
                    log.warning("soak fault garble-after=%gs reached: generated tokens are altered from now on "
                                "(pid %d)", after_s, os.getpid())
                garble(outputs, self.vllm_config.model_config.get_vocab_size())
            return outputs
        return update_from_output

    wrap(cls, "update_from_output", make)


def plant(faults: VllmFaults) -> None:
    """Plant every fault asked for; FaultError when vLLM lacks a method one of them wraps."""
    if faults.rss_leak_bytes:
        plant_rss_leak(faults.rss_leak_bytes)
    if faults.kv_leak_on_abort:
        plant_kv_leak(faults.kv_leak_blocks)
    if faults.hang_after_s is not None:
        plant_hang(faults.hang_after_s)
    if faults.garble_after_s is not None:
        plant_garble(faults.garble_after_s)
