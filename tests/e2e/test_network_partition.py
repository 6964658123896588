"""A lost route is told apart from the server, and a frozen server is a hang (issue 36).

(1) The reference server, with a planted leak, runs inside a network namespace this test creates, reached over a
veth pair by `soak start --target` (its process named by --server-pid). Once the load is measured the test takes
the namespace's end of the link down for 60 s and brings it back. soak must record one `network_outage` pair of
about that length — no crash, no server outage — with `hang` and `crashes` not FAIL, no error check FAILing for the
requests the lost route failed, the planted leak still FAILing `leak.rss`, and the report naming the outage.
(2) The reference server soak started is SIGSTOPped for 60 s, then SIGCONTed: it accepts connections (its kernel
fills the listen backlog) and answers nothing, so `hang` FAILs, and no network outage is recorded.

Needs root and `ip netns` (iproute2) for (1): it skips saying so where either is missing or refused.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e_helpers import query, wait_for_server_samples

from support.processes import stop_process

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

PARTITION_S = 60.0
SERVER_LIFETIME_S = 400  # the server in the namespace ends by itself even if this test is killed
# 37 windows of 5 s after a 15 s warm-up; about 14 of them overlap the partition, leaving 23 to judge (≥ 20).
NETWORK_RUN = ["start", "--duration", "200s", "--warmup", "15s", "--window", "5s", "--sample-every", "1s", "--rate",
               "4", "--scenario", "chat_short", "--no-idle-probes", "--canary-every", "0", "--json"]
LEAK = "512KiB"  # about 2 MiB/s at 4 req/s: some 200 MiB over the judged load, far past leak.rss's least FAIL


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


def _netns_refused() -> str | None:
    """Why this machine cannot make a network namespace, or None."""
    if shutil.which("ip") is None:
        return "needs iproute2 (`ip`): apt-get install iproute2"
    if os.geteuid() != 0:
        return "needs root to create a network namespace and a veth pair"
    name = f"soakprobe{os.getpid()}"
    made = _ip("netns", "add", name, check=False)
    _ip("netns", "del", name, check=False)
    return None if made.returncode == 0 else f"`ip netns add` was refused here: {made.stderr.strip()}"


@dataclass(frozen=True)
class Namespace:
    """A network namespace reached over a veth pair: `address` inside it, `inner` its end of the link."""

    name: str
    address: str
    inner: str
    subnet: str


@pytest.fixture
def namespace() -> Iterator[Namespace]:
    """A fresh namespace on a random private /30, with an `unreachable` route under the link's own, so nothing
    for its subnet ever leaves through the default route while the link is down; all removed afterwards."""
    refused = _netns_refused()
    if refused:
        pytest.skip(refused)
    tag, octet = f"{os.getpid() % 10000}{random.randrange(100)}", random.randrange(256)
    ns = Namespace(f"soaktest{tag}", f"10.250.{octet}.2", f"skn{tag}", f"10.250.{octet}.0/30")
    outer = f"skh{tag}"
    try:
        for args in (("netns", "add", ns.name), ("link", "add", outer, "type", "veth", "peer", "name", ns.inner),
                     ("link", "set", ns.inner, "netns", ns.name), ("addr", "add", f"10.250.{octet}.1/30", "dev", outer),
                     ("link", "set", outer, "up"), ("route", "add", "unreachable", ns.subnet, "metric", "4000"),
                     ("-n", ns.name, "addr", "add", f"{ns.address}/30", "dev", ns.inner),
                     ("-n", ns.name, "link", "set", ns.inner, "up"), ("-n", ns.name, "link", "set", "lo", "up")):
            _ip(*args)
        yield ns
    finally:
        _ip("route", "del", "unreachable", ns.subnet, "metric", "4000", check=False)
        _ip("netns", "del", ns.name, check=False)  # takes the veth pair with it
        _ip("link", "del", outer, check=False)


def _wait_healthy(url: str, server: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert server.poll() is None, "the reference server in the namespace exited"
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} never answered /health")


@pytest.fixture
def server_in_namespace(namespace: Namespace, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """The reference server with a planted leak, listening inside the namespace; (base URL, its process)."""
    port = 8000
    log = open(tmp_path / "refserver.log", "w")  # closed below, after the server
    server = subprocess.Popen(["ip", "netns", "exec", namespace.name, "timeout", str(SERVER_LIFETIME_S),
                               sys.executable, "-m", "soak.refserver", "--host", namespace.address, "--port", str(port),
                               "--fault", f"rss-leak={LEAK}", "--time-scale", "60"], stdout=log, stderr=log)
    try:
        url = f"http://{namespace.address}:{port}"
        _wait_healthy(url, server)
        yield url, server
    finally:
        stop_process(server, grace_s=15)
        log.close()


def _events(out: Path, run_id: str) -> list[tuple[float, str, str, dict]]:
    db = sqlite3.connect(out / "soak.db")
    try:
        rows = db.execute("select t_s, kind, message, data_json from events where run_id=? order by t_s",
                          (run_id,)).fetchall()
    finally:
        db.close()
    return [(t_s, kind, message, json.loads(data) if data else {}) for t_s, kind, message, data in rows]


def _partition(namespace: Namespace) -> subprocess.Popen:
    """Take the namespace's end of the link down for PARTITION_S and back up: one shell that ends by itself."""
    script = f"ip link set {namespace.inner} down; sleep {PARTITION_S:g}; ip link set {namespace.inner} up"
    return subprocess.Popen(["ip", "netns", "exec", namespace.name, "sh", "-c", script])


