"""A small router for the fleet tests: round robin over the upstream servers given on the command line, each
answer streamed back chunk by chunk as it arrives (SSE passes through), keep-alive on both sides.

    python tests/support/tiny_router.py http://127.0.0.1:8001 http://127.0.0.1:8002 …

It listens on a port the OS picks, prints `TINY_ROUTER_READY http://127.0.0.1:PORT`, and serves no /metrics of
its own (a 404), as many routers do not.
"""

from __future__ import annotations

import http.client
import itertools
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
UPSTREAM_TIMEOUT_S = 600


class Upstreams:
    """The upstream servers, taken in turn by every request (thread-safe)."""

    def __init__(self, urls: list[str]):
        self._hosts = [urllib.parse.urlsplit(url).netloc for url in urls]
        self._turn = itertools.cycle(range(len(self._hosts)))
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            return self._hosts[next(self._turn)]


class RouterHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked answers, as the client expects of a server
    # An idle keep-alive connection is closed after 5 s, as uvicorn does: without it every connection a client's
    # pool ever opened stays open here, and soak rightly FAILs the router on leak.fds.
    timeout = 5
    upstreams: Upstreams

    def do_GET(self) -> None:
        if self.path.startswith("/metrics"):
            self._answer(404, b"no metrics here\n")
            return
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | {"host"}}
        upstream = http.client.HTTPConnection(self.upstreams.next(), timeout=UPSTREAM_TIMEOUT_S)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            self._relay(upstream.getresponse())
        except OSError as exc:
            self._answer(502, f"upstream failed: {exc}\n".encode())
        finally:
            upstream.close()

    def _relay(self, response: http.client.HTTPResponse) -> None:
        """The upstream's status and headers, then its body as it comes: chunked unless it gave a length."""
        self.send_response(response.status)
        sized = response.getheader("Content-Length") is not None
        for key, value in response.getheaders():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        if not sized:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while chunk := response.read1(65536):
            self.wfile.write(chunk if sized else b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        if not sized:
            self.wfile.write(b"0\r\n\r\n")

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


def main(urls: list[str]) -> None:
    RouterHandler.upstreams = Upstreams(urls)
    server = ThreadingHTTPServer(("127.0.0.1", 0), RouterHandler)
    server.daemon_threads = True
    print(f"TINY_ROUTER_READY http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
