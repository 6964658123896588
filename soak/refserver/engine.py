"""The engine: continuous batching over the paged KV cache, on its own thread.

Each step admits waiting sequences (first come, first served) while there are batch slots and
blocks, prefills them, and decodes one token for every running sequence. When a running sequence
needs a block and none is free, the youngest running sequence is preempted (recompute: its blocks
are freed and it goes back to the front of the queue), as vLLM V1 does.

Requests come in and leave through thread-safe queues; tokens go out through a `publish` callback,
once per step, which the API turns into one hop onto its event loop.
"""

import itertools
import os
import queue
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from soak.refserver.injector import FaultInjector
from soak.refserver.kvcache import BlockTable, KVCacheManager
from soak.refserver.metrics import EngineSnapshot, ServerMetrics
from soak.refserver.model import Chunk, PagedKVCache, TinyTransformer
from soak.refserver.sampling import DEFAULT_EOS_PROBABILITY, SamplingParams, sample_token
from soak.refserver.tokenizer import EOS_ID

IDLE_WAIT_S = 0.05  # how often an idle engine looks at the clock (hang, stalls)
ENGINE_FAILURE_EXIT_CODE = 1


@dataclass(frozen=True)
class TokenEvent:
    """One generated token of a request; `finish_reason` is set on its last one."""

    token_id: int
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int


@dataclass(eq=False)
class Sequence:
    """A request inside the engine: its tokens (prompt, then output) and where their KV lives."""

    request_id: str
    tokens: list[int]
    prompt_len: int
    params: SamplingParams
    sink: object  # where this request's TokenEvents go; opaque to the engine
    rng: np.random.Generator
    arrival_s: float = field(default_factory=time.perf_counter)
    table: BlockTable = field(default_factory=BlockTable)
    num_computed: int = 0  # leading tokens whose keys/values are in the cache
    scheduled_once: bool = False
    last_token_s: float | None = None

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.prompt_len


@dataclass(frozen=True)
class EngineConfig:
    max_num_seqs: int = 32
    seed: int = 0
    eos_probability: float = DEFAULT_EOS_PROBABILITY
    min_step_s: float = 0.0  # the least a step takes, as a GPU's decode step does (0: as fast as the CPU computes)


Publish = Callable[[list[tuple[object, TokenEvent]]], None]


