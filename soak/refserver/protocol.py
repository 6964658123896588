"""OpenAI request bodies → validated generation requests, and OpenAI-style error bodies.

Request-level mistakes are the client's: they raise `RequestError` (400 or 404), never a 500.
Fields the server does not use (`user`, penalties, `stop`, …) are type-checked where known and
otherwise ignored, as vLLM does.
"""

import json
import math
from collections.abc import Container
from dataclasses import dataclass, replace
from typing import Any

from soak.refserver.images import ImageInput, is_image_part, read_image_part
from soak.refserver.sampling import SamplingParams
from soak.refserver.structured import SchemaError, Structured, json_answer, tool_answer
from soak.refserver.tokenizer import BOS_ID, VOCAB_SIZE, encode

ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # the legacy completions API's default, which vLLM keeps
CHAT_ROLES = {"system", "developer", "user", "assistant", "tool"}
MAX_N = 16
MAX_TOP_LOGPROBS = 20
TOOL_CHOICES = ("none", "auto", "required")
# What a server started with --no-images, --no-tools or --no-json-schema refuses, and the 400 it answers.
REFUSALS = {
    "images": ("{model} is a text-only model: it does not accept image_url content parts", "messages"),
    "tools": ("this server was started without tool calling: 'tools' is not accepted", "tools"),
    "json_schema": ("this server has no guided decoding: response_format json_schema is not accepted",
                    "response_format"),
}


class RequestError(Exception):
    """A request the server refuses; carries the HTTP status and the offending parameter."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


def error_body(status: int, message: str, param: str | None = None) -> dict:
    """`{"error": {"message", "type", "param", "code"}}` as OpenAI and vLLM send it."""
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "APIError"), "param": param,
                      "code": status}}


@dataclass(frozen=True)
class Limits:
    model_name: str
    max_model_len: int
    refused: frozenset[str] = frozenset()  # features of REFUSALS this server was started without
    adapters: Container[str] = frozenset()  # LoRA adapter names loaded now: requests may name them as the model

    def refuse(self, feature: str) -> None:
        """A 400 when the server was started without `feature`."""
        if feature in self.refused:
            message, param = REFUSALS[feature]
            raise RequestError(400, message.format(model=self.model_name), param)


@dataclass(frozen=True)
class GenerationRequest:
    """A validated request. `n` choices share the one generation; `logprobs` is the number of alternatives
    each token's logprob lists (None: no logprobs asked); `structured` is the JSON or tool call decided for a
    request with `response_format` or `tools`."""

    prompt_tokens: list[int]
    params: SamplingParams
    stream: bool
    include_usage: bool
    n: int = 1
    logprobs: int | None = None
    structured: Structured | None = None
    images: tuple[ImageInput, ...] = ()


def decode_json(raw: bytes) -> dict:
    """The body as a JSON object, or a 400."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(400, f"malformed JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    return body


def parse_chat(body: dict, limits: Limits) -> GenerationRequest:
    """Validate a /v1/chat/completions body."""
    _check_model(body, limits)
    images: list[ImageInput] = []
    prompt = encode(_render_messages(body.get("messages"), images, limits))
    request = _generation(body, prompt, "messages", limits, default_max_tokens=None)
    return replace(request, logprobs=_chat_logprobs(body), structured=_structured(body, len(prompt), limits),
                   images=tuple(images))


def parse_completion(body: dict, limits: Limits) -> GenerationRequest:
    """Validate a /v1/completions body."""
    _check_model(body, limits)
    prompt = _prompt_tokens(body.get("prompt"))
    request = _generation(body, prompt, "prompt", limits, default_max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS)
    return replace(request, logprobs=_bounded(body, "logprobs", None, MAX_TOP_LOGPROBS))


def _bounded(body: dict, name: str, default: int | None, most: int) -> int | None:
    value = _optional(body, name, int, default)
    if value is not None and not 0 <= value <= most:
        raise RequestError(400, f"'{name}' must be between 0 and {most}, got {value}", name)
    return value


def _chat_logprobs(body: dict) -> int | None:
    """The alternatives per token for chat's `logprobs` + `top_logprobs` (None without logprobs)."""
    top = _bounded(body, "top_logprobs", None, MAX_TOP_LOGPROBS)
    if not _optional(body, "logprobs", bool, False):
        if top:
            raise RequestError(400, "'top_logprobs' needs 'logprobs' to be true", "top_logprobs")
        return None
    return top or 0


