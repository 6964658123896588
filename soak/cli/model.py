"""`soak model tiny DIR`: write the tiny random-weight Llama that vLLM can serve on a CPU (docs/vllm.md)."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def model() -> None:
    """Models soak can make itself, without downloads."""


@model.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", type=int, default=0, show_default=True, help="The seed of the weights and the corpus.")
def tiny(directory: Path, seed: int) -> None:
    """Write a tiny random-weight Llama, its tokenizer and a chat template into DIRECTORY.

    The same seed writes the same files. `soak start --model tiny` builds one once in soak's cache folder and
    serves it; this command is for serving it yourself (`vllm serve DIRECTORY --dtype bfloat16 …`).
    """
    from soak.target.tiny_model import build_tiny_model

    written = build_tiny_model(directory, seed)
    click.echo(f"tiny model written to {written} (serve it with --dtype bfloat16 --max-model-len 1024)")
