"""`soak forensics RUN`: open a leak-forensics window on a run that is still running (docs/forensics.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from soak.cli.common import location_options
from soak.errors import ConfigError
from soak.units import format_duration, parse_duration

if TYPE_CHECKING:
    from soak.contracts import Event
    from soak.locations import Locations
    from soak.store import Store

POLL_S = 2.0
PICKUP_S = 30.0  # a running run reads the request within a tick; past this it is not listening


def _duration(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    try:
        seconds = None if value is None else parse_duration(value)
    except ConfigError as exc:
        raise ConfigError(f"invalid --for: {exc}") from None
    if seconds is not None and seconds <= 0:
        raise ConfigError(f"invalid --for {value!r}: a window must last more than 0 s")
    return seconds


@click.command()
@click.argument("run_id")
@location_options
@click.option("--for", "for_s", metavar="D", callback=_duration,
              help="How long the tracker watches (default: the run's --forensics-for, 10m).")
@click.option("--process", metavar="engine|api|all|PID", help="Which server processes (default: the run's "
              "--forensics-process: the growing one, else the engine).")
@click.option("--no-wait", is_flag=True, help="Ask and return; the run's report shows what the window found.")
def forensics(run_id: str, locations: Locations, for_s: float | None, process: str | None, no_wait: bool) -> None:
    """Attach an allocation tracker to a running run's server now, for a bounded window, and print where the
    memory went (the run records it and leaves the window out of its checks)."""
    from soak.config import ForensicsSettings
    from soak.run.forensics import ask_for_window
    from soak.store import Store

    if process is not None:
        try:
            process = ForensicsSettings(process=process).process
        except ValueError:
            raise ConfigError(f"invalid --process {process!r}: must be engine, api, all or a PID") from None
    store = Store.open(locations, read_only=True)
    run = store.get_run(run_id)
    asked_s = run.elapsed_s()
    path = ask_for_window(store, run_id, for_s, process)
    click.echo(f"asked run {run_id} for a forensics window ({path})", err=True)
    if not no_wait:
        _follow(store, run_id, asked_s)


def _follow(store: Store, run_id: str, asked_s: float) -> None:
    """Print the window's progress until every process's result is recorded (Ctrl-C leaves the window running)."""
    from soak.contracts import EventKind
    from soak.run.forensics import REQUEST_FILE, forensics_events_since

    started, seen, wait_since = None, set(), time.monotonic()
    while True:
        events = forensics_events_since(store, run_id, asked_s)
        for event in events:
            key = (event.kind, event.t_s, event.message)
            if key not in seen:
                seen.add(key)
                click.echo(f"{format_duration(event.t_s)} {event.kind}: {event.message}", err=True)
        started = started or next((e for e in events if e.kind == EventKind.FORENSICS_START), None)
        refused = next((e for e in events if e.kind == EventKind.FORENSICS and e.data.get("pid") is None), None)
        if started is None and refused is not None:
            raise ConfigError(f"run {run_id} could not open a forensics window: {'; '.join(refused.data['refusals'])}")
        if started is not None and _all_recorded(events, started):
            _print_results(events)
            return
        run = store.get_run(run_id)
        if run.status != "running":
            raise ConfigError(f"run {run_id} ended ({run.status}) before the window's results were recorded")
        if started is None and time.monotonic() - wait_since > PICKUP_S and (Path(run.out_dir) / REQUEST_FILE).exists():
            raise ConfigError(f"run {run_id} did not take the request within {PICKUP_S:.0f} s; is its soak process "
                              "still running?")
        time.sleep(POLL_S)


def _all_recorded(events: list[Event], started: Event) -> bool:
    """Every process the window watches has its result recorded."""
    from soak.contracts import EventKind

    pids = set(started.data.get("pids") or ())
    found = {e.data.get("pid") for e in events if e.kind == EventKind.FORENSICS and e.t_s >= started.t_s}
    return pids <= found


def _print_results(events: list[Event]) -> None:
    """The sentence of each process's window, on stdout."""
    from soak.analysis.forensics import read_forensics

    for result in read_forensics(events):
        click.echo(result.sentence())
