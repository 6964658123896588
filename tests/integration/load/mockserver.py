"""A small OpenAI-compatible SSE server for soak's load tests, with deterministic timing and hostile modes.

Run: `python mockserver.py [--max-model-len N]`; it binds 127.0.0.1 on a free port and prints
`MOCK_READY http://127.0.0.1:PORT`. Behaviour is chosen per request by the model name, so one server can
serve many tests at once: `mock` or `mock?mode=truncated&ttft_ms=50&itl_ms=10&tokens=8&tag=t1`.

Timing: first content chunk at ttft_ms after the request arrives, then one every itl_ms (on an absolute
schedule, so delays do not drift). Tokens: `tokens`, else the request's max_tokens, else 16. Usage counts
prompt bytes as tokens, like the byte-level reference server.

Modes: normal, truncated (connection dropped mid-stream), no_done (clean end without [DONE]), invalid_json,
error_event (an error object mid-stream), wrong_ct (SSE as text/plain), error_body (200 with a JSON error),
trickle (events dribbled a few bytes at a time), never_end (keep-alive comments forever), hang (no
response), http500, http400, reject500 (invalid requests get a 500 instead of a 4xx).
`stall_until=EPOCH` holds every request until that wall time.

Server-wide options: `--context-style vllm|llamacpp|none` says where /v1/models states the context (vLLM's
`max_model_len`; llama.cpp's `meta.n_ctx`, with `meta.n_ctx_train` = 4 × it and GET /props
`default_generation_settings.n_ctx`; or nowhere). `--lenient` accepts what a lax server accepts — malformed
JSON, unknown models, empty messages, max_tokens beyond the context (all generated, unless the model names
`tokens`) — and refuses only a prompt beyond the context. `--ttft-ms`/`--itl-ms` set the timing of what
`--lenient` answers for a model name that gives none.

GET /_mock/stats?tag=T → {"requests", "arrivals", "completed", "disconnects", "active", "max_active", "kinds",
"models", "bodies" (the first 200), "auth" (Authorization headers seen)}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from urllib.parse import parse_qsl

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "mock"
MAX_MODEL_LEN = 4096
MAX_HANG_S = 120.0


@dataclass
class Behaviour:
    mode: str = "normal"
    ttft_ms: float = 20.0
    itl_ms: float = 10.0
    tokens: int | None = None
    tag: str = ""
    stall_until: float = 0.0


def parse_model(model: object) -> Behaviour | None:
    """`mock?k=v&…` → Behaviour; None for any other model name."""
    if not isinstance(model, str):
        return None
    name, _, query = model.partition("?")
    if name != MODEL:
        return None
    params = dict(parse_qsl(query))
    behaviour = Behaviour(mode=params.get("mode", "normal"), tag=params.get("tag", ""))
    for key in ("ttft_ms", "itl_ms", "stall_until"):
        if key in params:
            setattr(behaviour, key, float(params[key]))
    if "tokens" in params:
        behaviour.tokens = int(params["tokens"])
    return behaviour


class Stats:
    """Counts per tag, readable over HTTP by the tests."""

    def __init__(self) -> None:
        self.by_tag: dict[str, dict] = defaultdict(lambda: {"requests": 0, "arrivals": [], "completed": 0,
                                                            "disconnects": 0, "active": 0, "max_active": 0,
                                                            "kinds": defaultdict(int), "models": defaultdict(int),
                                                            "bodies": [], "auth": []})

    def arrival(self, tag: str, kind: str, model: str, body: dict, auth: str | None) -> None:
        entry = self.by_tag[tag]
        entry["requests"] += 1
        entry["active"] += 1
        entry["max_active"] = max(entry["max_active"], entry["active"])
        if auth is not None and auth not in entry["auth"]:
            entry["auth"].append(auth)
        entry["arrivals"].append(time.time())
        entry["kinds"][kind] += 1
        entry["models"][model] += 1
        if len(entry["bodies"]) < 200:
            entry["bodies"].append(body)


STATS = Stats()


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "BadRequestError", "code": status}},
                        status_code=status)


def prompt_bytes(kind: str, body: dict) -> int:
    if kind == "chat":
        return sum(len(_text_of(m.get("content", "")).encode()) for m in body.get("messages") or []
                   if isinstance(m, dict))
    return len(str(body.get("prompt", "")).encode())


def _text_of(content: object) -> str:
    """A message's text: its text parts when it has parts (an image part costs nothing here)."""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def validate(kind: str, body: object, max_model_len: int) -> JSONResponse | None:
    """Reject what vLLM rejects: bad shapes, unknown models, prompts or max_tokens beyond the context."""
    if not isinstance(body, dict):
        return error(400, "request body must be a JSON object")
    if parse_model(body.get("model")) is None:
        return error(404, f"The model `{body.get('model')}` does not exist.")
    if kind == "chat" and (not isinstance(body.get("messages"), list) or not body["messages"]):
        return error(400, "messages must be a non-empty list")
    used = prompt_bytes(kind, body)
    max_tokens = body.get("max_tokens")
    if used >= max_model_len:
        return error(400, f"prompt is {used} tokens, more than max_model_len {max_model_len}")
    if isinstance(max_tokens, int) and used + max_tokens > max_model_len:
        return error(400, f"max_tokens {max_tokens} exceeds the context ({max_model_len} - {used})")
    return None


