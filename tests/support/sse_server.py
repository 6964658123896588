"""A tiny OpenAI-compatible SSE server with fixed timing, for the client benches and the starved-client test.

Every chat or completion request is answered with `--tokens` content chunks: the first `--ttft-ms` after the
request arrived, then one every `--itl-ms` on an absolute schedule (a late chunk does not delay the next),
each event its own HTTP chunk, then a usage chunk and `[DONE]`, chunked, on a keep-alive connection. The chunks
that are due go out in one write: one per write at a steady ITL, the whole answer at once with `--itl-ms 0`.
It binds 127.0.0.1 on a free port and prints `SSE_READY http://127.0.0.1:PORT`. GET /stats → {"requests",
"tokens", "first_token_sent": [[id, epoch_s], …] (the send time of each request's first chunk, given an
`x-bench-id` header), "stream_connections" (how many connections carried a stream)}; GET /v1/models and
/health answer as a server would.

    python tests/support/sse_server.py --ttft-ms 200 --itl-ms 20 --tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time

CHUNK = json.dumps({"id": "b", "object": "chat.completion.chunk", "model": "bench",
                    "choices": [{"index": 0, "delta": {"content": "tok"}, "finish_reason": None}]})
LAST = json.dumps({"id": "b", "object": "chat.completion.chunk", "model": "bench",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})


def sse(data: str) -> bytes:
    """One SSE event as one HTTP chunk."""
    body = f"data: {data}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(body), body)


TOKEN_EVENT = sse(CHUNK)


class Server:
    def __init__(self, ttft_s: float, itl_s: float, tokens: int) -> None:
        self.ttft_s, self.itl_s, self.tokens = ttft_s, itl_s, tokens
        self.requests = 0
        self.tokens_sent = 0
        self.first_sent: list[tuple[str, float]] = []
        self.stream_connections: set[int] = set()  # ids of the connections that carried a stream

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self.one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        arrived = time.time()
        lines = head.decode("latin-1").split("\r\n")
        method, path = lines[0].split(" ")[:2]
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if int(headers.get("content-length") or 0):
            await reader.readexactly(int(headers["content-length"]))
        if method == "GET":
            await self.answer_get(path, writer)
        else:
            self.stream_connections.add(id(writer))
            await self.stream(writer, arrived, headers.get("x-bench-id"))
        return headers.get("connection", "").lower() != "close"

    async def answer_get(self, path: str, writer: asyncio.StreamWriter) -> None:
        if path.startswith("/v1/models"):
            body = {"object": "list", "data": [{"id": "bench", "object": "model", "max_model_len": 4096}]}
        elif path.startswith("/stats"):
            body = {"requests": self.requests, "tokens": self.tokens_sent, "first_token_sent": self.first_sent,
                    "stream_connections": len(self.stream_connections)}
        elif path.startswith("/health"):
            body = {}
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return await writer.drain()
        data = json.dumps(body).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(data), data))
        await writer.drain()

    def due(self, arrived: float, index: int) -> int:
        """How many chunks from `index` on are due by now (at least one): with ITL 0, all that are left."""
        if self.itl_s <= 0:
            return self.tokens - index
        elapsed_s = time.time() - arrived - self.ttft_s
        return max(1, min(int(elapsed_s / self.itl_s) + 1 - index, self.tokens - index))

    async def stream(self, writer: asyncio.StreamWriter, arrived: float, bench_id: str | None) -> None:
        self.requests += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        index = 0
        while index < self.tokens:
            wait_s = arrived + self.ttft_s + index * self.itl_s - time.time()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            due = self.due(arrived, index)
            writer.write(TOKEN_EVENT * due)
            if index == 0 and bench_id:
                self.first_sent.append((bench_id, time.time()))
            await writer.drain()
            index += due
            self.tokens_sent += due
        usage = {"prompt_tokens": 8, "completion_tokens": self.tokens, "total_tokens": 8 + self.tokens}
        writer.write(sse(LAST) + sse(json.dumps({"id": "b", "choices": [], "usage": usage})) + sse("[DONE]")
                     + b"0\r\n\r\n")
        await writer.drain()


async def serve(args: argparse.Namespace) -> None:
    server = Server(args.ttft_ms / 1000.0, args.itl_ms / 1000.0, args.tokens)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    async with await asyncio.start_server(server.handle, sock=listener, backlog=1024):
        print(f"SSE_READY http://127.0.0.1:{listener.getsockname()[1]}", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--tokens", type=int, default=64)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
