"""Next-token choice: temperature, top-p, per-request seeds, and a rare, controlled EOS.

A random model would emit EOS whenever its logits happen to favour it; the load tool needs
`max_tokens` to control output length. So EOS gets a fixed probability per step (`eos_probability`)
instead of whatever the model says, and none at all before `min_tokens` or with `ignore_eos`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from soak.refserver.tokenizer import EOS_ID

if TYPE_CHECKING:  # the command line imports this module before torch is loaded
    import torch

DEFAULT_EOS_PROBABILITY = 1e-4
GREEDY_BELOW_TEMPERATURE = 1e-5  # as vLLM: dividing by a smaller temperature overflows the softmax


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    min_tokens: int = 0


def sample_token(logits: torch.Tensor, params: SamplingParams, rng: np.random.Generator,
                 num_generated: int, eos_probability: float) -> int:
    """Pick the next token from one row of logits."""
    eos_allowed = not params.ignore_eos and num_generated >= params.min_tokens
    eos_chance = eos_probability if eos_allowed else 0.0
    if eos_chance > 0 and rng.random() < eos_chance:
        return EOS_ID
    scores = logits.double().numpy().copy()
    scores[EOS_ID] = -np.inf
    if params.temperature < GREEDY_BELOW_TEMPERATURE:
        return int(np.argmax(scores))
    return _draw(_softmax(scores / params.temperature), params.top_p, rng)


def _softmax(scores: np.ndarray) -> np.ndarray:
    exp = np.exp(scores - scores.max())
    return exp / exp.sum()


def _draw(probs: np.ndarray, top_p: float, rng: np.random.Generator) -> int:
    """Inverse-CDF draw, restricted to the smallest set of tokens whose mass reaches `top_p`."""
    order = np.argsort(-probs)
    cumulative = np.cumsum(probs[order])
    keep = int(np.searchsorted(cumulative, top_p * cumulative[-1])) + 1
    kept = cumulative[:keep]
    return int(order[min(int(np.searchsorted(kept, rng.random() * kept[-1], side="right")), keep - 1)])
