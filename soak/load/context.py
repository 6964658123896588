"""The context length requests must fit in (prompt + output tokens): from `--max-context`, else from the server.

Servers say it in different places (`soak/telemetry/dialects.py`, `context_length_from`): vLLM and SGLang in
/v1/models `max_model_len`, llama.cpp in /props `default_generation_settings.n_ctx` or /v1/models `meta.n_ctx`,
TGI in /info `max_total_tokens`, SGLang also in /get_server_info `context_length`. The other endpoints are asked
only when /v1/models states no `max_model_len`. A server that says nothing gets DEFAULT_MAX_MODEL_LEN, and the
log says so.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from dataclasses import dataclass
from typing import Any

from soak.load.settings import DEFAULT_MAX_MODEL_LEN
from soak.telemetry.dialects import context_length_from

log = logging.getLogger(__name__)

INFO_PATHS = ("/props", "/info", "/get_server_info")
DEFAULT_SOURCE = "default (the server states none)"


@dataclass(frozen=True)
class ContextLength:
    """The context length the scenarios size their requests for, and where it came from."""

    tokens: int
    source: str  # "--max-context" (or its variable or key), "GET /v1/models", "GET /props", …, or DEFAULT_SOURCE
    stated: int | None = None  # what the server states, when it states something

    def describe(self) -> str:
        """One line for the log and the run's event."""
        text = f"context length {self.tokens} tokens, from {self.source}"
        if self.stated is not None and self.stated != self.tokens:
            text += f" (the server states {self.stated})"
        return text


def get_json(base_url: str, path: str, api_key: str | None, timeout_s: float = 5.0) -> dict[str, Any]:
    """The JSON object a GET answers; {} for any failure (the endpoint is optional)."""
    request = urllib.request.Request(base_url.rstrip("/") + path)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            data = json.loads(response.read())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def server_answers(base_url: str, api_key: str | None) -> dict[str, dict[str, Any]]:
    """What the server says about itself, by endpoint: /v1/models, and the others when that has no max_model_len."""
    answers = {"/v1/models": get_json(base_url, "/v1/models", api_key)}
    cards = answers["/v1/models"].get("data")
    if any(isinstance(card, dict) and card.get("max_model_len") for card in cards or []):
        return answers
    for path in INFO_PATHS:
        answers[path] = get_json(base_url, path, api_key)
    return answers


def stated_context(answers: dict[str, dict[str, Any]], model: str | None) -> tuple[int | None, str | None]:
    """(context length, "GET <path>") from the endpoints' answers, read together so the most specific wins."""
    merged: dict[str, Any] = {}
    for answer in reversed(answers.values()):
        merged.update(answer)
    tokens = context_length_from(merged, None, model)
    if tokens is None:
        return None, None
    source = next((path for path, answer in answers.items() if context_length_from(answer, None, model) == tokens),
                  next(iter(answers)))
    return tokens, f"GET {source}"


def resolve_context(base_url: str, model: str | None, api_key: str | None, override: int | None = None,
                    override_origin: str = "--max-context") -> ContextLength:
    """The given override if any, else what the server states, else DEFAULT_MAX_MODEL_LEN."""
    stated, source = stated_context(server_answers(base_url, api_key), model)
    if override is not None:
        if stated is not None and override > stated:
            log.warning("%s %d is more than the %d tokens the server states (%s): requests may be refused",
                        override_origin, override, stated, source)
        return ContextLength(override, override_origin, stated)
    if stated is None:
        log.warning("the server states no context length: assuming %d tokens (set --max-context N)",
                    DEFAULT_MAX_MODEL_LEN)
        return ContextLength(DEFAULT_MAX_MODEL_LEN, DEFAULT_SOURCE)
    return ContextLength(stated, source, stated)
