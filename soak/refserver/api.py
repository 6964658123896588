"""The HTTP face: an OpenAI-compatible Starlette app in front of the engine.

Every request-level problem answers with an OpenAI-style error body (400/404), injected faults with
500, and a client that goes away — streaming or not — aborts its request in the engine.
"""

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from functools import partial

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from soak.refserver.adapters import AdapterAnswer, AdapterRegistry
from soak.refserver.engine import Engine, TokenEvent
from soak.refserver.images import ImageInput
from soak.refserver.injector import FaultInjector
from soak.refserver.metrics import ServerMetrics
from soak.refserver.protocol import (
    GenerationRequest,
    Limits,
    RequestError,
    decode_json,
    error_body,
    parse_chat,
    parse_completion,
)
from soak.refserver.responses import SSE_DONE, ChatFormat, CompletionFormat, sse
from soak.refserver.structured import Emitter, Structured
from soak.refserver.tokenizer import IncrementalDecoder

VERSION = "0.1.0"
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


# uvicorn sets this logger up to write to stderr, the server log soak scans
refusals_log = logging.getLogger("uvicorn.error")


@dataclass(frozen=True)
class ModelCard:
    """The one model this server serves, as /v1/models describes it."""

    model_name: str
    max_model_len: int
    created: int
    dialect: str = "vllm"  # whose /v1/models fields to imitate

    def describe(self) -> dict:
        """This model's /v1/models entry, with the fields the dialect's server puts there.

        vLLM and SGLang state `max_model_len`; SGLang and llama.cpp name themselves in `owned_by`; llama.cpp
        states its context in `meta.n_ctx`; TGI states none and puts the model id in `owned_by`.
        """
        card = {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "soak",
                "root": self.model_name, "parent": None, "max_model_len": self.max_model_len, "permission": []}
        if self.dialect == "sglang":
            card["owned_by"] = "sglang"
        elif self.dialect == "tgi":
            card = {"id": self.model_name, "object": "model", "created": self.created, "owned_by": self.model_name}
        elif self.dialect == "llamacpp":
            card = {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "llamacpp",
                    "meta": {"n_ctx": self.max_model_len, "n_ctx_train": self.max_model_len}}
        return card


def error_response(status: int, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param), status_code=status)


