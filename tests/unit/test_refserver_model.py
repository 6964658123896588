"""The tiny transformer: paged attention must agree with plain causal attention, and sampling rules."""

import numpy as np
import pytest
import torch

from soak.refserver.model import Chunk, ModelConfig, PagedKVCache, build_model
from soak.refserver.sampling import SamplingParams, sample_token
from soak.refserver.tokenizer import BOS_ID, EOS_ID, IncrementalDecoder, encode
from support.dense_model import dense_logits

CONFIG = ModelConfig()


@pytest.fixture(scope="module")
def model():
    return build_model(CONFIG, seed=0)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    finite = torch.isfinite(b)
    return bool(torch.equal(finite, torch.isfinite(a)) and torch.allclose(a[finite], b[finite], atol=1e-4))


def test_same_seed_same_weights():
    a, b, c = build_model(CONFIG, 3), build_model(CONFIG, 3), build_model(CONFIG, 4)
    assert torch.equal(a.head.weight, b.head.weight) and not torch.equal(a.head.weight, c.head.weight)


def test_paged_prefill_then_decode_matches_dense(model):
    tokens = encode("paged attention must equal the dense reference, token by token")
    reference = dense_logits(model, tokens)
    cache = PagedKVCache(CONFIG, num_blocks=32, block_size=4)
    blocks = [17, 3, 29, 8, 0, 21, 12, 5, 30, 14, 9, 25, 1, 18, 6, 27, 11]  # scattered on purpose
    assert _close(model.paged_logits(cache, [Chunk(tokens[:10], 0, blocks)])[0], reference[9])
    for position in range(10, len(tokens)):
        logits = model.paged_logits(cache, [Chunk(tokens[position:position + 1], position, blocks)])
        assert _close(logits[0], reference[position]), position


def test_batched_rows_do_not_see_each_other(model):
    first, second = encode("first sequence"), encode("a rather longer second sequence")
    cache = PagedKVCache(CONFIG, num_blocks=32, block_size=4)
    batch = model.paged_logits(cache, [Chunk(first, 0, list(range(0, 8))), Chunk(second, 0, list(range(8, 18)))])
    assert _close(batch[0], dense_logits(model, first)[-1])
    assert _close(batch[1], dense_logits(model, second)[-1])


def test_greedy_never_picks_specials_and_mostly_printable(model):
    logits = dense_logits(model, encode("hello"))[-1]
    probs = torch.softmax(logits, -1)
    assert probs[BOS_ID] == 0 and probs[EOS_ID + 1:].sum() == 0
    assert probs[32:127].sum() + probs[ord("\n")] > 0.9


def _random_logits() -> torch.Tensor:
    return torch.randn(260, generator=torch.Generator().manual_seed(1))


def _sample(params: SamplingParams, eos_probability: float = 0.0, generated: int = 5, seed: int = 0,
            logits: torch.Tensor | None = None) -> int:
    logits = _random_logits() if logits is None else logits
    return sample_token(logits, params, np.random.default_rng(seed), generated, eos_probability)


def test_eos_follows_its_probability_and_the_request():
    assert _sample(SamplingParams(8), eos_probability=1.0) == EOS_ID
    assert _sample(SamplingParams(8, ignore_eos=True), eos_probability=1.0) != EOS_ID
    assert _sample(SamplingParams(8, min_tokens=6), eos_probability=1.0, generated=5) != EOS_ID
    draws = [_sample(SamplingParams(8), eos_probability=0.1, seed=s) for s in range(2000)]
    assert 140 < draws.count(EOS_ID) < 260


def test_temperature_zero_is_argmax():
    logits = _random_logits()
    logits[EOS_ID] = -1e9
    assert {_sample(SamplingParams(8, temperature=0), seed=s) for s in range(5)} == {int(torch.argmax(logits))}


def test_tiny_temperature_is_greedy():
    assert _sample(SamplingParams(8, temperature=1e-300)) == _sample(SamplingParams(8, temperature=0))


def test_same_seed_same_draw():
    draws = {seed: {_sample(SamplingParams(8, temperature=1.5), seed=seed) for _ in range(3)} for seed in range(20)}
    assert all(len(d) == 1 for d in draws.values()) and len(set().union(*draws.values())) > 1


def test_top_p_keeps_the_head():
    logits = torch.full((260,), -1e9)
    logits[65], logits[66], logits[67] = 10.0, 9.0, 0.0
    assert {_sample(SamplingParams(8, top_p=0.5), seed=s, logits=logits) for s in range(50)} == {65}
    assert {_sample(SamplingParams(8), seed=s, logits=logits) for s in range(50)} == {65, 66}


def test_decoder_holds_partial_characters():
    decoder = IncrementalDecoder()
    pieces = [decoder.feed(b) for b in "é€".encode()]
    assert pieces == ["", "é", "", "", "€"]
    assert decoder.feed(EOS_ID) == ""
    assert decoder.feed(0xE2) == "" and decoder.finish() == "\ufffd"
