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
    adapters: tuple[str, ...] = ()  # the --lora adapter names the lora scenario spreads over, by Zipf rank
    adapter_zipf: float = 1.0
    churn_every_s: float | None = None  # --lora-churn-every: the lora scenario avoids the adapter being cycled
