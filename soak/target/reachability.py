"""Down or out of reach: whether a server that stopped answering /health is at fault, or the route to it.

When /health fails, soak asks two more things: does its own loopback answer (a listening socket of its own on
127.0.0.1), and does a plain TCP connect to the server's host and port complete. A connect that times out or finds
no route while the loopback answers, and the server's process (when soak knows it) is alive, is the network's.
A connect that completes is the server's: the kernel accepts into the backlog of a frozen (SIGSTOPped) server,
so only its HTTP hangs (the record says whether it answered at all: one that accepts and answers nothing is frozen,
a hang). A refused connect is the server's too: nothing listens (it died, or is restarting).
A loopback that does not answer is soak's own side (its host's network stack, or no descriptor left).
"""

from __future__ import annotations

import errno
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from soak.target.base import url_port

CONNECT_TIMEOUT_S = 2.0  # as long as one /health check may take: a live route answers a SYN far sooner
UNREACHABLE_ERRNOS = frozenset({errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTDOWN})


class Connect(StrEnum):
    """How a TCP connect to the server's host and port ended."""

    OK = "ok"
    TIMEOUT = "timeout"
    UNREACHABLE = "unreachable"  # no route: EHOSTUNREACH, ENETUNREACH, ENETDOWN, EHOSTDOWN
    REFUSED = "refused"
    FAILED = "failed"  # any other error (a name that does not resolve, no descriptor left …)


class Blame(StrEnum):
    """Whose the failure is."""

    SERVER = "server"
    NETWORK = "network"
    CLIENT = "client"  # soak's own loopback did not answer


@dataclass(frozen=True)
class Reachability:
    """What the probes found when /health failed, and whose the failure is."""

    blame: Blame
    address: str
    connect: Connect
    loopback_ok: bool
    process_alive: bool | None  # None: soak knows no process of the server (a server on another host)
    answered: bool | None = None  # after a connect that completed: whether GET /health got any HTTP answer

    def sentence(self) -> str:
        """One line for the event's message."""
        alive = {True: "; its process is alive", False: "; its process has ended", None: ""}[self.process_alive]
        loopback = "soak's own loopback answered" if self.loopback_ok else "soak's own loopback did not answer"
        http = {True: ", /health answered", False: ", /health answered nothing", None: ""}[self.answered]
        return f"connect to {self.address}: {self.connect}{http}; {loopback}{alive}"

    def as_data(self) -> dict[str, Any]:
        return {"blame": str(self.blame), "address": self.address, "connect": str(self.connect),
                "answered": self.answered, "loopback_ok": self.loopback_ok, "process_alive": self.process_alive}


def classify(connect: Connect, loopback_ok: bool, process_alive: bool | None) -> Blame:
    """Whose a failed /health is, from the connect to the server, soak's loopback and the server's process."""
    if not loopback_ok:
        return Blame.CLIENT
    lost_route = connect in (Connect.TIMEOUT, Connect.UNREACHABLE)
    return Blame.NETWORK if lost_route and process_alive is not False else Blame.SERVER


def connect_outcome(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> Connect:
    """Open and close one TCP connection to `host:port`, and say how it ended."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return Connect.OK
    except TimeoutError:
        return Connect.TIMEOUT
    except ConnectionRefusedError:
        return Connect.REFUSED
    except OSError as exc:
        return Connect.UNREACHABLE if exc.errno in UNREACHABLE_ERRNOS else Connect.FAILED


class Loopback:
    """A listening socket of soak's own on 127.0.0.1: connecting to it tells whether soak's side of the network
    works (a host whose network stack, or a process whose descriptors, gave out fails every connect)."""

    def __init__(self) -> None:
        self._listener: socket.socket | None = None
        try:
            self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._listener.bind(("127.0.0.1", 0))
            self._listener.listen(4)
            self._listener.settimeout(CONNECT_TIMEOUT_S)
        except OSError:  # no descriptor left, no loopback: that is what answers() must then say
            self.close()

    def answers(self) -> bool:
        """Whether a connect to soak's own socket completes and is accepted."""
        if self._listener is None:
            return False
        try:
            with socket.create_connection(self._listener.getsockname(), timeout=CONNECT_TIMEOUT_S):
                accepted, _ = self._listener.accept()
                accepted.close()
                return True
        except OSError:
            return False

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None


def server_address(base_url: str) -> tuple[str, int] | None:
    """(host, port) of a base URL (its scheme's port when it names none); None for a URL without both."""
    try:
        host = urllib.parse.urlsplit(base_url).hostname
    except ValueError:
        return None
    port = url_port(base_url)
    return (host, port) if host and port else None


def answers_http(base_url: str, headers: dict[str, str], timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether GET /health gets any HTTP answer (whatever its status) within `timeout_s`."""
    try:
        with urllib.request.urlopen(urllib.request.Request(base_url + "/health", headers=headers), timeout=timeout_s):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


def probe_reachability(base_url: str, loopback: Loopback, process_alive: bool | None,
                       headers: dict[str, str] | None = None) -> Reachability | None:
    """Probe the route to the server of `base_url`, soak's own loopback and, once a connect completes, whether the
    server answers HTTP at all; None for a URL with no host:port."""
    address = server_address(base_url)
    if address is None:
        return None
    connect = connect_outcome(*address)
    loopback_ok = loopback.answers()
    answered = answers_http(base_url, headers or {}) if connect == Connect.OK else None
    host = f"[{address[0]}]" if ":" in address[0] else address[0]
    return Reachability(classify(connect, loopback_ok, process_alive), f"{host}:{address[1]}", connect, loopback_ok,
                        process_alive, answered)
