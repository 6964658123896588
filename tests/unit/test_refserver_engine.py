"""The engine stepped by hand: batching, finish reasons, preemption, aborts, prefix-cache counters."""

import time
from collections import defaultdict

from soak.refserver.clock import ModelClock
from soak.refserver.engine import Engine, EngineConfig
from soak.refserver.faults import parse_faults
from soak.refserver.injector import FaultInjector
from soak.refserver.kvcache import BlockPool, KVCacheManager
from soak.refserver.metrics import ServerMetrics
from soak.refserver.model import ModelConfig, PagedKVCache, build_model
from soak.refserver.sampling import SamplingParams
from soak.refserver.tokenizer import encode

CONFIG = ModelConfig()
MODEL = build_model(CONFIG, seed=0)


class Harness:
    """An engine without its thread: events collect per request id; `run()` steps until idle."""

    def __init__(self, num_blocks: int = 64, block_size: int = 4, max_num_seqs: int = 8, faults=(),
                 eos_probability: float = 0.0, prefix_caching: bool = False, min_step_s: float = 0.0) -> None:
        injector = FaultInjector(parse_faults(list(faults)), ModelClock(), seed=0, horizon_s=3600)
        kv = KVCacheManager(BlockPool(num_blocks, prefix_caching), block_size)
        self.metrics = ServerMetrics("m")
        self.engine = Engine(MODEL, PagedKVCache(CONFIG, num_blocks, block_size), kv,
                             EngineConfig(max_num_seqs, 0, eos_probability, min_step_s), self.metrics, injector)
        self.events = defaultdict(list)
        self.engine.set_publisher(lambda batch: [self.events[sink].append(event) for sink, event in batch])

    def submit(self, request_id: str, text: str = "hello", **params) -> None:
        params = {"max_tokens": 8, "seed": 1, **params}
        self.engine.submit(encode(text), SamplingParams(**params), request_id, request_id)

    def run(self, max_steps: int = 5000) -> int:
        steps = 0
        while self.engine.step():
            steps += 1
            assert steps < max_steps
        return steps

    def tokens(self, request_id: str) -> list[int]:
        return [event.token_id for event in self.events[request_id]]

    def finish_reason(self, request_id: str) -> str | None:
        return self.events[request_id][-1].finish_reason

    @property
    def usage(self) -> float:
        return self.engine.snapshot().kv_cache_usage


def test_requests_run_to_max_tokens_in_one_batch():
    harness = Harness()
    for index in range(4):
        harness.submit(f"r{index}", f"prompt {index}", max_tokens=10)
    steps = harness.run()
    assert steps == 10  # all four decode side by side: one token each per step
    for index in range(4):
        assert len(harness.tokens(f"r{index}")) == 10 and harness.finish_reason(f"r{index}") == "length"
        assert [e.finish_reason for e in harness.events[f"r{index}"][:-1]] == [None] * 9
    assert harness.usage == 0.0 and harness.engine.snapshot().running == 0


def test_max_num_seqs_caps_the_batch():
    harness = Harness(max_num_seqs=2)
    for index in range(4):
        harness.submit(f"r{index}", max_tokens=5)
    harness.engine.step()
    snapshot = harness.engine.snapshot()
    assert snapshot.running == 2 and snapshot.waiting == 2
    harness.run()
    assert all(len(harness.tokens(f"r{i}")) == 5 for i in range(4))


def test_eos_stops_with_reason_stop():
    harness = Harness(eos_probability=1.0)
    harness.submit("eos")
    harness.submit("min", min_tokens=3)
    harness.submit("ignore", ignore_eos=True, max_tokens=4)
    harness.run()
    assert harness.finish_reason("eos") == "stop" and len(harness.tokens("eos")) == 1
    assert harness.finish_reason("min") == "stop" and len(harness.tokens("min")) == 4
    assert harness.finish_reason("ignore") == "length" and len(harness.tokens("ignore")) == 4
    assert harness.metrics.finished["stop"]._value.get() == 2


def test_preemption_recomputes_and_gives_the_same_tokens():
    prompts = {f"r{i}": f"request number {i}" for i in range(4)}
    roomy = Harness(num_blocks=64)
    tight = Harness(num_blocks=16)  # 64 tokens for 4 x (20 prompt + 30 output): must preempt
    for harness in (roomy, tight):
        for request_id, text in prompts.items():
            harness.submit(request_id, text, max_tokens=30, temperature=0)
        harness.run()
    assert tight.metrics.preemptions._value.get() > 0 and roomy.metrics.preemptions._value.get() == 0
    for request_id in prompts:
        assert tight.tokens(request_id) == roomy.tokens(request_id)
    assert tight.usage == 0.0


