"""What the server under test accepts, asked before the load starts: one small request per feature.

A scenario that needs a feature the server refuses would spend the whole run on 4xx answers; soak asks first
(once the server is healthy, before the run opens), and stops with one line naming the scenario and the server's
answer, or with --skip-unsupported drops the scenario from the mix. The probes ask for 1–8 tokens, are sent
before the run's clock starts, and never reach the run's request windows.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from soak.target.openai import list_models

PROBE_TIMEOUT_S = 60.0  # a first json_schema request compiles a grammar, a first image warms the vision encoder
MESSAGE_CHARS = 200

# The scenarios that need a feature a server may lack: built-in scenario name → the feature. One row per scenario.
SCENARIO_NEEDS: dict[str, str] = {
    "structured": "json_schema",
    "tools": "tools",
    "multimodal": "images",
    "lora": "adapters",
}

FEATURE_TEXT = {
    "adapters": "LoRA adapters listed by /v1/models (entries with a parent)",
    "json_schema": "response_format json_schema",
    "tools": "tools with tool_choice auto",
    "images": "image_url content parts",
}


@dataclass(frozen=True)
class Capability:
    """One feature as the server answered for it: `supported` True, False (it refused: a 4xx), or None (the probe
    could not tell: no answer, a 5xx); `answer` says what it answered."""

    feature: str
    supported: bool | None
    answer: str
    names: tuple[str, ...] = ()  # adapters: the ones listed

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (events, summary.json, `soak doctor --json`)."""
        data = asdict(self)
        data["names"] = list(self.names)
        return data

    def describe(self) -> str:
        """`images: refused (HTTP 400: …)`."""
        words = {True: "listed", False: "none"} if self.feature == "adapters" else {True: "accepted", False: "refused"}
        word = words.get(self.supported, "unknown")
        return f"{self.feature}: {word} ({self.answer})"


@dataclass(frozen=True)
class Unsupported:
    """A scenario of the mix whose feature the server refused."""

    scenario: str
    feature: str
    answer: str

    def line(self) -> str:
        """One line naming the scenario, what it needs and the server's answer."""
        return f"scenario {self.scenario} needs {FEATURE_TEXT[self.feature]}, which the server refused: {self.answer}"


# -- the probes -----------------------------------------------------------------------------------------------
def _probe_image() -> str:
    from soak.load.images import ImageSpec, data_uri

    return data_uri(ImageSpec(64, "png", 0))


def _chat_bodies() -> dict[str, Callable[[], dict[str, Any]]]:
    """Each chat feature's probe body (without the model), built when asked."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    tool = {"type": "function", "function": {"name": "get_time", "description": "The time in a city.", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    return {
        "json_schema": lambda: {"messages": [{"role": "user", "content": "Is the sky blue? Answer in JSON."}],
                                "max_tokens": 8,
                                "response_format": {"type": "json_schema",
                                                    "json_schema": {"name": "probe", "schema": schema}}},
        "tools": lambda: {"messages": [{"role": "user", "content": "What time is it in Oslo?"}], "max_tokens": 8,
                          "tools": [tool], "tool_choice": "auto"},
        "images": lambda: {"max_tokens": 1, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": _probe_image()}}]}]},
    }


def _post_json(url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float) -> tuple[int, bytes]:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={**headers, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def server_message(body: bytes) -> str:
    """The server's error message (OpenAI's `error.message`, else the body), on one short line."""
    text = body.decode("utf-8", "replace")
    try:
        error = json.loads(text).get("error")
        message = error.get("message") if isinstance(error, dict) else None
    except (ValueError, AttributeError):
        message = None
    line = " ".join(str(message or text).split())
    return line[:MESSAGE_CHARS] + ("…" if len(line) > MESSAGE_CHARS else "")


def probe_chat(base_url: str, model: str, feature: str, headers: dict[str, str] | None = None,
               timeout_s: float = PROBE_TIMEOUT_S) -> Capability:
    """One non-streamed chat asking for `feature`: 200 accepted, a 4xx refused, anything else unknown."""
    body = {"model": model, "temperature": 0, "stream": False, **_chat_bodies()[feature]()}
    try:
        status, answer = _post_json(base_url + "/v1/chat/completions", body, headers or {}, timeout_s)
    except (OSError, ValueError) as exc:
        return Capability(feature, None, f"no answer: {getattr(exc, 'reason', exc)}")
    if status == 200:
        return Capability(feature, True, "HTTP 200")
    said = f"HTTP {status}: {server_message(answer)}"
    return Capability(feature, False if 400 <= status < 500 else None, said)


def probe_adapters(models: list[dict[str, Any]]) -> Capability:
    """Adapters are the /v1/models entries with a parent (vLLM lists each loaded LoRA so)."""
    names = tuple(str(entry.get("id")) for entry in models if entry.get("parent"))
    if not names:
        return Capability("adapters", False, "no adapter listed by /v1/models")
    return Capability("adapters", True, f"{len(names)} listed by /v1/models", names)


def probe_capabilities(base_url: str, model: str, headers: dict[str, str] | None = None,
                       timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Capability]:
    """Every feature of FEATURE_TEXT, as the server at `base_url` answers for `model`."""
    found = {"adapters": probe_adapters(list_models(base_url, headers, timeout_s))}
    for feature in _chat_bodies():
        found[feature] = probe_chat(base_url, model, feature, headers, timeout_s)
    return found


# -- what the mix can keep ------------------------------------------------------------------------------------
def unsupported(scenarios: Iterable[str], found: dict[str, Capability]) -> list[Unsupported]:
    """The scenarios (by name, in mix order) whose feature the server refused; a feature it could not be asked
    about (supported None) does not stop a scenario."""
    lacking = []
    for scenario in scenarios:
        feature = SCENARIO_NEEDS.get(scenario)
        capability = found.get(feature) if feature else None
        if capability is not None and capability.supported is False:
            lacking.append(Unsupported(scenario, feature, capability.answer))
    return lacking
