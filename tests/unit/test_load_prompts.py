"""Deterministic prompt synthesis and length laws."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from soak.load.prompts import TokenRatio, lognormal_int, pareto_int, question, text_of_bytes, unicode_text, utf8_len


def test_the_same_seed_gives_the_same_prompts():
    assert text_of_bytes(random.Random(5), 500) == text_of_bytes(random.Random(5), 500)
    assert question(random.Random(5)) == question(random.Random(5))
    assert unicode_text(random.Random(5), 300) == unicode_text(random.Random(5), 300)
    assert text_of_bytes(random.Random(5), 500) != text_of_bytes(random.Random(6), 500)


@given(st.integers(0, 20_000), st.integers(0, 2**32))
def test_prose_stays_within_its_byte_budget_and_is_not_much_shorter(size, seed):
    text = text_of_bytes(random.Random(seed), size)
    assert utf8_len(text) <= size
    assert utf8_len(text) >= size // 2 - 20


@given(st.integers(0, 5_000), st.integers(0, 2**32))
def test_unicode_text_stays_within_its_byte_budget(size, seed):
    assert utf8_len(unicode_text(random.Random(seed), size)) <= size


def test_unicode_text_mixes_scripts_emoji_and_controls():
    text = unicode_text(random.Random(1), 20_000)
    assert any(ord(c) > 0x1F000 for c in text)  # emoji
    assert any("\u0590" <= c <= "\u06ff" for c in text)  # Hebrew / Arabic
    assert any(c in "\u0301\u0308\u0303" for c in text)  # combining marks
    assert any(c in "\x0b\x0c\x1b\x7f\x01" for c in text)  # control characters


def test_length_laws_are_clamped_and_heavy_tailed():
    rng = random.Random(3)
    draws = [lognormal_int(rng, 100, 1.0, 10, 5_000) for _ in range(5_000)]
    assert min(draws) >= 10 and max(draws) <= 5_000
    assert 80 < sorted(draws)[2_500] < 125  # median ≈ 100
    tail = [pareto_int(rng, 50, 1.2, 1, 10**9) for _ in range(5_000)]
    assert min(tail) >= 50 and max(tail) > 50 * 20


def test_token_ratio_learns_the_servers_tokens_per_byte_and_errs_short():
    ratio = TokenRatio()
    assert ratio.bytes_for(1000) == 1000  # 1 token per byte until known (byte-level reference server)
    for prompt_bytes, tokens in [(4000, 1000), (2000, 520), (1000, 270), (100, 90)]:
        ratio.observe(prompt_bytes, tokens)
    assert ratio.tokens_per_byte == 0.27  # the largest on prompts big enough to judge
    assert ratio.bytes_for(1000) == 3703


def test_long_prompts_are_cut_cheaply_yet_never_share_a_prefix():
    """Long prose is read from a corpus made once; each prompt's first paragraph is its own, so a server's prefix
    cache sees no two prompts alike, and a prompt longer than the corpus wraps around within its budget."""
    from soak.load.prompts import CORPUS_BYTES

    heads = {text_of_bytes(random.Random(seed), 20_000)[:40] for seed in range(200)}
    assert len(heads) == 200
    huge = text_of_bytes(random.Random(1), 3 * CORPUS_BYTES)
    assert 3 * CORPUS_BYTES - 20 <= utf8_len(huge) <= 3 * CORPUS_BYTES
    assert text_of_bytes(random.Random(1), 3 * CORPUS_BYTES) == huge
