"""A server soak did not start is found by the port it listens on, when its host is this machine, and its process
tree is then sampled as if --server-pid had named it; a URL on another host finds nothing."""

from __future__ import annotations

import socket
import subprocess
import sys

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