async def wait_for_disconnect(receive) -> None:
    """Return once the client has gone (the request body must already have been read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class SSEResponse:
    """Streams server-sent events; calls `on_abort` if the stream does not run to its end.

    Disconnects are watched on `receive`, not inferred from failed sends: uvicorn drops writes to a
    closed connection silently, so a stream could otherwise run on for a client long gone.
    """

    def __init__(self, chunks: AsyncIterator[bytes], on_abort: Callable[[], None]) -> None:
        self._chunks = chunks
        self._on_abort = on_abort

    async def __call__(self, scope, receive, send) -> None:
        producer = asyncio.ensure_future(self._produce(send))
        watcher = asyncio.ensure_future(wait_for_disconnect(receive))
        completed = False
        try:
            await asyncio.wait({producer, watcher}, return_when=asyncio.FIRST_COMPLETED)
            completed = producer.done() and producer.result() is None  # result() re-raises a bug
        finally:
            watcher.cancel()
            producer.cancel()
            if not completed:
                self._on_abort()

    async def _produce(self, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        async for chunk in self._chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _no_response(scope, receive, send) -> None:
    """For a client that already left: nothing to send."""


async def _token_events(events: asyncio.Queue) -> AsyncIterator[TokenEvent]:
    while True:
        event = await events.get()
        yield event
        if event.finish_reason is not None:
            return


async def _pieces(events: asyncio.Queue, structured: Structured | None
                  ) -> AsyncIterator[tuple[str, TokenEvent, str | None]]:
    """(text, event, finish reason) per generated token: the decoded bytes, or the next piece of a structured
    answer (all of its rest with the last token, which then finishes as `stop` or `tool_calls`)."""
    decoder = IncrementalDecoder()
    emitter = Emitter(structured) if structured is not None else None
    async for event in _token_events(events):
        last = event.finish_reason is not None
        if emitter is None:
            yield decoder.feed(event.token_id) + (decoder.finish() if last else ""), event, event.finish_reason
        else:
            yield emitter.next_piece(last), event, structured.finish_reason if last else None


def _tool(generation: GenerationRequest) -> tuple[str, str] | None:
    structured = generation.structured
    return (f"call_{uuid.uuid4().hex[:24]}", structured.tool_name) if structured and structured.tool_name else None


async def _stream_chunks(events: asyncio.Queue, fmt, generation: GenerationRequest) -> AsyncIterator[bytes]:
    """SSE chunks for one request: role (chat), text deltas (n choices each), the usage chunk if asked, [DONE]."""
    first, tool, offset, tool_started = fmt.first_chunk(generation.n), _tool(generation), 0, False
    async for text, event, reason in _pieces(events, generation.structured):
        if first is not None:
            yield sse(first)
            first = None
        if text or reason:
            logprobs = None
            if generation.logprobs is not None and text:
                logprobs = fmt.logprobs([(text, event.token_id)], generation.logprobs, offset)
            yield sse(fmt.delta_chunk(text, reason, n=generation.n, logprobs=logprobs, tool=tool,
                                      first_tool_delta=not tool_started))
            tool_started, offset = True, offset + len(text)
    if fmt.include_usage:
        yield sse(fmt.usage_chunk(event.prompt_tokens, event.completion_tokens * generation.n))
    yield SSE_DONE


async def _full_text(events: asyncio.Queue, structured: Structured | None
                     ) -> tuple[list[tuple[str, int]], TokenEvent, str]:
    """Every (text, token id) piece of the answer, the last event and the finish reason."""
    pieces, reason = [], None
    async for text, event, finish in _pieces(events, structured):
        pieces.append((text, event.token_id))
        reason = finish
    return pieces, event, reason


class RefServerApi:
    """Route handlers bound to one engine, fault injector and metrics registry."""

    def __init__(self, engine: Engine, injector: FaultInjector, metrics: ServerMetrics, card: ModelCard,
                 refused: frozenset[str] = frozenset(), image_cost_s_per_mpix: float = 0.0,
                 log_refusals: bool = False) -> None:
        self.engine = engine
        self.injector = injector
        self.metrics = metrics
        self.card = card
        self.adapters = AdapterRegistry(card.model_name, injector.on_adapter_load)
        self.limits = Limits(card.model_name, card.max_model_len, refused, self.adapters)
        self.image_cost_s_per_mpix = image_cost_s_per_mpix
        self.log_refusals = log_refusals

    def routes(self) -> list[Route]:
        return [
            Route("/health", self.health, methods=["GET"]),
            Route("/version", self.version, methods=["GET"]),
            Route("/debug/faults", self.debug_faults, methods=["GET"]),
            Route("/metrics", self.metrics_text, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/load_lora_adapter", self.load_lora_adapter, methods=["POST"]),
            Route("/v1/unload_lora_adapter", self.unload_lora_adapter, methods=["POST"]),
        ]

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)  # stays 200 under hang-after, as vLLM's did (#43941)

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": VERSION, "server": "soak-refserver",
                             "faults": list(self.injector.faults.texts)})

    async def debug_faults(self, request: Request) -> Response:
        return JSONResponse({**self.injector.describe(), **self.adapters.describe()})

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.render(self.engine.snapshot()), media_type=CONTENT_TYPE_LATEST)

    async def models(self, request: Request) -> Response:
        cards = [self.card.describe(), *self.adapters.cards(self.card.created)]
        return JSONResponse({"object": "list", "data": cards})

    async def load_lora_adapter(self, request: Request) -> Response:
        return await self._adapter_change(request, self.adapters.load)

    async def unload_lora_adapter(self, request: Request) -> Response:
        return await self._adapter_change(request, self.adapters.unload)

    async def _adapter_change(self, request: Request, change: Callable[[object], AdapterAnswer]) -> Response:
        """A load or unload: vLLM answers success as plain text, a refusal as an OpenAI error body."""
        try:
            body = decode_json(await request.body())
        except RequestError as exc:
            return error_response(exc.status, exc.message, exc.param)
        answer = change(body)
        if answer.ok:
            return Response(answer.message, media_type="text/plain")
        return error_response(answer.status, answer.message, "lora_name")

    async def chat_completions(self, request: Request):
        return await self._generate(request, parse_chat, ChatFormat)

    async def completions(self, request: Request):
        return await self._generate(request, parse_completion, CompletionFormat)

    async def _generate(self, request: Request, parse, format_class):
        try:
            generation: GenerationRequest = parse(decode_json(await request.body()), self.limits)
        except RequestError as exc:
            if self.log_refusals:  # as vLLM 0.21 does: the refusal's traceback, without the request's id
                refusals_log.exception("Error in preprocessing prompt inputs")
            return error_response(exc.status, exc.message, exc.param)
        failure = self.injector.request_error()
        if failure is not None:
            return error_response(500, failure)
        if generation.images:
            await self._preprocess(generation.images)
        if generation.structured is not None and self.injector.invalid_output():
            generation = replace(generation, structured=generation.structured.broken())
        fmt = format_class(self.card.model_name, generation.include_usage)
        events: asyncio.Queue = asyncio.Queue()
        self.engine.submit(generation.prompt_tokens, generation.params, events, fmt.request_id)
        abort = partial(self.engine.abort, fmt.request_id)
        if generation.stream:
            return SSEResponse(_stream_chunks(events, fmt, generation), on_abort=abort)
        return await self._respond_when_done(request, events, fmt, abort, generation)

    async def _preprocess(self, images: tuple[ImageInput, ...]) -> None:
        """What a vision model's preprocessing costs: time by the pixels (before the engine sees the request, as
        a server's image processor runs first), and the image-leak fault's bytes."""
        self.injector.on_images([image.digest for image in images])
        await asyncio.sleep(sum(image.pixels for image in images) / 1e6 * self.image_cost_s_per_mpix)

    async def _respond_when_done(self, request: Request, events: asyncio.Queue, fmt, abort,
                                 generation: GenerationRequest):
        collector = asyncio.ensure_future(_full_text(events, generation.structured))
        watcher = asyncio.ensure_future(wait_for_disconnect(request.receive))
        try:
            await asyncio.wait({collector, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            client_left = not collector.done()
            if client_left:
                collector.cancel()
                abort()
        if client_left:
            return _no_response
        pieces, last, reason = collector.result()
        logprobs = fmt.logprobs(pieces, generation.logprobs) if generation.logprobs is not None else None
        return JSONResponse(fmt.full("".join(text for text, _ in pieces), reason, last.prompt_tokens,
                                     last.completion_tokens, n=generation.n, logprobs=logprobs,
                                     tool=_tool(generation)))


def publish_to_loop(loop: asyncio.AbstractEventLoop):
    """An engine publisher that hands each step's events to the event loop in one hop."""

    def deliver(events: list[tuple[asyncio.Queue, TokenEvent]]) -> None:
        for queue, event in events:
            queue.put_nowait(event)

    def publish(events: list[tuple[asyncio.Queue, TokenEvent]]) -> None:
        try:
            loop.call_soon_threadsafe(deliver, events)
        except RuntimeError:  # the loop has closed: the server is shutting down
            pass

    return publish


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return error_response(exc.status_code, str(exc.detail))


def build_app(api: RefServerApi) -> Starlette:
    return Starlette(routes=api.routes(), exception_handlers={HTTPException: _http_error})