def chunk(kind: str, text: str | None, usage: dict | None = None) -> bytes:
    if kind == "chat":
        choices = [] if text is None else [{"index": 0, "delta": {"content": text}, "finish_reason": None}]
        payload = {"id": "c1", "object": "chat.completion.chunk", "model": MODEL, "choices": choices}
    else:
        choices = [] if text is None else [{"index": 0, "text": text, "finish_reason": None}]
        payload = {"id": "c1", "object": "text_completion", "model": MODEL, "choices": choices}
    if usage is not None:
        payload["usage"] = usage
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


async def sleep_until(wall_t: float) -> None:
    delay = wall_t - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


async def token_events(kind: str, b: Behaviour, n_tokens: int, used: int, start_t: float):
    """The SSE events of a stream, each at its scheduled time, with the hostile twists of `b.mode`."""
    await sleep_until(max(start_t, b.stall_until))
    first_t = max(start_t, b.stall_until) + b.ttft_ms / 1000.0
    for index in range(n_tokens):
        await sleep_until(first_t + index * b.itl_ms / 1000.0)
        if index == 2 and b.mode == "truncated":
            raise ConnectionAbortedError("mock: dropping the connection mid-stream")
        if index == 2 and b.mode == "invalid_json":
            yield b'data: {"choices": [{"delta": {"content": "x"\n\n'
        if index == 2 and b.mode == "error_event":
            yield b'data: {"error": {"message": "engine failed", "code": 500}}\n\n'
        yield chunk(kind, f"tok{index} ")
    if b.mode == "never_end":
        for _ in range(int(MAX_HANG_S / 0.2)):
            await asyncio.sleep(0.2)
            yield b": keep-alive\n\n"
        return
    yield chunk(kind, None, {"prompt_tokens": used, "completion_tokens": n_tokens, "total_tokens": used + n_tokens})
    if b.mode != "no_done":
        yield b"data: [DONE]\n\n"


async def tracked(events, tag: str):
    """Count streams that finish and streams the client walked away from."""
    finished = False
    try:
        async for event in events:
            yield event
        finished = True
    finally:
        STATS.by_tag[tag]["completed" if finished else "disconnects"] += 1
        STATS.by_tag[tag]["active"] -= 1


async def trickled(events):
    async for event in events:
        for offset in range(0, len(event), 5):
            yield event[offset:offset + 5]
            await asyncio.sleep(0.003)


