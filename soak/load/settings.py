"""`ClientSettings`: what soak tells every scenario instance and its client (the model, limits, the API key)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_MODEL_LEN = 2048


@dataclass(frozen=True)
class ClientSettings:
    """The dispatcher passes these to each scenario instance; a plain Locust user sets them on its class."""

    model: str | None = None
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    request_timeout_s: float = 300.0
    api_key: str | None = None
    dataset_path: Path | None = None
    seed: int = 0
