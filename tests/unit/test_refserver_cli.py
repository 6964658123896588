"""The reference server's flag handling, in-process (no server is started)."""

import socket

import pytest

from soak.refserver import main
from soak.refserver.cli import bind_socket, build_parser, settings_from_args


def test_defaults():
    settings = settings_from_args(build_parser().parse_args([]))
    assert (settings.host, settings.port, settings.model_name) == ("127.0.0.1", 0, "soak-reference")
    assert (settings.max_num_seqs, settings.num_blocks, settings.block_size, settings.max_model_len) == (
        32, 1024, 16, 2048)
    assert settings.time_scale == 1.0 and settings.fault_horizon_s == 3600.0 and settings.seed == 0
    assert settings.faults.texts == () and settings.device == "cpu"


def test_faults_and_time_flags():
    args = ["--fault", "rss-leak=1MiB", "--fault", "stalls=2", "--time-scale", "60", "--fault-horizon", "30m"]
    settings = settings_from_args(build_parser().parse_args(args))
    assert settings.faults.rss_leak_bytes == 2**20 and settings.faults.stalls.rate_per_hour == 2
    assert settings.time_scale == 60 and settings.fault_horizon_s == 1800


def test_step_time_sets_the_engine_steps_floor():
    assert settings_from_args(build_parser().parse_args([])).min_step_s == 0
    assert settings_from_args(build_parser().parse_args(["--step-time", "20ms"])).min_step_s == 0.02


def test_usage_errors_return_2(capsys):
    assert main(["--fault", "nope"]) == 2
    assert main(["--max-num-seqs", "0"]) == 2
    assert main(["--no-such-flag"]) == 2
    assert main(["--step-time", "2s"]) == 2
    assert "unknown fault 'nope'" in capsys.readouterr().err


def test_help_returns_0(capsys):
    assert main(["--help"]) == 0
    assert "--enable-prefix-caching" in capsys.readouterr().out


def test_bound_socket_is_tcp_so_asyncio_disables_nagle():
    with bind_socket("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP and sock.getsockname()[1] > 0


def test_bind_conflict_raises_oserror():
    with bind_socket("127.0.0.1", 0) as taken, pytest.raises(OSError):
        bind_socket("127.0.0.1", taken.getsockname()[1]).close()
