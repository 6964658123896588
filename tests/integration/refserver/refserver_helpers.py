"""Run the reference server as a real subprocess on port 0 and talk to it over HTTP (used by conftest.py)."""

import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

READY = re.compile(r"^SOAK_REFSERVER_READY (http://127\.0\.0\.1:(\d+))$")
STARTUP_TIMEOUT_S = 60.0
REPO_ROOT = Path(__file__).resolve().parents[3]


def wait_until(condition: Callable[[], object], timeout_s: float, interval_s: float = 0.05,
               what: str = "condition") -> object:
    """Poll `condition` until it returns something truthy; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(interval_s)


@dataclass
class StreamResult:
    """One streamed response: the parsed chunks with their arrival times, and the request's timing."""

    status: int
    chunks: list[dict] = field(default_factory=list)
    arrival_s: list[float] = field(default_factory=list)
    sent_s: float = 0.0
    done: bool = False

    @property
    def text(self) -> str:
        return "".join(_chunk_text(c) for c in self.chunks)

    def content_times(self) -> list[float]:
        return [t for c, t in zip(self.chunks, self.arrival_s) if _chunk_text(c)]


def _chunk_text(chunk: dict) -> str:
    if not chunk.get("choices"):
        return ""
    choice = chunk["choices"][0]
    return choice.get("delta", {}).get("content") or choice.get("text") or ""


@dataclass
class RefServer:
    process: subprocess.Popen
    url: str
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def client(self, timeout_s: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout_s)

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=30.0)

    def post(self, path: str, body, timeout_s: float = 60.0) -> httpx.Response:
        content = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return httpx.post(self.url + path, content=content, timeout=timeout_s,
                          headers={"content-type": "application/json"})

    def chat(self, content: str = "hello", max_tokens: int = 8, **extra) -> httpx.Response:
        body = {"model": "soak-reference", "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens, **extra}
        return self.post("/v1/chat/completions", body)

    def stream_chat(self, content: str = "hello", max_tokens: int = 16, timeout_s: float = 60.0,
                    **extra) -> StreamResult:
        body = {"model": "soak-reference", "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens, "stream": True, **extra}
        result = StreamResult(status=0, sent_s=time.perf_counter())
        with httpx.stream("POST", self.url + "/v1/chat/completions", json=body, timeout=timeout_s) as response:
            result.status = response.status_code
            for line in response.iter_lines():
                if line == "data: [DONE]":
                    result.done = True
                elif line.startswith("data: "):
                    result.chunks.append(json.loads(line[len("data: "):]))
                    result.arrival_s.append(time.perf_counter())
        return result

    def metrics(self) -> dict[tuple, float]:
        """Every sample as {(name, sorted label items): value}."""
        text = self.get("/metrics").text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def metric(self, name: str, **labels: str) -> float:
        labels = {"model_name": "soak-reference", **labels}
        return self.metrics()[(name, tuple(sorted(labels.items())))]

    def debug(self) -> dict:
        return self.get("/debug/faults").json()

    def rss_bytes(self) -> int:
        return psutil.Process(self.pid).memory_info().rss

    def open_fds(self) -> int:
        return psutil.Process(self.pid).num_fds()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGTERM this server only, wait, SIGKILL if it will not go; return its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(timeout_s)


def launch(*args: str, timeout_s: float = STARTUP_TIMEOUT_S) -> RefServer:
    """Start `python -m soak.refserver --port 0 ARGS` and wait for its READY line."""
    stderr_file = tempfile.NamedTemporaryFile(prefix="refserver-", suffix=".err", delete=False)
    pythonpath = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    process = subprocess.Popen([sys.executable, "-m", "soak.refserver", "--port", "0", *args],
                               stdout=subprocess.PIPE, stderr=stderr_file, text=True, env=env, cwd=REPO_ROOT)
    server = RefServer(process, "", Path(stderr_file.name))
    line = _read_line(process, timeout_s)
    match = READY.match(line.rstrip("\n"))
    if not match:
        server.stop()
        pytest.fail(f"no READY line from refserver {args}: got {line!r}; stderr: {server.stderr()[-2000:]}")
    server.url = match.group(1)
    return server


def _read_line(process: subprocess.Popen, timeout_s: float) -> str:
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    return process.stdout.readline() if ready else ""
