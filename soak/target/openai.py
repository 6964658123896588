"""What soak asks any OpenAI-compatible server before load: is it there, and which model does it serve."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from soak.errors import ConfigError, TargetError

PROBE_TIMEOUT_S = 10.0


def list_models(base_url: str, headers: dict[str, str] | None = None, timeout_s: float = PROBE_TIMEOUT_S
                ) -> list[dict[str, Any]]:
    """The entries of `GET /v1/models`; TargetError when the server cannot be reached or answers oddly."""
    request = urllib.request.Request(base_url + "/v1/models", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise TargetError(f"target {base_url} answered HTTP {exc.code} to GET /v1/models") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TargetError(f"target {base_url} is unreachable: {reason}") from None
    models = body.get("data") if isinstance(body, dict) else None
    if not isinstance(models, list):
        raise TargetError(f"target {base_url} did not list models at /v1/models")
    return models


def choose_model(models: list[dict[str, Any]], wanted: str | None, base_url: str) -> str:
    """`wanted` if the server lists it, else the only base model it lists (LoRA adapters, listed with a parent, are
    not candidates); several and no choice is a ConfigError."""
    ids = [str(model.get("id")) for model in models]
    if wanted:
        if wanted not in ids:
            raise ConfigError(f"model {wanted!r} is not served by {base_url} (it lists: {', '.join(ids) or 'none'})")
        return wanted
    ids = [str(model.get("id")) for model in models if not model.get("parent")] or ids
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise TargetError(f"target {base_url} lists no model at /v1/models")
    raise ConfigError(f"target {base_url} serves several models ({', '.join(ids)}): pick one with --served-model")
