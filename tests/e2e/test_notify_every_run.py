"""`soak start --notify-env VAR` posts the run's summary to the webhook in $VAR however the run ends: at its
planned end, stopped by SIGINT/SIGTERM, or with its server crashed. The receiver is a real HTTP server on
127.0.0.1 (port 0) in a thread of the test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from e2e_helpers import wait_for_server_samples

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SHORT = ["start", "--warmup", "5s", "--window", "5s", "--sample-every", "1s", "--rate", "2", "--no-idle-probes",
         "--notify-env", "SOAK_TEST_HOOK", "--json"]


class Receiver:
    """The JSON bodies POSTed to it, in order; `wait_for` polls for one with a deadline."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.lock = threading.Lock()

    def add(self, body: dict) -> None:
        with self.lock:
            self.bodies.append(body)

    def wait_for(self, count: int, timeout_s: float = 30.0) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.bodies) >= count:
                    return list(self.bodies)
            time.sleep(0.1)
        raise AssertionError(f"the webhook received {len(self.bodies)} posts, expected {count}")


@pytest.fixture
def webhook() -> Iterator[tuple[str, Receiver]]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            length = int(self.headers.get("Content-Length") or 0)
            receiver.add(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_run_stopped_by_a_signal_is_notified_as_aborted(tmp_path, webhook, signum):
    url, receiver = webhook
    process = subprocess.Popen([sys.executable, "-m", "soak", *SHORT, "--duration", "10m", "--out", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "SOAK_TEST_HOOK": url})
    try:
        run_id, _ = wait_for_server_samples(tmp_path, minimum=8)
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    [posted] = receiver.wait_for(1)
    assert posted["run_id"] == run_id and posted["status"] == "aborted"
    assert posted["stop_reason"] == f"stopped by {signum.name}"
    assert posted["verdict"] == json.loads(stdout)["verdict"]
    assert f"soak {posted['verdict']}" in posted["text"] and run_id in posted["text"]
    assert "notification delivered to the webhook in $SOAK_TEST_HOOK" in stderr
    assert url not in stderr


def test_a_run_whose_server_crashed_is_notified(tmp_path, webhook, soak_cli):
    url, receiver = webhook
    result = soak_cli(*SHORT, "--duration", "2m", "--reference-fault", "crash-after=8s", "--out", str(tmp_path),
                      env={"SOAK_TEST_HOOK": url}, timeout_s=180)
    summary = json.loads(result.stdout)
    [posted] = receiver.wait_for(1)
    assert posted["run_id"] == summary["run_id"] and posted["status"] == "crashed"
    assert posted["stop_reason"].startswith("server exited with code")
    assert posted["verdict"] == summary["verdict"] == "FAIL"


def test_an_unset_variable_is_a_note_and_the_run_still_ends(tmp_path, soak_cli):
    env = {key: value for key, value in os.environ.items() if key != "SOAK_TEST_HOOK"}
    result = subprocess.run([sys.executable, "-m", "soak", *SHORT, "--duration", "20s", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode in (0, 1, 3), result.stderr[-2000:]
    assert "$SOAK_TEST_HOOK is not set; no notification sent" in result.stderr
    assert json.loads(result.stdout)["status"] == "completed"


@pytest.mark.slow
def test_a_healthy_run_with_stop_on_fail_runs_to_its_end_and_is_notified(tmp_path, webhook, soak_cli):
    """36 windows planned: the rule looks at 20, 22 … 34 windows (it could stop from 30) and does not stop
    a healthy run."""
    url, receiver = webhook
    result = soak_cli("start", "--duration", "200s", "--warmup", "20s", "--window", "5s", "--sample-every", "1s",
                      "--rate", "4", "--scenario", "chat_short", "--no-idle-probes", "--time-scale", "60",
                      "--stop-on-fail", "--notify-env", "SOAK_TEST_HOOK", "--json", "--out", str(tmp_path),
                      env={"SOAK_TEST_HOOK": url}, timeout_s=300)
    summary = json.loads(result.stdout)
    assert summary["status"] == "completed" and summary["stop_reason"] == "completed", summary["stop_reason"]
    assert summary["duration_s"] >= 200
    assert "8 looks" in result.stderr
    [posted] = receiver.wait_for(1)
    assert posted["run_id"] == summary["run_id"] and posted["verdict"] == summary["verdict"]


def test_a_forced_stop_is_notified_once_and_quickly(tmp_path, webhook):
    """A second SIGINT forces the stop (exit 130 at once): one short try at the webhook, with no summary."""
    url, receiver = webhook
    process = subprocess.Popen([sys.executable, "-m", "soak", *SHORT, "--duration", "10m", "--out", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "SOAK_TEST_HOOK": url})
    try:
        run_id, _ = wait_for_server_samples(tmp_path, minimum=8)
        process.send_signal(signal.SIGINT)
        # The second signal must come after the first was taken (two at once arrive as one): the run says
        # so on stderr as it starts stopping the load, while the drain and the analysis are still to come.
        for line in process.stderr:
            if "stopping load" in line:
                break
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    [posted] = receiver.wait_for(1)
    assert posted["run_id"] == run_id and posted["status"] == "aborted" and posted["verdict"] is None
    assert posted["verdict_reason"] == "forced stop by a second SIGINT"
    assert "NO VERDICT" in posted["text"]
