"""The reference path the reference server's paged attention is checked against: plain causal attention over
the whole sequence, with no cache (test-only, so it lives here and not in soak/refserver)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from soak.refserver.model import TinyTransformer


class DenseAttention:
    """Every position attends to itself and those before it; nothing is stored."""

    def __init__(self, num_tokens: int, device: torch.device | str = "cpu") -> None:
        self.positions = torch.arange(num_tokens, device=device)[None, :]
        self.mask = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device).tril()[None, None]

    def exchange(self, layer: int, keys: torch.Tensor, values: torch.Tensor):
        return keys, values, self.mask


@torch.inference_mode()
def dense_logits(model: TinyTransformer, tokens: Sequence[int]) -> torch.Tensor:
    """Logits [length, vocab] at every position of `tokens`, computed without any cache."""
    device = model.vocab_bias.device
    hidden = model.hidden(torch.tensor([list(tokens)], device=device), DenseAttention(len(tokens), device))
    return model.logits(hidden[0]).float().cpu()