def _structured(body: dict, prompt_length: int, limits: Limits) -> Structured | None:
    """The answer decided for `tools` (unless tool_choice is none) or a JSON `response_format`, else None."""
    if body.get("tools") is not None:
        limits.refuse("tools")
    tools = _tools(body.get("tools"))
    choice = body.get("tool_choice", "auto" if tools else "none")
    name = _tool_choice(choice, tools, prompt_length)
    try:
        if name is not None:
            return tool_answer(name, tools[name])
        return _response_format(body.get("response_format"), limits)
    except SchemaError as exc:
        raise RequestError(400, f"unsupported schema: {exc}", "response_format") from None


def _tools(tools: Any) -> dict[str, dict | None]:
    """Function name → its parameters schema, from a `tools` list."""
    if tools is None:
        return {}
    if not isinstance(tools, list) or not all(_is_function(tool) for tool in tools):
        raise RequestError(400, "'tools' must be a list of {type: function, function: {name, parameters}}",
                           "tools")
    return {tool["function"]["name"]: tool["function"].get("parameters") for tool in tools}


def _is_function(tool: Any) -> bool:
    function = tool.get("function") if isinstance(tool, dict) else None
    return (tool.get("type") == "function" and isinstance(function, dict)
            and isinstance(function.get("name"), str) and isinstance(function.get("parameters", {}), dict))


def _tool_choice(choice: Any, tools: dict[str, dict | None], prompt_length: int) -> str | None:
    """The tool to call: the named one; for auto and required one picked by the prompt's length (so a mix of
    prompts calls every tool); None for none."""
    if isinstance(choice, dict):
        function = choice.get("function") if choice.get("type") == "function" else None
        name = function.get("name") if isinstance(function, dict) else None
        if name not in tools:
            raise RequestError(400, f"tool_choice names a tool not in 'tools': {name!r}", "tool_choice")
        return name
    if choice not in TOOL_CHOICES:
        raise RequestError(400, f"'tool_choice' must be one of {', '.join(TOOL_CHOICES)} or a named function",
                           "tool_choice")
    if choice == "none" or not tools:
        if choice == "required":
            raise RequestError(400, "tool_choice 'required' needs 'tools'", "tool_choice")
        return None
    names = sorted(tools)
    return names[prompt_length % len(names)]


def _response_format(value: Any, limits: Limits) -> Structured | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return json_answer(None)
    if kind == "json_schema":
        limits.refuse("json_schema")
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise RequestError(400, "'response_format.json_schema.schema' must be an object", "response_format")
        return json_answer(schema)
    raise RequestError(400, "'response_format.type' must be text, json_object or json_schema", "response_format")


def _check_model(body: dict, limits: Limits) -> None:
    model = body.get("model")
    if model is None:
        return  # like vLLM: no model means the served one
    if not isinstance(model, str):
        raise RequestError(400, "'model' must be a string", "model")
    if model != limits.model_name and model not in limits.adapters:
        raise RequestError(404, f"The model `{model}` does not exist.", "model")


def _render_messages(messages: Any, images: list[ImageInput], limits: Limits) -> str:
    """A minimal chat template: each message as `<|role|>` + content, then the assistant cue; the pictures of
    image parts are read into `images`, and stand in the text as their placeholders."""
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list", "messages")
    parts = [f"<|{_role(m)}|>\n{_content(m, images, limits)}\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


def _role(message: Any) -> str:
    if not isinstance(message, dict) or message.get("role") not in CHAT_ROLES:
        raise RequestError(400, f"each message needs a 'role' among {sorted(CHAT_ROLES)}", "messages")
    return message["role"]


def _content(message: dict, images: list[ImageInput], limits: Limits) -> str:
    content = message.get("content")
    if content is None and message["role"] == "assistant":
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(_is_text_part(part) or is_image_part(part) for part in content):
        return "".join(part["text"] if _is_text_part(part) else _image_text(part, images, limits)
                       for part in content)
    raise RequestError(400, "message 'content' must be a string or a list of text and image_url parts", "messages")


def _image_text(part: dict, images: list[ImageInput], limits: Limits) -> str:
    """An image part read into `images`; its placeholder text (a 400 when the server takes no images)."""
    limits.refuse("images")
    try:
        image = read_image_part(part)
    except ValueError as exc:
        raise RequestError(400, f"invalid image: {exc}", "messages") from None
    images.append(image)
    return image.placeholder()


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)


