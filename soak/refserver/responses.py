"""OpenAI response bodies and stream chunks, for chat and for legacy completions.

Every choice of an `n` > 1 request carries the same generated text (the engine runs one sequence); logprobs are
synthetic — a value derived from the token id, and as many lower alternatives as asked — but shaped as vLLM
sends them. A tool call (`tool`: its call id and function name) streams as `tool_calls` deltas.
"""

import json
import time
import uuid

SSE_DONE = b"data: [DONE]\n\n"


def sse(payload: dict) -> bytes:
    """One server-sent event carrying `payload`."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def token_logprob(token_id: int) -> float:
    """A synthetic, stable logprob for a token."""
    return -((token_id % 16) + 1) / 8.0


def _alternatives(token_id: int, top: int) -> list[tuple[str, float]]:
    """`top` alternatives of decreasing logprob, the token itself first."""
    return [(chr(32 + (token_id + k) % 95), token_logprob(token_id) - k) for k in range(top)]


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


class _Format:
    """What chat and completions responses share: id, timestamps, model, the usage-only chunk."""

    id_prefix = ""
    chunk_object = ""

    def __init__(self, model: str, include_usage: bool = False) -> None:
        self.request_id = f"{self.id_prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage

    def _envelope(self, obj: str, choices: list, **extra) -> dict:
        return {"id": self.request_id, "object": obj, "created": self.created, "model": self.model,
                "choices": choices, **extra}

    def _chunk(self, choice: dict, n: int = 1) -> dict:
        extra = {"usage": None} if self.include_usage else {}  # OpenAI: null until the last chunk
        return self._envelope(self.chunk_object, [{"index": i, "logprobs": None, **choice} for i in range(n)],
                              **extra)

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict:
        return self._envelope(self.chunk_object, [], usage=usage(prompt_tokens, completion_tokens))


class ChatFormat(_Format):
    id_prefix = "chatcmpl"
    chunk_object = "chat.completion.chunk"

    def first_chunk(self, n: int = 1) -> dict | None:
        return self._chunk({"delta": {"role": "assistant", "content": ""}, "finish_reason": None}, n)

    def delta_chunk(self, text: str, finish_reason: str | None, *, n: int = 1, logprobs: dict | None = None,
                    tool: tuple[str, str] | None = None, first_tool_delta: bool = False) -> dict:
        if tool is None:
            delta: dict = {"content": text} if text else {}
        elif first_tool_delta:
            delta = {"tool_calls": [{"index": 0, "id": tool[0], "type": "function",
                                     "function": {"name": tool[1], "arguments": text}}]}
        else:
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": text}}]} if text else {}
        return self._chunk({"delta": delta, "finish_reason": finish_reason, "logprobs": logprobs}, n)

    @staticmethod
    def logprobs(pieces: list[tuple[str, int]], top: int, offset: int = 0) -> dict:
        """`{"content": [...]}` for (text, token id) pieces, each with `top` alternatives."""
        return {"content": [{"token": text, "logprob": token_logprob(token_id), "bytes": list(text.encode()),
                             "top_logprobs": [{"token": alt, "logprob": lp, "bytes": list(alt.encode())}
                                              for alt, lp in _alternatives(token_id, top)]}
                            for text, token_id in pieces]}

    def full(self, text: str, finish_reason: str, prompt_tokens: int, completion_tokens: int, *, n: int = 1,
             logprobs: dict | None = None, tool: tuple[str, str] | None = None) -> dict:
        message: dict = {"role": "assistant", "content": text}
        if tool is not None:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": tool[0], "type": "function", "function": {"name": tool[1], "arguments": text}}]}
        choices = [{"index": i, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}
                   for i in range(n)]
        return self._envelope("chat.completion", choices, usage=usage(prompt_tokens, completion_tokens * n))


class CompletionFormat(_Format):
    id_prefix = "cmpl"
    chunk_object = "text_completion"

    def first_chunk(self, n: int = 1) -> dict | None:
        return None

    def delta_chunk(self, text: str, finish_reason: str | None, *, n: int = 1, logprobs: dict | None = None,
                    tool: tuple[str, str] | None = None, first_tool_delta: bool = False) -> dict:
        return self._chunk({"text": text, "finish_reason": finish_reason, "logprobs": logprobs}, n)

    @staticmethod
    def logprobs(pieces: list[tuple[str, int]], top: int, offset: int = 0) -> dict:
        """The legacy shape: parallel lists of tokens, their logprobs, alternatives and text offsets."""
        offsets, at = [], offset
        for text, _ in pieces:
            offsets.append(at)
            at += len(text)
        return {"tokens": [text for text, _ in pieces],
                "token_logprobs": [token_logprob(token_id) for _, token_id in pieces],
                "top_logprobs": [dict(_alternatives(token_id, top)) for _, token_id in pieces],
                "text_offset": offsets}

    def full(self, text: str, finish_reason: str, prompt_tokens: int, completion_tokens: int, *, n: int = 1,
             logprobs: dict | None = None, tool: tuple[str, str] | None = None) -> dict:
        choices = [{"index": i, "text": text, "logprobs": logprobs, "finish_reason": finish_reason} for i in range(n)]
        return self._envelope("text_completion", choices, usage=usage(prompt_tokens, completion_tokens * n))
