"""A server soak did not start is found by the port it listens on, when its host is this machine, and its process
tree is then sampled as if --server-pid had named it; a URL on another host finds nothing."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import psutil
import pytest

from soak.target.base import local_listeners
from soak.telemetry.process import ProcessTreeSampler, is_local_host, listening_pids

pytestmark = pytest.mark.timeout(60)

# A server that forks one child before it listens, as multi-process servers do; prints its port.
SERVER = """
import http.server, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
print(server.server_address[1], child.pid, flush=True)
server.serve_forever()
"""


@pytest.fixture()
def local_server():
    process = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port, child = (int(part) for part in process.stdout.readline().split())
        yield process.pid, child, port
    finally:
        for proc in psutil.Process(process.pid).children(recursive=True):
            proc.kill()
        process.kill()
        process.wait(10)


def test_the_process_listening_on_the_port_is_found_with_its_children(local_server):
    pid, child, port = local_server
    assert listening_pids(port) == [pid]
    for host in ("127.0.0.1", "localhost"):
        assert local_listeners(f"http://{host}:{port}") == [pid]
    sampler = ProcessTreeSampler(local_listeners(f"http://127.0.0.1:{port}"))
    rows = {row.pid: row for row in sampler.sample()}
    assert set(rows) == {pid, child}
    assert rows[pid].rss_bytes > 1_000_000 and rows[pid].fds >= 3


def test_a_url_on_another_host_finds_nothing(local_server):
    _, _, port = local_server
    assert local_listeners(f"http://192.0.2.10:{port}") == []  # TEST-NET-1: never this machine
    assert local_listeners("http://127.0.0.1:1") == []  # nothing listens there


def test_local_hosts():
    assert all(is_local_host(host) for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.1.1"))
    assert is_local_host(socket.gethostname())  # this machine's own name resolves to one of its addresses
    assert not any(is_local_host(host) for host in ("192.0.2.10", "gpu-host.example", "", None))


# A server that lists one model; given a port, it takes that one (a supervisor restarting it on its port).
MODELS_SERVER = """
import http.server, json, sys
class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self.send_response(200 if self.path in ("/v1/models", "/health") else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Models)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def start_models_server(port: int = 0) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen([sys.executable, "-c", MODELS_SERVER, str(port)], stdout=subprocess.PIPE, text=True)
    return process, int(process.stdout.readline())


def test_an_external_server_that_dies_and_comes_back_is_a_crash_then_a_restart(tmp_path):
    from soak.config import resolve_config
    from soak.target import ExternalTarget

    first, port = start_models_server()
    second = None
    try:
        config = resolve_config({"duration": "1m", "out": str(tmp_path), "target": f"http://127.0.0.1:{port}"},
                                environ={})
        target = ExternalTarget(config, tmp_path)
        target.REFIND_EVERY_S = 0.0  # look for the port's new owner at every call, not every 10 s
        assert target.start().root_pids == [first.pid]
        assert target.changes() == []  # alive: nothing to tell
        first.kill()
        _until_ended(first.pid)
        [death] = target.changes()  # ended (a zombie not yet reaped has too)
        assert death.kind == "crash" and death.data["pids"] == [first.pid] and f"port {port}" in death.message
        assert target.changes() == []  # told once
        second, _ = start_models_server(port)
        [back] = target.changes()
        assert back.kind == "back" and back.data["pids"] == [second.pid]
        assert target.root_pids() == [second.pid] and target.changes() == []
    finally:
        for process in (first, second):
            if process is not None:
                process.kill()
                process.wait(10)


def _until_ended(pid: int, timeout_s: float = 10.0) -> None:
    """Wait until the killed child is a zombie (not reaped, as a server whose parent is slow to) or gone (gevent's
    child watcher, in a patched test process, reaps children itself)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        assert time.monotonic() < deadline, f"process {pid} did not end"
        time.sleep(0.02)