def _prompt_tokens(prompt: Any) -> list[int]:
    """A string, a one-string list, or a list of token ids."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return encode(prompt)
    if isinstance(prompt, list) and prompt and all(_is_int(t) and 0 <= t < VOCAB_SIZE for t in prompt):
        return prompt if prompt[0] == BOS_ID else [BOS_ID, *prompt]
    raise RequestError(400, "'prompt' must be a string or a non-empty list of token ids "
                            f"below {VOCAB_SIZE} (one prompt per request)", "prompt")


def _generation(body: dict, prompt: list[int], prompt_param: str, limits: Limits,
                default_max_tokens: int | None) -> GenerationRequest:
    room = limits.max_model_len - len(prompt)
    if room <= 0:
        raise RequestError(400, f"This model's maximum context length is {limits.max_model_len} tokens. "
                                f"However, your request has {len(prompt)} input tokens.", prompt_param)
    max_tokens = _max_tokens(body, default_max_tokens or room)
    if max_tokens > room:
        raise RequestError(400, f"This model's maximum context length is {limits.max_model_len} tokens. "
                                f"However, you requested {len(prompt) + max_tokens} tokens ({len(prompt)} in "
                                f"the {prompt_param}, {max_tokens} in the completion).", "max_tokens")
    _check_unsupported(body)
    stream = _optional(body, "stream", bool, False)
    n = _optional(body, "n", int, 1)
    if not 1 <= n <= MAX_N:
        raise RequestError(400, f"'n' must be between 1 and {MAX_N}, got {n}", "n")
    return GenerationRequest(prompt, _sampling(body, max_tokens), stream, _include_usage(body, stream), n)


def _max_tokens(body: dict, default: int) -> int:
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    value = body.get(name)
    if value is None:
        return default
    if not _is_int(value) or value <= 0:
        raise RequestError(400, f"'{name}' must be an integer >= 1, got {value!r}", name)
    return value


def _sampling(body: dict, max_tokens: int) -> SamplingParams:
    temperature = _optional(body, "temperature", float, 1.0)
    top_p = _optional(body, "top_p", float, 1.0)
    if temperature < 0:
        raise RequestError(400, "'temperature' must be >= 0", "temperature")
    if not 0 < top_p <= 1:
        raise RequestError(400, "'top_p' must be in (0, 1]", "top_p")
    min_tokens = _optional(body, "min_tokens", int, 0)
    if min_tokens < 0:
        raise RequestError(400, "'min_tokens' must be >= 0", "min_tokens")
    seed = _optional(body, "seed", int, None)
    if seed is not None and not -2**63 <= seed < 2**64:
        raise RequestError(400, "'seed' must fit in 64 bits", "seed")
    return SamplingParams(max_tokens=max_tokens, temperature=float(temperature), top_p=float(top_p), seed=seed,
                          ignore_eos=_optional(body, "ignore_eos", bool, False), min_tokens=min_tokens)


def _include_usage(body: dict, stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not stream:
        raise RequestError(400, "'stream_options' is only allowed when 'stream' is true", "stream_options")
    if not isinstance(options, dict):
        raise RequestError(400, "'stream_options' must be an object", "stream_options")
    return _optional(options, "include_usage", bool, False)


def _check_unsupported(body: dict) -> None:
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
            isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise RequestError(400, "'stop' must be a string or a list of strings", "stop")
    for name in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
        _optional(body, name, float, 0.0)
    _optional(body, "user", str, None)


def _optional(body: dict, name: str, kind: type, default: Any) -> Any:
    """body[name] if present and of `kind`, else `default`; a value of another type is a 400."""
    value = body.get(name)
    if value is None:
        return default
    if not _TYPE_CHECKS[kind](value):
        raise RequestError(400, f"'{name}' must be of type {kind.__name__}, got {type(value).__name__}", name)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is not 1


_TYPE_CHECKS = {
    int: _is_int,
    float: lambda value: _is_int(value) or (isinstance(value, float) and math.isfinite(value)),  # no NaN
    bool: lambda value: isinstance(value, bool),
    str: lambda value: isinstance(value, str),
}
