"""OpenAI response bodies and stream chunks, for chat and for legacy completions."""

import json
import time
import uuid

SSE_DONE = b"data: [DONE]\n\n"


def sse(payload: dict) -> bytes:
    """One server-sent event carrying `payload`."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


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

    def _chunk(self, choice: dict) -> dict:
        extra = {"usage": None} if self.include_usage else {}  # OpenAI: null until the last chunk
        return self._envelope(self.chunk_object, [{"index": 0, "logprobs": None, **choice}], **extra)

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict:
        return self._envelope(self.chunk_object, [], usage=usage(prompt_tokens, completion_tokens))


class ChatFormat(_Format):
    id_prefix = "chatcmpl"
    chunk_object = "chat.completion.chunk"

    def first_chunk(self) -> dict | None:
        return self._chunk({"delta": {"role": "assistant", "content": ""}, "finish_reason": None})

    def delta_chunk(self, text: str, finish_reason: str | None) -> dict:
        return self._chunk({"delta": {"content": text} if text else {}, "finish_reason": finish_reason})

    def full(self, text: str, finish_reason: str, prompt_tokens: int, completion_tokens: int) -> dict:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish_reason}
        return self._envelope("chat.completion", [choice], usage=usage(prompt_tokens, completion_tokens))


class CompletionFormat(_Format):
    id_prefix = "cmpl"
    chunk_object = "text_completion"

    def first_chunk(self) -> dict | None:
        return None

    def delta_chunk(self, text: str, finish_reason: str | None) -> dict:
        return self._chunk({"text": text, "finish_reason": finish_reason})

    def full(self, text: str, finish_reason: str, prompt_tokens: int, completion_tokens: int) -> dict:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return self._envelope("text_completion", [choice], usage=usage(prompt_tokens, completion_tokens))
