"""The tiny model: same seed, same bytes; sizes vLLM's CPU attention takes; a tokenizer that encodes any text."""

from __future__ import annotations

import hashlib
import json

import pytest
from click.testing import CliRunner

pytest.importorskip("tokenizers", reason="the tiny model needs tokenizers (installed with vLLM)")
pytest.importorskip("safetensors", reason="the tiny model needs safetensors (installed with vLLM)")

from soak.cli import main  # noqa: E402
from soak.target import tiny_model  # noqa: E402


def digests(directory):
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(directory.iterdir())}


def test_same_seed_writes_the_same_bytes_and_another_seed_does_not(tmp_path):
    first = tiny_model.build_tiny_model(tmp_path / "a")
    second = tiny_model.build_tiny_model(tmp_path / "b")
    other = tiny_model.build_tiny_model(tmp_path / "c", seed=1)
    assert digests(first) == digests(second)
    assert digests(first)["model.safetensors"] != digests(other)["model.safetensors"]


def test_the_config_has_a_head_size_the_cpu_backend_takes(tmp_path):
    config = json.loads((tiny_model.build_tiny_model(tmp_path) / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == 32
    assert (config["num_hidden_layers"], config["num_key_value_heads"]) == (2, 2)


def test_weights_match_the_config_and_the_tokenizer_encodes_any_text(tmp_path):
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    directory = tiny_model.build_tiny_model(tmp_path)
    config = json.loads((directory / "config.json").read_text())
    tensors = load_file(str(directory / "model.safetensors"))
    assert tensors["model.embed_tokens.weight"].shape == (config["vocab_size"], 128)
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == config["vocab_size"]
    text = "Grüße, 世界! {json: [1, 2]}"
    assert tokenizer.decode(tokenizer.encode(text).ids) == text
    template = json.loads((directory / "tokenizer_config.json").read_text())["chat_template"]
    assert "add_generation_prompt" in template


def test_ensure_builds_once_in_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SOAK_CACHE_DIR", str(tmp_path / "cache"))
    built = tiny_model.ensure_tiny_model()
    assert built == tmp_path / "cache" / "models" / f"tiny-llama-v{tiny_model.TINY_MODEL_VERSION}"
    stamp = (built / "model.safetensors").stat().st_mtime_ns
    assert tiny_model.ensure_tiny_model() == built
    assert (built / "model.safetensors").stat().st_mtime_ns == stamp
    assert not [p for p in built.parent.iterdir() if p.name.startswith(".building-")]


def test_the_cli_writes_the_model_and_refuses_a_file(tmp_path):
    result = CliRunner().invoke(main, ["model", "tiny", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m" / "config.json").is_file()
    (tmp_path / "f").write_text("x")
    refused = CliRunner().invoke(main, ["model", "tiny", str(tmp_path / "f")])
    assert refused.exit_code != 0
