"""A fleet found in Kubernetes: three reference servers served as the pods of a fake API server (pod IP
127.0.0.1, a container port each), soaked with `soak start --k8s-selector`. Mid-run one pod's container restarts
(its restart count grows) and another pod is replaced by a new one at another port: the crash is that replica's
alone, and the replaced pod's replica sends its load to the new pod. Slow: about a minute and a half."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest
from e2e_helpers import query

from support.fake_k8s import FakeKubernetes

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(360)]

READY = re.compile(r"^SOAK_REFSERVER_READY http://127\.0\.0\.1:(\d+)$")
RUN = ["start", "--duration", "70s", "--warmup", "10s", "--window", "5s", "--sample-every", "1s", "--rate", "3",
       "--scenario", "chat_short", "--no-idle-probes", "--json", "--k8s-selector", "app=vllm,tier!=canary"]


def start_refserver(stack: ExitStack) -> int:
    """A reference server on an OS-picked port, ended (by its PID) with the test; its port."""
    process = subprocess.Popen([sys.executable, "-m", "soak.refserver", "--port", "0", "--time-scale", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stack.callback(process.wait, timeout=15)
    stack.callback(process.terminate)
    match = READY.match(process.stdout.readline().strip())
    assert match, "the reference server did not start"
    return int(match.group(1))


def replica_runs(out: Path) -> list[tuple[str, str]]:
    """(replica, run id) of every replica run opened so far."""
    try:
        return query(out, "select replica, id from runs where fleet_id is not null")
    except sqlite3.OperationalError:  # no database or schema yet
        return []


def generated_tokens(port: int) -> float:
    """The reference server's generation-token counter: how much it served."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:generation_tokens_total"))


def test_a_restart_is_a_crash_of_its_replica_alone_and_a_replaced_pod_is_followed(tmp_path):
    with ExitStack() as stack:
        ports = [start_refserver(stack) for _ in range(4)]  # the last one serves the replacement pod
        fake = stack.enter_context(FakeKubernetes())
        for n, port in enumerate(ports[:3]):
            fake.add_pod(f"vllm-{n}", ip="127.0.0.1", ports=[("metrics", 9090), ("http", port)])
        fake.add_pod("vllm-canary", ip="127.0.0.1", ports=[("http", ports[3])], labels={"app": "vllm", "tier": "canary"})
        env = {**os.environ, "KUBECONFIG": str(fake.write_kubeconfig(tmp_path / "kubeconfig"))}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        stdout, stderr = open(tmp_path / "stdout", "w+"), open(tmp_path / "stderr", "w+")
        soak = subprocess.Popen([sys.executable, "-m", "soak", *RUN, "--out", str(tmp_path / "runs")],
                                stdout=stdout, stderr=stderr, env=env, text=True)
        stack.callback(lambda: soak.poll() is None and soak.kill())

        deadline = time.monotonic() + 90
        while len(replica_runs(tmp_path / "runs")) < 3 and soak.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(replica_runs(tmp_path / "runs")) == 3, (tmp_path / "stderr").read_text()[-3000:]
        time.sleep(12)  # past a first look of each replica's watch
        assert fake.restart_container("vllm-0") == 1
        fake.delete_pod("vllm-2")  # its server keeps running: only the new pod's counter shows where load went
        fake.add_pod("vllm-3", ip="127.0.0.1", ports=[("http", ports[3])])
        tokens_before = generated_tokens(ports[3])
        soak.wait(timeout=240)
        stdout.seek(0)
        stderr.seek(0)
        out, err = stdout.read(), stderr.read()
        assert soak.returncode == 1, err[-4000:]
        summary = json.loads(out)

        replicas = {replica["name"]: replica for replica in summary["replicas"]}
        assert sorted(replicas) == ["vllm-0", "vllm-1", "vllm-2"]  # named after their pods; the canary tier left out
        assert {replica["url"] for replica in replicas.values()} == {f"http://127.0.0.1:{p}" for p in ports[:3]}
        assert all(selector == "app=vllm,tier!=canary" for selector in fake.lists)

        def crashes(name: str) -> dict:
            replica = json.loads((Path(replicas[name]["report_html"]).parent / "summary.json").read_text())
            return next(f for f in replica["findings"] if f["check"] == "crashes")

        restarted = crashes("vllm-0")
        assert restarted["verdict"] == "FAIL", restarted
        assert "pod vllm-0 container vllm restarted (restart count 1, OOMKilled)" in restarted["evidence"]
        assert "exit code 137" in restarted["evidence"]
        assert crashes("vllm-1")["verdict"] != "FAIL"
        assert "replica vllm-0: " in summary["verdict_reason"] and "replica vllm-1: " not in summary["verdict_reason"]

        # The replaced pod: a restart of its replica, whose load went on to the new pod's server.
        moved = crashes("vllm-2")
        assert moved["verdict"] == "FAIL" and "pod vllm-2 replaced by pod vllm-3" in moved["evidence"], moved
        [(run_id,)] = query(tmp_path / "runs", "select id from runs where replica = 'vllm-2'")
        events = query(tmp_path / "runs", f"select kind, message from events where run_id = '{run_id}' and kind in "
                                          "('crash', 'restart')")
        assert events == [("restart", f"pod vllm-2 replaced by pod vllm-3 at http://127.0.0.1:{ports[3]}; the run "
                                      "follows it")]
        assert generated_tokens(ports[3]) > tokens_before
        sources = {s for (s,) in query(tmp_path / "runs", f"select distinct source from server_samples where run_id = "
                                                           f"'{run_id}'")}
        assert f"http://127.0.0.1:{ports[3]}/metrics" in sources  # telemetry followed too
