"""The reference server's command line: usage errors exit 2 with one clear line; GPU mode when present."""

import socket
import subprocess
import sys

import pytest
import torch
from refserver_helpers import REPO_ROOT

pytestmark = pytest.mark.timeout(120)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "soak.refserver", "--port", "0", *args], capture_output=True,
                          text=True, timeout=60, cwd=REPO_ROOT)


@pytest.mark.parametrize("args, fragment", [
    (("--fault", "no-such-fault"), "unknown fault 'no-such-fault'"),
    (("--fault", "rss-leak=much"), "malformed byte size"),
    (("--fault", "error-rise=0:1", "--fault", "error-rise=0:2"), "error-rise"),
    (("--fault", "vram-leak=1MiB"), "vram-leak needs --device cuda"),
    (("--fault-horizon", "soon"), "malformed duration"),
    (("--num-blocks", "4", "--max-model-len", "2048"), "--max-model-len"),
    (("--time-scale", "0"), "--time-scale"),
])
def test_usage_errors_exit_2_with_one_line(args, fragment):
    result = _run(*args)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and lines[0].startswith("soak refserver: error:")


def test_port_in_use_exits_2_naming_it():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "soak.refserver", "--port", str(port)], capture_output=True,
                                text=True, timeout=60, cwd=REPO_ROOT)
    assert result.returncode == 2 and str(port) in result.stderr.strip()


def test_help_exits_0():
    result = _run("--help")
    assert result.returncode == 0 and "--fault NAME[=VALUE]" in result.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_device_and_vram_leak(start_refserver):
    server = start_refserver("--device", "cuda", "--fault", "vram-leak=4MiB")
    for _ in range(3):
        assert server.chat(max_tokens=4).status_code == 200
    assert server.debug()["vram_leaked_bytes"] == 12 * 2**20
