"""Prompts replayed from a dataset file (`--dataset FILE`): ShareGPT-style JSON or JSONL.

Accepted records: ShareGPT `{"conversations": [{"from": "human"|"gpt"|"system", "value": …}, …]}`, OpenAI
style `{"messages": [{"role": …, "content": …}, …]}`, or `{"prompt": …, "completion"|"output": …}`. Each
record gives one request: its system turn and first user turn; the first assistant turn after it, when
present, sets max_tokens (≈ 4 characters per token, within [16, 1024]).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soak.errors import ConfigError

CHARS_PER_TOKEN = 4
MIN_OUTPUT_TOKENS, MAX_OUTPUT_TOKENS, DEFAULT_OUTPUT_TOKENS = 16, 1024, 128
_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
          "bard": "assistant", "bing": "assistant", "system": "system", "model": "assistant"}


@dataclass(frozen=True)
class DatasetItem:
    """One replayable request."""

    messages: tuple[dict[str, str], ...]
    max_tokens: int


def _turns(record: dict[str, Any]) -> list[tuple[str, str]]:
    if isinstance(record.get("conversations"), list):
        raw = [(t.get("from"), t.get("value")) for t in record["conversations"] if isinstance(t, dict)]
    elif isinstance(record.get("messages"), list):
        raw = [(t.get("role"), t.get("content")) for t in record["messages"] if isinstance(t, dict)]
    elif isinstance(record.get("prompt"), str):
        answer = record.get("completion") or record.get("output") or record.get("response")
        raw = [("user", record["prompt"])] + ([("assistant", answer)] if isinstance(answer, str) else [])
    else:
        return []
    return [(_ROLES.get(str(role).lower(), ""), text) for role, text in raw if isinstance(text, str) and text]


def item_from_record(record: Any) -> DatasetItem | None:
    """The request a record stands for, or None if it has no user turn."""
    if not isinstance(record, dict):
        return None
    turns = _turns(record)
    first_user = next((i for i, (role, _) in enumerate(turns) if role == "user"), None)
    if first_user is None:
        return None
    messages = [{"role": "system", "content": text} for role, text in turns[:first_user] if role == "system"]
    messages.append({"role": "user", "content": turns[first_user][1]})
    answer = next((text for role, text in turns[first_user + 1:] if role == "assistant"), None)
    tokens = len(answer) // CHARS_PER_TOKEN if answer else DEFAULT_OUTPUT_TOKENS
    return DatasetItem(tuple(messages), min(max(tokens, MIN_OUTPUT_TOKENS), MAX_OUTPUT_TOKENS))


def _records(path: Path) -> list[Any]:
    """A JSON array (or an object holding `data`), else JSON Lines."""
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(data, dict):
        return data["data"] if isinstance(data.get("data"), list) else [data]
    return data if isinstance(data, list) else []


@functools.lru_cache(maxsize=4)
def load_dataset(path: Path) -> tuple[DatasetItem, ...]:
    """Read and convert a dataset file once per process; ConfigError if unreadable or empty."""
    try:
        records = _records(Path(path))
    except OSError as exc:
        raise ConfigError(f"dataset {path} cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"dataset {path} is not JSON or JSONL: {exc}") from None
    items = tuple(item for item in map(item_from_record, records) if item is not None)
    if not items:
        raise ConfigError(f"dataset {path} holds no usable prompts (ShareGPT conversations, messages or prompt)")
    return items
