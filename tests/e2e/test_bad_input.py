"""Bad input: exit 2, one clear line, and nothing half-written that `soak runs` chokes on."""

from __future__ import annotations

import json
import socket

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert lines, "no error message"
    return lines[-1]


def test_unknown_flag(soak_cli, tmp_path):
    result = soak_cli("start", "--minutes", "1", "--frobnicate", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "frobnicate" in result.stderr


def test_malformed_duration(soak_cli, tmp_path):
    result = soak_cli("start", "--duration", "5x", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "malformed duration '5x'" in _one_error_line(result.stderr)


def test_unreachable_target_leaves_nothing_half_written(soak_cli, tmp_path):
    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        result = soak_cli("start", "--duration", "30s", "--target", f"http://127.0.0.1:{port}", "--out", str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "unreachable" in _one_error_line(result.stderr)
    listed = soak_cli("runs", "--out", str(tmp_path), "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []


def test_reference_server_port_in_use(soak_cli):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = soak_cli("refserver", "--port", str(port), timeout_s=60)
    assert result.returncode == 2
    assert str(port) in _one_error_line(result.stderr)


def test_unknown_run_id(soak_cli, tmp_path):
    result = soak_cli("report", "20990101T000000Z-dead", "--out", str(tmp_path))
    assert result.returncode == 2  # no database yet: said so, and none is made
    assert f"no database at {tmp_path / 'soak.db'}" in _one_error_line(result.stderr)
    assert not (tmp_path / "soak.db").exists()
    soak_cli("schedule", "add", "x", "--cron", "@daily", "--out", str(tmp_path), "--", "--minutes", "1")
    result = soak_cli("report", "20990101T000000Z-dead", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "unknown run id" in _one_error_line(result.stderr)
