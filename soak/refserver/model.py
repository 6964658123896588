"""A tiny causal transformer over bytes, with keys and values kept in a paged (block) cache.

The weights are random but fixed by the seed: the server is a stand-in with the *mechanics* of an
inference engine (prefill, decode, a KV cache in blocks), not a language model.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from soak.refserver.tokenizer import BOS_ID, EOS_ID, VOCAB_SIZE

# Multi-token forwards are padded to a multiple of this many query positions. oneDNN caches one kernel
# per matmul shape (up to 1024 of them), so free-ranging prompt lengths made RSS climb for an hour or
# more — in the server whose healthy baseline the leak detectors are checked against.
QUERY_BUCKET = 64
PRINTABLE_BIAS = 6.0  # keeps output mostly printable ASCII, so most tokens carry a visible character
LOGIT_SCALE = 3.0  # makes the random model's next-token distribution less flat


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = VOCAB_SIZE
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 512

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass(frozen=True)
class Chunk:
    """Tokens of one sequence to compute, from position `start`; its keys/values live in `blocks`."""

    tokens: Sequence[int]
    start: int
    blocks: Sequence[int]


class PagedKVCache:
    """Keys and values of every block, one flat slot axis: slot = block * block_size + offset."""

    def __init__(self, config: ModelConfig, num_blocks: int, block_size: int, device: str = "cpu") -> None:
        shape = (config.n_layers, num_blocks * block_size, config.n_heads, config.head_dim)
        self.block_size = block_size
        self.device = device
        # Written at once, like vLLM's preallocation: untouched pages would join RSS only as blocks are
        # first used, and that slow climb would look like a leak to the very detectors this serves.
        self.keys = torch.empty(shape, device=device).fill_(0.0)
        self.values = torch.empty(shape, device=device).fill_(0.0)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes


class PagedAttention:
    """Per-forward view of the paged cache: where new keys go, which slots each row reads, the mask."""

    def __init__(self, cache: PagedKVCache, chunks: Sequence[Chunk]) -> None:
        counts = torch.tensor([len(c.tokens) for c in chunks])
        starts = torch.tensor([c.start for c in chunks])
        context = starts + counts
        offsets = torch.arange(_bucketed(int(counts.max())))
        valid = offsets[None, :] < counts[:, None]
        # Padding queries repeat the row's last position: never written, their output is dropped.
        positions = torch.minimum(starts[:, None] + offsets[None, :], context[:, None] - 1)
        tables = _pad_tables([c.blocks for c in chunks])
        key_positions = torch.arange(tables.shape[1] * cache.block_size)
        write_slots = (tables.gather(1, positions // cache.block_size) * cache.block_size
                       + positions % cache.block_size)[valid]
        # Keys past a row's context (unfilled slots, padding blocks) are read but masked out.
        mask = (key_positions <= positions[:, :, None]) & (key_positions < context[:, None, None])
        self.cache = cache
        self.valid, self.positions = valid.to(cache.device), positions.to(cache.device)
        self.write_slots, self.tables = write_slots.to(cache.device), tables.to(cache.device)
        self.mask = mask[:, None].to(cache.device)  # [rows, 1, queries, keys]

    def exchange(self, layer: int, keys: torch.Tensor, values: torch.Tensor):
        """Store this step's keys/values, return every key/value each row attends to, and the mask."""
        self.cache.keys[layer].index_copy_(0, self.write_slots, keys[self.valid])
        self.cache.values[layer].index_copy_(0, self.write_slots, values[self.valid])
        return self._gather(self.cache.keys[layer]), self._gather(self.cache.values[layer]), self.mask

    def _gather(self, slots: torch.Tensor) -> torch.Tensor:
        """The rows' blocks, in table order, as [rows, blocks * block_size, heads, head_dim]."""
        blocks = slots.view(-1, self.cache.block_size, *slots.shape[1:])
        rows, width = self.tables.shape
        return blocks.index_select(0, self.tables.reshape(-1)).view(rows, width * self.cache.block_size, *slots.shape[1:])


def _bucketed(length: int) -> int:
    return length if length == 1 else -(-length // QUERY_BUCKET) * QUERY_BUCKET


def _pad_tables(tables: Sequence[Sequence[int]]) -> torch.Tensor:
    width = max(len(t) for t in tables)
    return torch.tensor([list(t) + [0] * (width - len(t)) for t in tables], dtype=torch.long)


def _sinusoid(positions: torch.Tensor, width: int) -> torch.Tensor:
    rates = torch.exp(torch.arange(0, width, 2, device=positions.device) * (-math.log(10000.0) / width))
    angles = positions[..., None].float() * rates
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.norm_attn = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        self.norm_ff = nn.LayerNorm(config.d_model)
        self.ff_in = nn.Linear(config.d_model, config.d_ff)
        self.ff_out = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x: torch.Tensor, layer: int, attention) -> torch.Tensor:
        rows, length, _ = x.shape
        heads, head_dim = self.config.n_heads, self.config.head_dim
        q, k, v = self.qkv(self.norm_attn(x)).view(rows, length, 3, heads, head_dim).unbind(2)
        keys, values, mask = attention.exchange(layer, k, v)
        mixed = F.scaled_dot_product_attention(
            q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), attn_mask=mask)
        x = x + self.out(mixed.transpose(1, 2).reshape(rows, length, -1))
        return x + self.ff_out(F.gelu(self.ff_in(self.norm_ff(x))))


class TinyTransformer(nn.Module):
    """Pre-norm decoder-only transformer with sinusoidal positions."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.register_buffer("vocab_bias", _vocab_bias(config.vocab_size))

    def hidden(self, tokens: torch.Tensor, attention) -> torch.Tensor:
        """Final hidden states [rows, length, d_model] for `tokens` [rows, length]."""
        x = self.embed(tokens) + _sinusoid(attention.positions, self.config.d_model)
        for index, layer in enumerate(self.layers):
            x = layer(x, index, attention)
        return self.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden) * LOGIT_SCALE + self.vocab_bias

    @torch.inference_mode()
    def paged_logits(self, cache: PagedKVCache, chunks: Sequence[Chunk]) -> torch.Tensor:
        """Compute `chunks` through the paged cache; logits [rows, vocab] at each chunk's last token."""
        attention = PagedAttention(cache, chunks)
        width = attention.valid.shape[1]
        tokens = torch.tensor([list(c.tokens) + [0] * (width - len(c.tokens)) for c in chunks],
                              device=cache.device)
        hidden = self.hidden(tokens, attention)
        last = torch.tensor([len(c.tokens) - 1 for c in chunks], device=cache.device)
        return self.logits(hidden[torch.arange(len(chunks), device=cache.device), last]).float().cpu()


def _vocab_bias(vocab_size: int) -> torch.Tensor:
    bias = torch.zeros(vocab_size)
    bias[32:127] = PRINTABLE_BIAS
    bias[ord("\n")] = PRINTABLE_BIAS
    bias[BOS_ID] = float("-inf")
    bias[EOS_ID + 1:] = float("-inf")
    return bias


def build_model(config: ModelConfig, seed: int, device: str = "cpu") -> TinyTransformer:
    """The model for `seed`: same seed, same weights, on any machine (no download)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyTransformer(config)
    return model.to(device).eval()
