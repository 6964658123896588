"""What the server under test accepts, asked before the load starts: one small request per feature.

A scenario that needs a feature the server refuses would spend the whole run on 4xx answers; soak asks first
(once the server is healthy, before the run opens), and stops with one line naming the scenario and the server's
answer, or with --skip-unsupported drops the scenario from the mix. The probes ask for 1–8 tokens, are sent
before the run's clock starts, and never reach the run's request windows.

Each chat probe carries soak's own request id (`X-Request-Id`, which vLLM and most servers log), and where soak
knows the server's log it notes the bytes the log grew by while the probe was answered: a server that logs its
refusals loudly (vLLM 0.21 writes a traceback for an image sent to a text-only model) wrote that as the probe's
answer, and the log scan records it so (`ProvokedExchange`), not as a server fault.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from soak.contracts import REQUEST_ID_HEADER, ProvokedExchange, soak_request_id
from soak.target.openai import list_models

PROBE_TIMEOUT_S = 60.0  # a first json_schema request compiles a grammar, a first image warms the vision encoder
MESSAGE_CHARS = 200
LOG_SETTLE_S, LOG_SETTLE_MAX_S = 0.1, 1.0  # after a refusal, the log is read until it stops growing this long

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
    request_id: str | None = None  # the probe's X-Request-Id
    log_span: tuple[int, int, int] | None = None  # (inode, from, to): the server log's bytes written meanwhile

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (events, summary.json, `soak doctor --json`)."""
        data = asdict(self)
        data["names"] = list(self.names)
        del data["log_span"]
        if self.request_id is None:
            del data["request_id"]
        return data

    def provoked(self) -> ProvokedExchange | None:
        """The probe as a request sent to be refused, when the server did not accept it."""
        if self.request_id is None or self.supported is True:
            return None
        inode, start, end = self.log_span or (None, None, None)
        return ProvokedExchange(self.request_id, f"capability probe {self.feature}", inode, start, end)

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
               timeout_s: float = PROBE_TIMEOUT_S, log_path: Path | None = None) -> Capability:
    """One non-streamed chat asking for `feature`: 200 accepted, a 4xx refused, anything else unknown. It carries
    its own request id; with the server's `log_path`, a refusal notes the log's bytes written while answering."""
    body = {"model": model, "temperature": 0, "stream": False, **_chat_bodies()[feature]()}
    request_id = soak_request_id("probe", feature)
    before = log_position(log_path)
    try:
        status, answer = _post_json(base_url + "/v1/chat/completions", body,
                                    {**(headers or {}), REQUEST_ID_HEADER: request_id}, timeout_s)
    except (OSError, ValueError) as exc:
        said, supported = f"no answer: {getattr(exc, 'reason', exc)}", None
    else:
        if status == 200:
            return Capability(feature, True, "HTTP 200", request_id=request_id)
        said, supported = f"HTTP {status}: {server_message(answer)}", False if 400 <= status < 500 else None
    return Capability(feature, supported, said, request_id=request_id, log_span=_span(before, log_path))


def log_position(path: Path | None) -> tuple[int, int] | None:
    """(inode, size) of the server's log, or None when there is none to read."""
    try:
        stat = os.stat(path) if path is not None else None
    except OSError:
        return None
    return (stat.st_ino, stat.st_size) if stat is not None else None


def _span(before: tuple[int, int] | None, path: Path | None) -> tuple[int, int, int] | None:
    """The log's bytes from `before` to where it stops growing (a server may log a refusal as it answers it)."""
    after, deadline = log_position(path), time.monotonic() + LOG_SETTLE_MAX_S
    while after is not None and time.monotonic() < deadline:
        time.sleep(LOG_SETTLE_S)
        now = log_position(path)
        if now == after:
            break
        after = now
    if before is None or after is None or before[0] != after[0]:
        return None
    return (before[0], before[1], after[1])


def probe_adapters(models: list[dict[str, Any]]) -> Capability:
    """Adapters are the /v1/models entries with a parent (vLLM lists each loaded LoRA so)."""
    names = tuple(str(entry.get("id")) for entry in models if entry.get("parent"))
    if not names:
        return Capability("adapters", False, "no adapter listed by /v1/models")
    return Capability("adapters", True, f"{len(names)} listed by /v1/models", names)


def images_from_config(models: list[dict[str, Any]], model: str) -> Capability | None:
    """Images answered without a request that could be refused: vLLM's /v1/models gives the served model's `root`,
    a folder on this host when the model is local; a config.json there with no part for pictures (no top-level key
    naming vision, image, img, visual or mm_) is a text-only model's. None when that cannot be read: then ask."""
    entry = next((entry for entry in models if entry.get("id") == model), None)
    root = entry.get("root") if entry else None
    try:
        config = json.loads((Path(root) / "config.json").read_text(encoding="utf-8")) if root else None
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or any(_names_pictures(key) for key in config):
        return None
    return Capability("images", False, f"not asked: the served model's config.json ({root}) has no part for "
                                       "pictures, a text-only model")


def _names_pictures(key: str) -> bool:
    key = key.lower()
    return key.startswith("mm_") or any(word in key for word in ("vision", "image", "img", "visual"))


def probe_capabilities(base_url: str, model: str, headers: dict[str, str] | None = None,
                       timeout_s: float = PROBE_TIMEOUT_S, log_path: Path | None = None) -> dict[str, Capability]:
    """Every feature of FEATURE_TEXT, as the server at `base_url` answers for `model` (`log_path`: its log).
    What the served model's own config settles is not asked."""
    models = list_models(base_url, headers, timeout_s)
    found = {"adapters": probe_adapters(models)}
    settled = {"images": images_from_config(models, model)}
    for feature in _chat_bodies():
        found[feature] = settled.get(feature) or probe_chat(base_url, model, feature, headers, timeout_s, log_path)
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
