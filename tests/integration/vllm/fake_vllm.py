#!/usr/bin/env python3
"""A stand-in for the `vllm` executable: `vllm serve MODEL --host H --port P …` serves a tiny OpenAI-like API.

It exists so the embedded-vLLM target can be tested on a CPU machine. Behaviour is picked with
FAKE_VLLM_MODE, a comma-separated list of:

  ok                 serve normally (the default)
  crash_at_start     print a traceback-like line and exit 3 before listening
  crash_after=S      serve, then exit with code 7 after S seconds
  unhealthy_after=S  serve, but /health answers 503 after S seconds (engine dead, API server alive)
  never_ready        listen, but /health answers 503 forever ("loading")
  slow_start=S       wait S seconds before listening (a long model load)
  ignore_sigterm     ignore SIGTERM, so only SIGKILL ends it
  fork_child         start a child in the same process group that ignores SIGTERM and holds on
  fork_escaped       start a child that leaves the process group (setsid) and holds on

FAKE_VLLM_BACKEND=refserver replaces the tiny API with soak's CPU reference server (exec'd in the same process,
so the PID stays), serving the model under the same name; FAKE_VLLM_REFSERVER_ARGS adds refserver flags (e.g.
`--fault crash-after=2s`). Only the fork modes apply to that backend.

Every start writes `FAKE_VLLM argv=… CUDA_VISIBLE_DEVICES=… pid=…` to stdout (the server log), and each child
it starts writes `FAKE_VLLM child pid=N`, so tests can check what it received and which PIDs it made.
`vllm --version` prints a version, as the real one does.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAKE_VERSION = "0.0.0+fake"


def parse_modes(text: str) -> dict[str, float | bool]:
    """`crash_after=2,ignore_sigterm` → {"crash_after": 2.0, "ignore_sigterm": True}."""
    modes: dict[str, float | bool] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        modes[name] = float(value) if value else True
    return modes


def parse_serve(argv: list[str]) -> tuple[str, str, int, list[str]]:
    """(model, host, port, served names) from `serve MODEL --host H --port P [--served-model-name N…] …`."""
    model, host, port, names = argv[1], "127.0.0.1", 8000, []
    rest = argv[2:]
    for i, arg in enumerate(rest):
        if arg == "--host":
            host = rest[i + 1]
        elif arg == "--port":
            port = int(rest[i + 1])
        elif arg == "--served-model-name":
            names = [n for n in _values_after(rest, i)]
    return model, host, port, names or [model]


def _values_after(args: list[str], i: int) -> list[str]:
    values = []
    for arg in args[i + 1:]:
        if arg.startswith("--"):
            break
        values.append(arg)
    return values


class State:
    """What the handler needs: served names, start time and the health switch."""

    names: list[str] = []
    started_s = time.monotonic()
    modes: dict[str, float | bool] = {}

    @classmethod
    def healthy(cls) -> bool:
        if cls.modes.get("never_ready"):
            return False
        after_s = cls.modes.get("unhealthy_after")
        return not (after_s is not None and time.monotonic() - cls.started_s >= float(after_s))


class Handler(BaseHTTPRequestHandler):
    """/health, /v1/models, /metrics and a non-streaming /v1/chat/completions."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200 if State.healthy() else 503, b"")
        elif self.path == "/v1/models":
            data = [{"id": n, "object": "model", "owned_by": "vllm", "max_model_len": 2048} for n in State.names]
            self._json(200, {"object": "list", "data": data})
        elif self.path == "/metrics":
            self._send(200, b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n",
                       "text/plain; version=0.0.4")
        else:
            self._send(404, b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        message = {"role": "assistant", "content": "ok"}
        self._json(200, {"id": "fake", "object": "chat.completion", "model": body.get("model"),
                         "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    def _json(self, code: int, value: object) -> None:
        self._send(code, json.dumps(value).encode(), "application/json")

    def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # keep the log quiet
        return


def hold_on(escape_group: bool) -> None:
    """A child that ignores SIGTERM and sleeps until killed (as a stuck EngineCore would)."""
    pid = os.fork()
    if pid:
        print(f"FAKE_VLLM child pid={pid}", flush=True)
        return
    if escape_group:
        os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(60)


def exec_refserver(host: str, port: int, name: str) -> None:
    """Become soak's reference server on the same host, port and model name."""
    extra = os.environ.get("FAKE_VLLM_REFSERVER_ARGS", "").split()
    os.execv(sys.executable, [sys.executable, "-m", "soak.refserver", "--host", host, "--port", str(port),
                              "--served-model-name", name, *extra])


def exit_later(after_s: float) -> None:
    """Exit with code 7 after `after_s`, as an engine death would."""
    def run() -> None:
        time.sleep(after_s)
        print("FAKE_VLLM engine died: RuntimeError: CUDA error: an illegal memory access", flush=True)
        os._exit(7)
    threading.Thread(target=run, daemon=True).start()


def serve(argv: list[str]) -> int:
    """The `serve` subcommand."""
    State.modes = parse_modes(os.environ.get("FAKE_VLLM_MODE", "ok"))
    model, host, port, State.names = parse_serve(argv)
    print(f"FAKE_VLLM argv={json.dumps(argv)} CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} "
          f"pid={os.getpid()}", flush=True)
    if State.modes.get("crash_at_start"):
        print("FAKE_VLLM Traceback: ValueError: model weights not found", flush=True)
        return 3
    if State.modes.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for mode, escape in (("fork_child", False), ("fork_escaped", True)):
        if State.modes.get(mode):
            hold_on(escape)
    if os.environ.get("FAKE_VLLM_BACKEND") == "refserver":
        exec_refserver(host, port, State.names[0])
    time.sleep(float(State.modes.get("slow_start", 0.0)))
    if "crash_after" in State.modes:
        exit_later(float(State.modes["crash_after"]))
    server = ThreadingHTTPServer((host, port), Handler)
    State.started_s = time.monotonic()
    print(f"FAKE_VLLM serving {model} on http://{host}:{port}", flush=True)
    server.serve_forever()
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--version":
        print(FAKE_VERSION)
        return 0
    if len(argv) >= 2 and argv[0] == "serve":
        return serve(argv)
    print("usage: vllm serve MODEL [--host H] [--port P] …", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