class Engine:
    def __init__(self, model: TinyTransformer, cache: PagedKVCache, kv: KVCacheManager, config: EngineConfig,
                 metrics: ServerMetrics, injector: FaultInjector) -> None:
        self.model, self.cache, self.kv = model, cache, kv
        self.config = config
        self.metrics = metrics
        self.injector = injector
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._live: dict[str, Sequence] = {}
        self._inbox: queue.SimpleQueue[Sequence] = queue.SimpleQueue()
        self._aborts: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="refserver-engine", daemon=True)
        self._counter = itertools.count()
        self._preempted_in_step = False
        self._publish: Publish = lambda events: None

    # -- thread-safe API -------------------------------------------------------------------------

    def set_publisher(self, publish: Publish) -> None:
        self._publish = publish

    def submit(self, prompt: list[int], params: SamplingParams, sink: object, request_id: str) -> None:
        """Queue a request; its tokens will be published to `sink`."""
        number = next(self._counter)
        # A request seed may be negative (64-bit signed); numpy wants it unsigned.
        seed = params.seed % 2**64 if params.seed is not None else [self.config.seed, number]
        self._inbox.put(Sequence(request_id, list(prompt), len(prompt), params, sink, np.random.default_rng(seed)))
        self._wake.set()

    def abort(self, request_id: str) -> None:
        """Drop a request (client gone); a finished or unknown id is ignored."""
        self._aborts.put(request_id)
        self._wake.set()

    def snapshot(self) -> EngineSnapshot:
        # Plain reads of sizes the engine thread updates; exact enough for a gauge.
        return EngineSnapshot(running=len(self._running), waiting=len(self._waiting) + self._inbox.qsize(),
                              kv_cache_usage=self.kv.pool.usage())

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # -- the loop --------------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            self._serve_steps()
        except BaseException:  # a bug: die loudly like an engine death, never hang with /health still 200
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(ENGINE_FAILURE_EXIT_CODE)

    def _serve_steps(self) -> None:
        while not self._stop.is_set():
            if self.injector.engine_hung():
                self._hang()
                return
            stall_s = self.injector.stall_due_s()
            if stall_s > 0:
                self._stop.wait(stall_s)
            started = time.perf_counter()
            if not self.step():
                self._wake.wait(IDLE_WAIT_S)
                self._wake.clear()
                continue
            self._pace_step(started)

    def _pace_step(self, started: float) -> None:
        """Hold the step to its floor (--step-time), then add latency-creep's share of the step's time."""
        floor_s = self.config.min_step_s - (time.perf_counter() - started)
        if floor_s > 0:
            self._stop.wait(floor_s)
        delay_s = self.injector.step_delay_s(time.perf_counter() - started)
        if delay_s > 0:
            self._stop.wait(delay_s)

    def _hang(self) -> None:
        """Stuck for good in the model step (vLLM #43941): requests still join the running batch, but
        nothing is computed, finished or freed — aborts included. Running stays > 0, tokens stay flat."""
        while not self._stop.is_set():
            self._take_new_requests()
            self._admit_waiting()
            self._wake.wait(IDLE_WAIT_S)
            self._wake.clear()

    def step(self) -> bool:
        """Run one scheduling step; False when there was nothing to compute."""
        self._take_new_requests()
        self._take_aborts()
        self._preempted_in_step = False
        decodes = self._reserve_decode_slots()
        # Like vLLM: a step that had to preempt admits nobody, or the victim would bounce straight back.
        prefills = [] if self._preempted_in_step else self._admit_waiting()
        batch = prefills + decodes
        if not batch:
            return False
        logits = self._forward(prefills, decodes)
        events = [self._append_token(seq, row) for seq, row in zip(batch, logits)]
        self._publish(events)
        return True

    # -- admission and preemption ----------------------------------------------------------------

    def _take_new_requests(self) -> None:
        while not self._inbox.empty():
            seq = self._inbox.get_nowait()
            self._live[seq.request_id] = seq
            self._waiting.append(seq)

    def _take_aborts(self) -> None:
        while not self._aborts.empty():
            self._abort(self._aborts.get_nowait())

    def _reserve_decode_slots(self) -> list[Sequence]:
        """Give every running sequence room for one more token, preempting the youngest as needed."""
        pending = list(self._running)
        scheduled = []
        while pending:
            seq = pending.pop(0)
            if self._make_room(seq, pending):
                scheduled.append(seq)
        return scheduled

    def _make_room(self, seq: Sequence, younger: list[Sequence]) -> bool:
        """Grow `seq` by one slot; False if `seq` itself had to be preempted."""
        while not self.kv.grow(seq.table, len(seq.tokens)):
            victim = younger.pop() if younger else seq
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        self._running.remove(seq)
        self.kv.release(seq.table)
        seq.num_computed = 0
        self._waiting.appendleft(seq)
        self._preempted_in_step = True
        self.metrics.preemptions.inc()

    def _admit_waiting(self) -> list[Sequence]:
        """Move waiting sequences into the batch while slots and blocks last (FCFS: no overtaking)."""
        admitted = []
        while self._waiting and len(self._running) < self.config.max_num_seqs:
            seq = self._waiting[0]
            cached_tokens = self.kv.admit(seq.table, seq.tokens)
            if cached_tokens is None:
                break
            self._waiting.popleft()
            seq.num_computed = cached_tokens
            self._running.append(seq)
            admitted.append(seq)
            self._record_scheduled(seq, cached_tokens)
        return admitted

    def _record_scheduled(self, seq: Sequence, cached_tokens: int) -> None:
        if self.kv.pool.enable_prefix_caching:
            self.metrics.prefix_queries.inc(len(seq.tokens))
            self.metrics.prefix_hits.inc(cached_tokens)
        if not seq.scheduled_once:
            seq.scheduled_once = True
            self.metrics.queue_time.observe(time.perf_counter() - seq.arrival_s)
            self.metrics.prompt_tokens.inc(seq.prompt_len)

    # -- compute and results ---------------------------------------------------------------------

    def _forward(self, prefills: list[Sequence], decodes: list[Sequence]) -> list:
        """Logits for each sequence's next token: one forward per prefill, one for all decodes."""
        rows = []
        for group in [[seq] for seq in prefills] + ([decodes] if decodes else []):
            chunks = [Chunk(seq.tokens[seq.num_computed:], seq.num_computed, seq.table.blocks) for seq in group]
            rows.extend(self.model.paged_logits(self.cache, chunks))
        return rows

    def _append_token(self, seq: Sequence, logits) -> tuple[object, TokenEvent]:
        seq.num_computed = len(seq.tokens)
        self.kv.commit(seq.table, seq.tokens, seq.num_computed)
        token = self.injector.corrupt_token(
            sample_token(logits, seq.params, seq.rng, seq.num_output, self.config.eos_probability))
        seq.tokens.append(token)
        self._record_token(seq)
        reason = self._finish_reason(seq, token)
        if reason is not None:
            self._finish(seq, reason)
        return seq.sink, TokenEvent(token, reason, seq.prompt_len, seq.num_output)

    def _record_token(self, seq: Sequence) -> None:
        now = time.perf_counter()
        since = seq.arrival_s if seq.last_token_s is None else seq.last_token_s
        (self.metrics.ttft if seq.last_token_s is None else self.metrics.itl).observe(now - since)
        seq.last_token_s = now
        self.metrics.generation_tokens.inc()

    @staticmethod
    def _finish_reason(seq: Sequence, token: int) -> str | None:
        if token == EOS_ID:
            return "stop"
        if seq.num_output >= seq.params.max_tokens:
            return "length"
        return None

    def _finish(self, seq: Sequence, reason: str) -> None:
        self._running.remove(seq)
        self.kv.release(seq.table)
        self._retire(seq, reason)

    def _abort(self, request_id: str) -> None:
        seq = self._live.get(request_id)
        if seq is None:
            return
        if seq in self._running:
            self._running.remove(seq)
        else:
            self._waiting.remove(seq)
        leak = self.injector.kv_leak_on_abort  # the planted bug: some or all blocks are never freed
        self.kv.release(seq.table, leak_last=leak.blocks_kept(len(seq.table.blocks)) if leak else 0)
        self._retire(seq, "abort")

    def _retire(self, seq: Sequence, reason: str) -> None:
        del self._live[seq.request_id]
        self.metrics.finished[reason].inc()
        self.metrics.e2e.observe(time.perf_counter() - seq.arrival_s)
        self.injector.on_request_finished(reason, seq.prompt_len)