def test_abort_frees_blocks_unless_the_leak_fault_is_set():
    for faults, leaks in (((), False), (("kv-leak-on-abort",), True)):
        harness = Harness(faults=faults)
        harness.submit("gone", max_tokens=100)
        harness.submit("stays", max_tokens=3)
        for _ in range(3):
            harness.engine.step()
        harness.engine.abort("gone")
        harness.run()
        assert len(harness.tokens("gone")) == 3 and harness.finish_reason("stays") == "length"
        assert harness.metrics.finished["abort"]._value.get() == 1
        assert harness.engine.snapshot().running == 0
        assert (harness.usage > 0) == leaks


def _retained_bytes(harness: Harness) -> int:
    return harness.engine.injector.describe()["retained_bytes"]


def test_a_leak_on_cancel_keeps_memory_only_for_aborted_requests():
    harness = Harness(faults=("rss-leak-on=cancel:4KiB",))
    harness.submit("done", max_tokens=3)
    harness.run()
    assert _retained_bytes(harness) == 0
    harness.submit("gone", max_tokens=100)
    harness.engine.step()
    harness.engine.abort("gone")
    harness.run()
    assert _retained_bytes(harness) == 4096


def test_a_leak_on_long_prompts_keeps_memory_only_for_prompts_of_n_tokens_or_more():
    harness = Harness(num_blocks=256, faults=("rss-leak-on=long-prompt:4KiB:40",))
    harness.submit("short", "x" * 38, max_tokens=2)  # BOS + 38 bytes: 39 tokens
    harness.run()
    assert _retained_bytes(harness) == 0
    harness.submit("long", "x" * 39, max_tokens=2)
    harness.run()
    assert _retained_bytes(harness) == 4096


def test_kv_leak_limited_to_one_block_per_abort():
    harness = Harness(faults=("kv-leak-on-abort=1",), block_size=4)
    harness.submit("gone", "a prompt of many tokens", max_tokens=100)
    for _ in range(3):
        harness.engine.step()
    harness.engine.abort("gone")
    harness.run()
    assert harness.engine.kv.pool.num_used == 1


def test_abort_of_a_waiting_or_finished_request():
    harness = Harness(max_num_seqs=1)
    harness.submit("first", max_tokens=2)
    harness.submit("queued", max_tokens=2)
    harness.engine.step()
    harness.engine.abort("queued")
    harness.run()
    harness.engine.abort("first")  # already finished: ignored
    harness.run()
    assert harness.tokens("queued") == [] and harness.finish_reason("first") == "length"
    assert harness.metrics.finished["abort"]._value.get() == 1


def test_prefix_cache_counts_queries_and_hits_in_tokens():
    harness = Harness(prefix_caching=True, block_size=4)
    text = "shared prefix of some length"
    harness.submit("a", text, max_tokens=2)
    harness.run()
    harness.submit("b", text, max_tokens=2)
    harness.run()
    prompt_len = len(encode(text))
    assert harness.metrics.prefix_queries._value.get() == 2 * prompt_len
    assert harness.metrics.prefix_hits._value.get() == (prompt_len - 1) // 4 * 4
    assert harness.tokens("a") == harness.tokens("b")  # same seed, and cached keys equal recomputed ones
    assert harness.metrics.prompt_tokens._value.get() == 2 * prompt_len


def test_leaks_are_planted_per_finished_request():
    harness = Harness(faults=("rss-leak=4096", "fd-leak=2"))
    for index in range(3):
        harness.submit(f"r{index}", max_tokens=2)
    harness.run()
    state = harness.engine.injector.describe()
    assert state["retained_bytes"] == 3 * 4096 and state["leaked_fds"] == 6


def test_negative_request_seed_is_a_valid_seed():
    harness = Harness()
    harness.submit("a", seed=-1)
    harness.submit("b", seed=-1)
    harness.run()
    assert harness.tokens("a") == harness.tokens("b") and len(harness.tokens("a")) == 8


def test_a_step_is_held_to_its_floor():
    harness = Harness(min_step_s=0.05)
    started = time.perf_counter()
    harness.engine._pace_step(started)
    assert time.perf_counter() - started >= 0.049
    started = time.perf_counter() - 0.2  # a step that already took longer than its floor is not held
    harness.engine._pace_step(started)
    assert time.perf_counter() - started < 0.2 + 0.04
