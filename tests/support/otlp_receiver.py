"""A real OTLP/HTTP metrics receiver for tests and benches: decodes each protobuf push and keeps what came.

It binds 127.0.0.1 on a free port, prints `OTLP_RECEIVER_READY PORT`, and serves until SIGTERM. Every POST is
decoded as an `ExportMetricsServiceRequest` (gzip or deflate bodies too) and appended to `--out` as one JSON line:
`{"at", "path", "status", "headers", "bytes", "request"}`, `request` being the protobuf message as JSON
(`MessageToDict`, field names as in the .proto). The first `--fail-first N` POSTs are answered 503 (a collector
that is not ready yet); the rest 200 with an empty `ExportMetricsServiceResponse`. `--no-decode` leaves `request`
out: a bench's cheapest collector, which only counts what came.

It is a process of its own, not a thread of the test: pytest loads Locust's plugin, whose gevent patches turn a
test's threads into greenlets (tests/integration/schedule/schedule_helpers.py, `openai_stub`).

    python tests/support/otlp_receiver.py --out pushes.jsonl [--fail-first 4]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

READY = "OTLP_RECEIVER_READY"


def decode_body(body: bytes, encoding: str) -> dict[str, Any]:
    """An ExportMetricsServiceRequest body (as the exporter compressed it) as a dict of the .proto's names."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    if encoding == "gzip":
        body = gzip.decompress(body)
    elif encoding == "deflate":
        body = zlib.decompress(body)
    message = ExportMetricsServiceRequest()
    message.ParseFromString(body)
    return MessageToDict(message, preserving_proto_field_name=True)


class Receiver:
    """What the handler shares: how many POSTs came, how many to refuse first, where to write them."""

    def __init__(self, out: Path, fail_first: int, decode: bool = True) -> None:
        self.out, self.fail_first, self.decode = out, fail_first, decode
        self.posts = 0
        self.lock = threading.Lock()

    def status_for_next(self) -> int:
        """503 for the first `fail_first` POSTs, then 200."""
        with self.lock:
            self.posts += 1
            return 503 if self.posts <= self.fail_first else 200

    def keep(self, entry: dict[str, Any]) -> None:
        """Append one push as a JSON line (flushed: the test reads the file while the run goes on)."""
        with self.lock, self.out.open("a") as file:
            file.write(json.dumps(entry) + "\n")


def handler_for(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to `receiver`."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a collector serves the exporter's pooled connection

        def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status = receiver.status_for_next()
            entry: dict[str, Any] = {"at": time.time(), "path": self.path, "status": status, "bytes": len(body),
                                     "headers": {key.lower(): value for key, value in self.headers.items()}}
            if receiver.decode:
                entry["request"] = decode_body(body, self.headers.get("Content-Encoding", ""))
            receiver.keep(entry)
            self._answer(status)

        def _answer(self, status: int) -> None:
            payload = b"" if status == 200 else b"not ready"  # an empty ExportMetricsServiceResponse is 0 bytes
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf" if status == 200 else "text/plain")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            pass

    return Handler


def serve(out: Path, fail_first: int, decode: bool) -> None:
    """Bind a free port, say which, serve until killed."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(Receiver(out, fail_first, decode)))
    server.daemon_threads = True
    print(f"{READY} {server.server_address[1]}", flush=True)
    server.serve_forever()


@dataclass
class RunningReceiver:
    """A receiver process the caller started: its port and what it has kept so far."""

    process: subprocess.Popen
    port: int
    out: Path

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pushes(self) -> list[dict[str, Any]]:
        """Every POST kept so far, in arrival order."""
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]


@contextmanager
def otlp_receiver(out: Path, fail_first: int = 0, decode: bool = True,
                  start_timeout_s: float = 60.0) -> Iterator[RunningReceiver]:
    """Start the receiver in a process of its own, keeping the pushes in `out`; stop it (by its PID) when the
    block ends."""
    from support.processes import stop_process

    command = [sys.executable, str(Path(__file__).resolve()), "--out", str(out), "--fail-first", str(fail_first)]
    command += [] if decode else ["--no-decode"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        port = _ready_port(process, start_timeout_s)
        yield RunningReceiver(process, port, out)
    finally:
        stop_process(process)
        if process.stdout is not None:
            process.stdout.close()


def _ready_port(process: subprocess.Popen, timeout_s: float) -> int:
    """The port from the receiver's first line, read on a thread so a receiver that never speaks cannot hang us."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    line = lines[0] if lines else ""
    if not line.startswith(READY):
        raise AssertionError(f"the OTLP receiver did not start (exit {process.poll()}, said {line!r})")
    return int(line.split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON lines file of the pushes")
    parser.add_argument("--no-decode", action="store_true", help="keep each push's headers and size only")
    parser.add_argument("--fail-first", type=int, default=0, help="answer the first N POSTs 503")
    args = parser.parse_args()
    serve(args.out, args.fail_first, decode=not args.no_decode)


if __name__ == "__main__":
    main()