def lenient_body(raw: bytes, max_model_len: int) -> tuple[dict, JSONResponse | None]:
    """A lax server's reading: whatever parses (else an empty chat), refused only for a prompt beyond the context."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    used = prompt_bytes("chat" if "messages" in body else "completion", body)
    if used >= max_model_len:
        return body, error(400, f"the request exceeds the available context size ({max_model_len} tokens)")
    return body, None


async def completion(request: Request, kind: str) -> Response:
    start_t = time.time()
    raw = await request.body()
    state = request.app.state
    if state.lenient:
        body, rejected = lenient_body(raw, state.max_model_len)
        if rejected is None:
            return await respond(kind, body, parse_model(body.get("model")) or state.default_behaviour, start_t)
        return rejected
    try:
        body = json.loads(raw)
    except ValueError:
        return error(400, "malformed JSON in request body")
    rejected = validate(kind, body, request.app.state.max_model_len)
    if rejected is not None:
        behaviour = parse_model(body.get("model")) if isinstance(body, dict) else None
        if behaviour is not None and behaviour.mode == "reject500":
            rejected.status_code = 500
        return rejected
    b = parse_model(body["model"])
    STATS.arrival(b.tag, kind, body["model"], body, request.headers.get("authorization"))
    response = await respond(kind, body, b, start_t)
    if not isinstance(response, StreamingResponse):
        STATS.by_tag[b.tag]["active"] -= 1  # streams count themselves out when they end
    return response


async def respond(kind: str, body: dict, b: Behaviour, start_t: float) -> Response:
    n_tokens = b.tokens if b.tokens is not None else int(body.get("max_tokens") or 16)
    used = prompt_bytes(kind, body)
    if b.mode == "hang":
        await asyncio.sleep(MAX_HANG_S)
    if b.mode in ("http500", "http400"):
        await sleep_until(start_t + b.ttft_ms / 1000.0)
        return error(int(b.mode[4:]), f"mock {b.mode}")
    if b.mode == "error_body":
        return JSONResponse({"error": {"message": "model overloaded", "code": 503}})
    if not body.get("stream"):
        return await whole(kind, b, n_tokens, used, start_t)
    events = tracked(token_events(kind, b, n_tokens, used, start_t), b.tag)
    if b.mode == "trickle":
        events = trickled(events)
    media_type = "text/plain" if b.mode == "wrong_ct" else "text/event-stream"
    return StreamingResponse(events, media_type=media_type)


async def whole(kind: str, b: Behaviour, n_tokens: int, used: int, start_t: float) -> JSONResponse:
    await sleep_until(max(start_t, b.stall_until) + (b.ttft_ms + (n_tokens - 1) * b.itl_ms) / 1000.0)
    text = "".join(f"tok{i} " for i in range(n_tokens))
    message = {"message": {"role": "assistant", "content": text}} if kind == "chat" else {"text": text}
    choice = {"index": 0, **message}
    STATS.by_tag[b.tag]["completed"] += 1
    return JSONResponse({"id": "c1", "model": MODEL, "choices": [{**choice, "finish_reason": "length"}],
                         "usage": {"prompt_tokens": used, "completion_tokens": n_tokens,
                                   "total_tokens": used + n_tokens}})


async def chat_endpoint(request: Request) -> Response:
    return await completion(request, "chat")


async def completions_endpoint(request: Request) -> Response:
    return await completion(request, "completion")


async def models_endpoint(request: Request) -> Response:
    card = {"id": MODEL, "object": "model"}
    n_ctx, style = request.app.state.max_model_len, request.app.state.context_style
    if style == "vllm":
        card["max_model_len"] = n_ctx
    elif style == "llamacpp":
        card["owned_by"] = "llamacpp"
        card["meta"] = {"n_ctx": n_ctx, "n_ctx_train": 4 * n_ctx, "n_vocab": 32000}
    return JSONResponse({"object": "list", "data": [card]})


async def props_endpoint(request: Request) -> Response:
    if request.app.state.context_style != "llamacpp":
        return JSONResponse({"error": {"message": "Not Found", "code": 404}}, status_code=404)
    return JSONResponse({"default_generation_settings": {"n_ctx": request.app.state.max_model_len}, "total_slots": 1})


async def stats_endpoint(request: Request) -> Response:
    return JSONResponse(STATS.by_tag[request.query_params.get("tag", "")])


def make_app(max_model_len: int = MAX_MODEL_LEN, context_style: str = "vllm", lenient: bool = False,
             default_behaviour: Behaviour | None = None) -> Starlette:
    app = Starlette(routes=[
        Route("/v1/chat/completions", chat_endpoint, methods=["POST"]),
        Route("/v1/completions", completions_endpoint, methods=["POST"]),
        Route("/v1/models", models_endpoint),
        Route("/props", props_endpoint),
        Route("/_mock/stats", stats_endpoint),
    ])
    app.state.max_model_len = max_model_len
    app.state.context_style = context_style
    app.state.lenient = lenient
    app.state.default_behaviour = default_behaviour or Behaviour()
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-model-len", type=int, default=MAX_MODEL_LEN)
    parser.add_argument("--context-style", choices=("vllm", "llamacpp", "none"), default="vllm")
    parser.add_argument("--lenient", action="store_true")
    parser.add_argument("--ttft-ms", type=float, default=Behaviour.ttft_ms)
    parser.add_argument("--itl-ms", type=float, default=Behaviour.itl_ms)
    args = parser.parse_args(argv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # connections made before uvicorn starts wait in the backlog
    port = sock.getsockname()[1]
    app = make_app(args.max_model_len, args.context_style, args.lenient, Behaviour(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms))
    config = uvicorn.Config(app, log_level="critical", lifespan="off",
                            timeout_keep_alive=30, backlog=2048)
    server = uvicorn.Server(config)
    print(f"MOCK_READY http://127.0.0.1:{port}", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
