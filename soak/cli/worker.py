"""`soak worker`: join a `soak start --expect-workers N` from another host as one of its load workers."""

from __future__ import annotations

import logging

import click

from soak.units import parse_duration

DEFAULT_CONNECT_TIMEOUT = "5m"


def _say(message: str) -> None:
    click.echo(f"soak worker: {message}", err=True)


@click.command()
@click.option("--master", required=True, metavar="HOST[:PORT]",
              help="The soak start to join: the address it was given with --master-bind (port 5557 by default).")
@click.option("--connect-timeout", default=DEFAULT_CONNECT_TIMEOUT, show_default=True, metavar="D",
              help="Longest wait for the master to answer (90s, 5m, 1h).")
def worker(master: str, connect_timeout: str) -> None:
    """Send a share of a run's load from this host, for a `soak start --expect-workers N` elsewhere.

    The master hands this worker the run (scenarios, rate share, target URL) and it sends its share of the
    requests to the target, returning every measurement to the master; the target URL must be reachable
    from here, and a scenario file or dataset the run names must exist here at the same path.

    Exits 0 when the master ends the run, 2 when no master answers in time, the run already has its workers,
    the run cannot be prepared here, or the master goes away before the end.
    """
    from soak.load.worker import run_worker  # imports Locust (gevent patching) only for this command

    timeout_s = parse_duration(connect_timeout)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_worker(master, timeout_s, say=_say)
