"""Helpers of the scheduling tests: the soak CLI as a subprocess, a daemon process, a webhook receiver, and a
minimal OpenAI-compatible server — all on 127.0.0.1 port 0, all bounded in time."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from support.processes import stop_process

# `soak` with the scheduling commands, whether or not soak/cli.py registers them yet.
BOOTSTRAP = (
    "from soak.cli import main\n"
    "from soak.cli.schedule import daemon, schedule\n"
    "main.commands.setdefault('schedule', schedule)\n"
    "main.commands.setdefault('daemon', daemon)\n"
    "main(prog_name='soak')\n"
)
SOAK = (sys.executable, "-c", BOOTSTRAP)


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.1) -> Any:
    """Poll `predicate` until it returns something truthy; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


def soak(*args: str, env: dict[str, str] | None = None, timeout_s: float = 60) -> subprocess.CompletedProcess:
    """`soak ARGS…` in a fresh interpreter, output captured as text."""
    return subprocess.run([*SOAK, *args], capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **(env or {})})


def soak_json(*args: str, env: dict[str, str] | None = None) -> Any:
    result = soak(*args, "--json", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


class DaemonProcess:
    """`soak daemon` as a child of the test, its stderr collected line by line."""

    def __init__(self, out: Path, env: dict[str, str] | None = None, *extra: str):
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen([*SOAK, "daemon", "--out", str(out), "--poll-every", "0.2s", *extra],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, **(env or {})})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait_ready(self, timeout_s: float = 30) -> None:
        wait_until(lambda: "ready:" in self.text() or self.proc.poll() is not None, timeout_s, "the daemon's ready line")
        assert self.proc.poll() is None, f"daemon exited {self.proc.returncode}:\n{self.text()}"

    def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM, then wait; SIGKILL (and fail) only if it does not stop in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"daemon did not stop within {timeout_s} s:\n{self.text()}") from None
        finally:
            self._reader.join(timeout=5)


class WebhookReceiver:
    """A local HTTP server that records every POSTed JSON body; answers `statuses` in turn, then 200."""

    def __init__(self, statuses: list[int] | None = None):
        self.bodies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.requests = 0
        self._statuses = list(statuses or [])
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests += 1
                status = receiver._statuses.pop(0) if receiver._statuses else 200
                if status == 200:
                    receiver.bodies.put(json.loads(body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T000/SECRET-TOKEN"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _stub_app():  # returns a Starlette app
    """/health, /v1/models, /metrics and streaming /v1/chat/completions + /v1/completions with a few tokens."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from starlette.routing import Route

    model = "stub-model"

    async def health(_: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": model, "object": "model", "owned_by": "test"}]})

    async def metrics(_: Request) -> PlainTextResponse:
        return PlainTextResponse("", media_type="text/plain; version=0.0.4")

    def chunk(kind: str, text: str | None, finish: str | None) -> str:
        if kind == "chat":
            choice = {"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish}
        return "data: " + json.dumps({"id": "x", "object": "chunk", "model": model, "choices": [choice]}) + "\n\n"

    def complete(kind: str):
        async def endpoint(request: Request):
            body = await request.json()
            words = ["a", " b", " c", " d"][: max(1, min(int(body.get("max_tokens") or 4), 4))]
            if not body.get("stream"):
                message = {"message": {"role": "assistant", "content": "".join(words)}} if kind == "chat" \
                    else {"text": "".join(words)}
                return JSONResponse({"id": "x", "model": model, "choices": [{"index": 0, **message,
                                     "finish_reason": "length"}],
                                     "usage": {"prompt_tokens": 4, "completion_tokens": len(words)}})

            async def stream():
                for word in words:
                    yield chunk(kind, word, None)
                yield chunk(kind, None, "length")
                usage = {"prompt_tokens": 4, "completion_tokens": len(words), "total_tokens": 4 + len(words)}
                yield "data: " + json.dumps({"id": "x", "model": model, "choices": [], "usage": usage}) + "\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(stream(), media_type="text/event-stream")
        return endpoint

    return Starlette(routes=[Route("/health", health), Route("/v1/models", models), Route("/metrics", metrics),
                             Route("/v1/chat/completions", complete("chat"), methods=["POST"]),
                             Route("/v1/completions", complete("text"), methods=["POST"])])


@contextmanager
def openai_stub() -> Iterator[str]:
    """Serve the stub on 127.0.0.1, port 0, in a process of its own; yield its base URL (no /v1).

    Not in a thread of the test: pytest loads Locust's plugin, whose gevent patches make threads greenlets, and
    uvicorn on uvloop (installed beside vLLM) never yields to them, so the test would hang."""
    # The child imports this module, which imports tests/support: both folders go on its path, as pytest puts them.
    here = Path(__file__).parent
    pythonpath = [str(here), str(here.parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]
    process = subprocess.Popen([sys.executable, "-c", "import schedule_helpers; schedule_helpers.serve_stub()"],
                               cwd=here, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)})
    try:
        line = process.stdout.readline() if process.stdout else ""  # the stub prints its port, then serves
        if not line.startswith("STUB_READY "):
            raise AssertionError(f"the OpenAI stub did not start (exit {process.poll()}, said {line!r})")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        stop_process(process)


def serve_stub() -> None:
    """The stub's process: bind port 0, say which port, serve until SIGTERM."""
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections made before uvicorn starts wait in the backlog
    server = uvicorn.Server(uvicorn.Config(_stub_app(), log_level="warning", lifespan="off"))
    print(f"STUB_READY {sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])
