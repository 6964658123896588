"""Starting the live view beside a run (`soak start --web`): `soak web` as a child process, never a thread of
the load's process, on a socket bound here so the URL is known (and the port held) before it starts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from soak.address import is_loopback, join_host_port, split_host_port
from soak.errors import ConfigError

STOP_GRACE_S = 5.0
LISTEN_BACKLOG = 64


def bind_listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (port 0: the OS picks) and listening; ConfigError when it cannot bind."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"live view address {join_host_port(host, port)}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot serve the live view at {join_host_port(host, port)}: {exc.strerror or exc}") from None
    return sock


def socket_url(sock: socket.socket, host: str) -> str:
    """http://HOST:PORT of a bound socket (an unspecified host such as 0.0.0.0 is shown as given)."""
    return f"http://{join_host_port(host, sock.getsockname()[1])}"


@dataclass
class WebProcess:
    """A running `soak web` child and the URL of the run's page."""

    process: subprocess.Popen
    url: str

    def stop(self) -> None:
        """SIGTERM the child (by its PID), then SIGKILL it if it has not gone within STOP_GRACE_S."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def bind_web_address(address: str) -> tuple[socket.socket, str]:
    """(listening socket, its base URL) for a HOST:PORT address; ConfigError when it cannot be bound."""
    host, port = split_host_port(address)
    sock = bind_listening_socket(host, port)
    return sock, socket_url(sock, host)


def start_web_process(db_url: str, sock: socket.socket, page_url: str, log_path: Path) -> WebProcess:
    """Start `soak web` serving the database at `db_url` on the listening `sock` (closed here once the child has
    its copy); its output goes to `log_path`. The database URL travels in the environment (SOAK_DB), not on the
    command line other users can read."""
    try:
        command = [sys.executable, "-m", "soak", "web", "--fd", str(sock.fileno()), "--parent-pid", str(os.getpid())]
        with open(log_path, "ab") as log:
            process = subprocess.Popen(command, pass_fds=[sock.fileno()], stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, env={**os.environ, "SOAK_DB": db_url},
                                       start_new_session=True)  # Ctrl-C reaches soak, which stops this itself
        return WebProcess(process, page_url)
    finally:
        sock.close()


def exposure_note(address: str) -> str | None:
    """A warning when the live view listens beyond this machine."""
    host, _ = split_host_port(address)
    if is_loopback(host):
        return None
    return (f"the live view listens on {host}: anyone who can reach it sees this run's data and environment "
            "(no authentication)")
