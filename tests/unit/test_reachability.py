"""Whose a failed /health is: the route, the server, or soak's own side (soak/target/reachability.py)."""

from __future__ import annotations

import errno
import socket

import pytest

from soak.target import reachability
from soak.target.reachability import (
    Blame,
    Connect,
    Loopback,
    answers_http,
    classify,
    connect_outcome,
    probe_reachability,
    server_address,
)


@pytest.mark.parametrize(("connect", "loopback_ok", "alive", "blame"), [
    (Connect.TIMEOUT, True, True, Blame.NETWORK),
    (Connect.UNREACHABLE, True, True, Blame.NETWORK),
    (Connect.TIMEOUT, True, None, Blame.NETWORK),  # a server on another host: its process is not seen
    (Connect.TIMEOUT, True, False, Blame.SERVER),  # its process ended: a crash, whatever the route says
    (Connect.OK, True, True, Blame.SERVER),  # accepted, /health failed: frozen or failing, the server's
    (Connect.REFUSED, True, True, Blame.SERVER),  # nothing listens
    (Connect.REFUSED, True, False, Blame.SERVER),
    (Connect.FAILED, True, True, Blame.SERVER),
    (Connect.TIMEOUT, False, True, Blame.CLIENT),  # soak's own loopback failed too: soak's side
])
def test_classify(connect, loopback_ok, alive, blame):
    assert classify(connect, loopback_ok, alive) == blame


@pytest.fixture
def listener():
    """A socket that listens on 127.0.0.1 and never accepts (the kernel completes connects into its backlog, as
    it does for a SIGSTOPped server)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock
    sock.close()


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_connect_outcome_of_a_listener_and_of_a_closed_port(listener):
    assert connect_outcome("127.0.0.1", listener.getsockname()[1]) == Connect.OK
    assert connect_outcome("127.0.0.1", _closed_port()) == Connect.REFUSED


@pytest.mark.parametrize(("raised", "outcome"), [
    (TimeoutError("timed out"), Connect.TIMEOUT),
    (OSError(errno.EHOSTUNREACH, "No route to host"), Connect.UNREACHABLE),
    (OSError(errno.ENETUNREACH, "Network is unreachable"), Connect.UNREACHABLE),
    (OSError(errno.EMFILE, "Too many open files"), Connect.FAILED),
])
def test_connect_outcome_names_how_a_connect_failed(monkeypatch, raised, outcome):
    def fail(*_args, **_kwargs):
        raise raised

    monkeypatch.setattr(reachability.socket, "create_connection", fail)
    assert connect_outcome("10.0.0.2", 8000) == outcome


def test_loopback_answers_until_closed():
    loopback = Loopback()
    assert loopback.answers() and loopback.answers()  # each connect is accepted and closed: none piles up
    loopback.close()
    assert not loopback.answers()


def test_a_loopback_that_cannot_be_opened_does_not_answer(monkeypatch):
    def no_descriptor(*_args, **_kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(reachability.socket, "socket", no_descriptor)
    loopback = Loopback()
    assert not loopback.answers()
    loopback.close()


def test_a_server_that_accepts_and_answers_nothing_is_the_servers(listener):
    base_url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    assert answers_http(base_url, {}, timeout_s=0.3) is False
    loopback = Loopback()
    try:
        found = probe_reachability(base_url, loopback, True)
    finally:
        loopback.close()
    assert found.blame == Blame.SERVER and found.connect == Connect.OK and found.answered is False
    assert found.as_data() == {"blame": "server", "address": f"127.0.0.1:{listener.getsockname()[1]}",
                               "connect": "ok", "answered": False, "loopback_ok": True, "process_alive": True}
    assert "/health answered nothing" in found.sentence()


def test_a_lost_route_with_the_process_alive_is_the_networks(monkeypatch):
    monkeypatch.setattr(reachability, "connect_outcome", lambda host, port: Connect.TIMEOUT)
    loopback = Loopback()
    try:
        found = probe_reachability("http://10.0.0.2:8000", loopback, True)
    finally:
        loopback.close()
    assert found.blame == Blame.NETWORK and found.answered is None and found.address == "10.0.0.2:8000"
    assert found.sentence() == ("connect to 10.0.0.2:8000: timeout; soak's own loopback answered; its process is "
                                "alive")


def test_server_address():
    assert server_address("http://10.0.0.2:8000") == ("10.0.0.2", 8000)
    assert server_address("https://example.com") == ("example.com", 443)
    assert server_address("http://[::1]:9") == ("::1", 9)
    assert server_address("not a url") is None