def _findings(stdout: str) -> tuple[dict, dict[str, dict]]:
    summary = json.loads(stdout)
    return summary, {finding["check"]: finding for finding in summary["findings"]}


def test_a_lost_route_is_a_network_outage_not_the_servers_failure(tmp_path, server_in_namespace, namespace):
    url, server = server_in_namespace
    out = tmp_path / "out"
    soak = subprocess.Popen([sys.executable, "-m", "soak", *NETWORK_RUN, "--target", url, "--server-pid",
                             str(server.pid), "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        run_id, t0 = wait_for_server_samples(out, 1)
        time.sleep(max(t0 + 50.0 - time.time(), 0.0))  # 35 s of measured load first
        down_s = time.time() - t0
        _partition(namespace).wait(timeout=PARTITION_S + 30)
        up_s = time.time() - t0
        stdout, stderr = soak.communicate(timeout=300)
    finally:
        if soak.poll() is None:
            soak.kill()
    assert soak.returncode in (1, 3), stderr[-3000:]
    summary, findings = _findings(stdout)

    events = _events(out, run_id)
    kinds = [kind for _, kind, _, _ in events]
    assert kinds.count("network_outage_start") == 1 and kinds.count("network_outage_end") == 1, kinds
    assert "crash" not in kinds and "outage_start" not in kinds, kinds
    start = next(e for e in events if e[1] == "network_outage_start")
    end = next(e for e in events if e[1] == "network_outage_end")
    began = start[3]["since_s"]
    # It began at the last /health that answered before the link went down, and ended once it answered again.
    assert down_s - 8.0 <= began <= down_s + 0.5 and up_s <= end[0] <= up_s + 20.0, (began, end[0], down_s, up_s)
    assert start[3]["blame"] == "network" and start[3]["connect"] in ("timeout", "unreachable"), start
    assert start[3]["process_alive"] is True and start[3]["loopback_ok"] is True, start

    # every request the client counted (the connect errors of the partition among them) is in the database
    (counted,) = [data["requests"] for _, kind, _, data in events if kind == "run_end"]
    assert counted > 300 and counted == query(out, "select sum(requests) from request_windows where scenario = '*'")[0][0]

    for check in ("hang", "crashes", "errors.rise", "errors.budget", "errors.bursts"):
        assert findings[check]["verdict"] != "FAIL", findings[check]
    assert findings["leak.rss"]["verdict"] == "FAIL", findings["leak.rss"]
    assert "network outage" in findings["crashes"]["evidence"], findings["crashes"]
    assert summary["verdict"] == "FAIL"
    report = Path(summary["report_html"]).read_text(encoding="utf-8")
    assert "network_outage_start" in report and "network outage(s), the server out of reach" in report


SIGSTOP_RUN = ["start", "--duration", "100s", "--warmup", "10s", "--window", "5s", "--sample-every", "1s", "--rate",
               "2", "--scenario", "chat_short", "--no-idle-probes", "--canary-every", "0", "--json"]


def test_a_frozen_server_is_a_hang_not_a_network_outage(tmp_path):
    out = tmp_path / "out"
    soak = subprocess.Popen([sys.executable, "-m", "soak", *SIGSTOP_RUN, "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        run_id, t0 = wait_for_server_samples(out, 1)
        (pgid,) = sqlite3.connect(out / "soak.db").execute("select server_pgid from runs where id=?",
                                                          (run_id,)).fetchone()
        time.sleep(max(t0 + 20.0 - time.time(), 0.0))
        os.killpg(pgid, signal.SIGSTOP)
        try:
            time.sleep(PARTITION_S)  # how long the server is frozen: the fault itself
        finally:
            os.killpg(pgid, signal.SIGCONT)
        stdout, stderr = soak.communicate(timeout=300)
    finally:
        if soak.poll() is None:
            soak.kill()
    assert soak.returncode in (1, 3), stderr[-3000:]
    _, findings = _findings(stdout)
    assert findings["hang"]["verdict"] in ("FAIL", "SUSPECT"), findings["hang"]
    assert "answered nothing" in findings["hang"]["evidence"], findings["hang"]
    kinds = [kind for _, kind, _, _ in _events(out, run_id)]
    assert "network_outage_start" not in kinds and "outage_start" in kinds, kinds
