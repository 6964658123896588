"""`soak web`: the read-only live view of the runs in a database (docs/report.md, "Live view")."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import click

from soak.cli.common import location_options
from soak.errors import ConfigError

if TYPE_CHECKING:
    from soak.locations import Locations

DEFAULT_PORT = 8090


@click.command()
@location_options
@click.option("--bind", "bind", metavar="ADDR", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but loopback exposes every run's data and environment, "
                   "without authentication.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port to listen on (0: a free one; the URL is printed).")
@click.option("--refresh", type=click.FloatRange(1, 3600), default=5.0, show_default=True, metavar="SECONDS",
              help="How often the pages reload themselves.")
@click.option("--fd", type=int, hidden=True, help="Serve on this inherited listening socket (soak start --web).")
@click.option("--parent-pid", type=int, hidden=True, help="Exit when this process is gone (soak start --web).")
def web(locations: Locations, bind: str, port: int, refresh: float, fd: int | None, parent_pid: int | None) -> None:
    """Serve a read-only live view of the runs in the database: a run picker at / and each run's report,
    marked in progress while it runs, at /runs/RUN. Pages reload every few seconds; only GET is answered.

    It reads the database only, in its own process, so a running soak is never slowed by it.
    """
    from soak.address import join_host_port, split_host_port
    from soak.run.live_view import bind_listening_socket, exposure_note, socket_url
    from soak.store import Store
    from soak.web.app import serve

    store = Store.open(locations, read_only=True)  # the live view only reads, and never creates a database
    if fd is not None:
        serve(store, socket.socket(fileno=fd), refresh, parent_pid)
        return
    try:
        host, port = split_host_port(bind, default_port=port)
    except ValueError as exc:
        raise ConfigError(f"invalid --bind: {exc}") from None
    sock = bind_listening_socket(host, port)
    note = exposure_note(join_host_port(host, port))
    if note:
        click.echo(f"warning: {note}", err=True)
    click.echo(f"soak web: the runs of {store.url}, read-only; Ctrl-C stops",
               err=True)
    click.echo(f"{socket_url(sock, host)}/")  # stdout: the URL alone, for scripts
    serve(store, sock, refresh)
