"""A real non-Python server's growth classified by mapping: llama.cpp's llama-server with a tiny random model,
its /proc/PID/smaps read before and after a bounded burst of completions (soak/telemetry/smaps.py).

Skipped only when no llama-server can be had (tests/support/llama_cpp.py says how to get one).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from soak.telemetry.smaps import KINDS, SmapsGrowth, classify_growth, read_mappings
from support.llama_cpp import INSTALL_HINT, find_llama_server, free_port, server_command, tiny_gguf
from support.processes import stop_process
from support.require import skip_or_fail

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("llama_cpp")]  # one server for the module, on one worker

MIB = 2**20
REQUESTS = 80
REQUEST_TIMEOUT_S = 10.0
START_TIMEOUT_S = 60.0
# The kernel's RSS counters and the page walk of smaps are read a moment apart, on an idle server.
AGREEMENT_BYTES = 4 * MIB
_BIND_FAILURES = ("couldn't bind", "address already in use", "failed to bind")


def _start(command: list[str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _wait_healthy(process: subprocess.Popen, url: str, log: Path) -> bool:
    """True once /health answers 200; False if the server exited on a port taken meanwhile (then retried)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            text = log.read_text(errors="replace")
            if any(failure in text.lower() for failure in _BIND_FAILURES):
                return False
            pytest.fail(f"llama-server exited with {process.returncode} before it was healthy:\n{text[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"llama-server not healthy within {START_TIMEOUT_S:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory) -> Iterator[tuple[subprocess.Popen, str]]:
    """llama-server on 127.0.0.1 at a port the OS picked, healthy; its process and base URL."""
    binary = find_llama_server()
    if binary is None:
        skip_or_fail(f"no llama-server binary ({INSTALL_HINT})")  # CI builds it (.ci/run)
    folder = tmp_path_factory.mktemp("llama")
    model = tiny_gguf(folder / "tiny.gguf")
    for attempt in range(3):  # the port is free when picked, and another process may take it before the server
        port, log = free_port(), folder / f"server-{attempt}.log"
        process = _start(server_command(binary, model, port), log)
        try:
            if _wait_healthy(process, f"http://127.0.0.1:{port}", log):
                yield process, f"http://127.0.0.1:{port}"
                return
        finally:
            stop_process(process)
    pytest.fail("llama-server could not bind a free port in 3 tries")


def _request(client: httpx.Client, number: int) -> httpx.Response:
    """Completion or chat request `number`: prompts of varied length and words, varied answer lengths."""
    words = ("the memory", "of a server", "that leaks", "is found", "by soak", "over a night")
    prompt = " ".join(words[(number + step) % len(words)] for step in range(1 + number % 9)) + f" #{number}"
    body = {"max_tokens": 4 + number % 17, "temperature": 0.8, "seed": number}
    if number % 3 == 2:
        return client.post("/v1/chat/completions", json=body | {"messages": [{"role": "user", "content": prompt}]})
    return client.post("/v1/completions", json=body | {"prompt": prompt})


def _held_bytes(pid: int) -> int:
    """VmRSS + VmSwap of /proc/PID/status, in bytes."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return sum(int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmSwap"))


def _burst(process: subprocess.Popen, url: str) -> tuple[SmapsGrowth, int]:
    """The classified growth over REQUESTS requests, and the change of VmRSS + VmSwap over them."""
    before, held_before = read_mappings(process.pid), _held_bytes(process.pid)
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S) as client:
        statuses = [_request(client, number).status_code for number in range(REQUESTS)]
    assert statuses == [200] * REQUESTS, {status: statuses.count(status) for status in set(statuses)}
    time.sleep(0.5)  # let the server's threads settle after the last answer
    after, held_after = read_mappings(process.pid), _held_bytes(process.pid)
    return classify_growth(before, after, pid=process.pid), held_after - held_before


def test_llama_server_growth_is_accounted_for_by_mapping(llama_server):
    process, url = llama_server
    growth, status_growth = _burst(process, url)
    print(f"\nllama-server over {REQUESTS} requests: {growth.sentence()} "
          f"(smaps {growth.growth_bytes / MIB:+.2f} MiB, VmRSS+VmSwap {status_growth / MIB:+.2f} MiB)")
    for row in growth.by_name:
        print(f"  {row.kind:<12} {row.name[:70]:<70} {row.growth_bytes / MIB:+8.2f} MiB  "
              f"{row.regions_before}→{row.regions_after} mappings")
    assert sum(row.growth_bytes for row in growth.by_kind) == growth.growth_bytes
    assert abs(growth.growth_bytes - status_growth) < AGREEMENT_BYTES, (growth.growth_bytes, status_growth)
    assert growth.by_kind and growth.by_kind[0].growth_bytes > 0, growth.as_dict()
    sentence = growth.sentence()  # names the kind that grew most, unless the growth is spread over many
    assert growth.by_kind[0].name in sentence or "spread over" in sentence, sentence
    assert growth.by_kind[0].kind in KINDS


def test_a_soak_run_watching_llama_server_classifies_its_growth_by_mapping(llama_server, tmp_path, soak_cli):
    # soak finds the process listening on the target's port; it is not Python, so the window reads its mappings
    process, url = llama_server
    result = soak_cli("start", "--target", url, "--server-kind", "llamacpp", "--duration", "110s", "--warmup", "10s",
                      "--window", "5s", "--rate", "1", "--scenario", "chat_short", "--no-idle-probes",
                      "--canary-every", "0", "--skip-unsupported", "--forensics", "always", "--forensics-for", "20s",
                      "--json", "--out", str(tmp_path), timeout_s=420)
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    (record,) = json.loads(result.stdout)["forensics"]
    assert record["pid"] == process.pid and record["method"] == "smaps" and record["held_bytes"] is None, record
    assert record["refusals"] == ["not a Python process: its growth is classified by mapping only"]
    assert record["growth_by_mapping"] and record["sentence"].startswith(f"forensics of llama-server (pid {process.pid})")
