"""`OpenAIUser`: the base class of every scenario, a FastHttpUser whose `self.client` speaks OpenAI.

A scenario is written like any Locust user (`weight`, `@task` methods, `self.client`). Under soak, the
dispatcher owns the schedule: it creates one instance per scenario class and process, and runs one task per
planned arrival in its own greenlet. Under plain `locust -f`, the same class runs closed-loop as usual.
"""

from __future__ import annotations

import json
import logging
import random
import urllib.request
from collections.abc import Callable
from typing import Any

from locust import FastHttpUser, constant

from soak.load.client import ClientContext, OpenAIClient, current_arrival
from soak.load.prompts import TokenRatio
from soak.load.records import RequestRecord
from soak.load.settings import ClientSettings

log = logging.getLogger(__name__)

# Room left for the chat template and special tokens when sizing prompts against max_model_len (the context
# length soak.load.context resolves).
TEMPLATE_MARGIN_TOKENS = 64


def fetch_model_cards(base_url: str, api_key: str | None = None, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The `data` list of GET /v1/models ([] when the server does not answer it)."""
    request = urllib.request.Request(base_url.rstrip("/") + "/v1/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            data = json.loads(response.read())
    except (OSError, ValueError) as exc:
        log.warning("could not read %s/v1/models: %s", base_url, type(exc).__name__)
        return []
    cards = data.get("data") if isinstance(data, dict) else None
    return [card for card in cards or [] if isinstance(card, dict)]


class OpenAIUser(FastHttpUser):
    """Base class for scenarios: `self.client.chat(...)`, `self.client.completion(...)`, `self.rng`."""

    abstract = True
    # FastHttpUser's default of 10 connections silently gates sends: open loop needs far more.
    concurrency = 10_000
    max_redirects = 0
    max_retries = 0
    connection_timeout = 30.0
    wait_time = constant(0)
    # Under plain Locust, which builds users from the environment alone, set this on the class.
    settings: ClientSettings = ClientSettings()

    def __init__(self, environment: Any, settings: ClientSettings | None = None) -> None:
        if settings is not None:
            self.settings = settings
        # Every request runs under our own deadline (request_timeout_s); a socket timeout on top would only
        # cost a timer per read of every stream chunk.
        self.network_timeout = None
        self.host = self.host or environment.host  # soak builds instances itself, not through a runner
        super().__init__(environment)
        self.http = self.client
        self.max_model_len = self.settings.max_model_len
        self.token_ratio = TokenRatio()
        self.record_sink: Callable[[RequestRecord], None] | None = None
        self._model = self.settings.model
        self._fallback_rng = random.Random(self.settings.seed)
        context = ClientContext(type(self).__name__, lambda: self.model, self.token_ratio, self.emit_record)
        client = OpenAIClient(self.http, self.settings, environment.events, context)
        self.client: OpenAIClient = client  # type: ignore[assignment]

    @property
    def model(self) -> str:
        """The model to request: soak's, else the first one the server lists (a subclass may set `model = "…"`)."""
        if self._model is None:
            cards = fetch_model_cards(self.host, self.settings.api_key)
            self._model = str(cards[0]["id"]) if cards else "default"
        return self._model

    @property
    def rng(self) -> random.Random:
        """This arrival's random generator: seeded from `load.seed`, so prompts repeat run to run."""
        arrival = current_arrival()
        return arrival.rng if arrival is not None else self._fallback_rng

    def emit_record(self, record: RequestRecord) -> None:
        if self.record_sink is not None:
            self.record_sink(record)

    def prompt_bytes(self, tokens: int) -> int:
        """Bytes of prose that make about `tokens` prompt tokens on this server (1 per byte until learnt)."""
        return self.token_ratio.bytes_for(tokens)

    def prompt_room_bytes(self, max_tokens: int) -> int:
        """Bytes of prose a prompt may have so that it and `max_tokens` of output fit the context."""
        return self.prompt_bytes(self.fit(self.max_model_len, max_tokens)[0])

    def fit(self, prompt_tokens: int, max_tokens: int) -> tuple[int, int]:
        """Clamp (prompt, output) token counts so that together they fit the model's context."""
        budget = max(self.max_model_len - TEMPLATE_MARGIN_TOKENS, 2)
        max_tokens = max(1, min(max_tokens, budget - 1))
        return max(0, min(prompt_tokens, budget - max_tokens)), max_tokens
