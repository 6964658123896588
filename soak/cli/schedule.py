"""`soak schedule …` and `soak daemon`: thin commands over soak.schedule (see docs/scheduling.md)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from soak.cli.common import location_options, open_store_or_none, print_json
from soak.errors import ConfigError

if TYPE_CHECKING:
    from soak.config import RunConfig
    from soak.locations import Locations
    from soak.schedule.jobs import Schedule, ScheduleListing


def _duration_s(text: str | None) -> float | None:
    from soak.units import parse_duration

    return None if text is None else parse_duration(text)


def _echo_schedule(schedule: Schedule, verb: str) -> None:
    state = "paused" if schedule.paused else f"next fire {schedule.next_fire_at}"
    click.echo(f"{verb} schedule {schedule.name}: cron {schedule.cron!r} ({schedule.timezone}), {state}", err=True)


def _warn_without_daemon(out_dir: Path) -> None:
    from soak.run.locking import daemon_lock_path, lock_holder

    if lock_holder(daemon_lock_path(out_dir)) is None:
        click.echo(f"note: no soak daemon is running for {out_dir}; schedules fire only while `soak daemon` runs "
                   "(see docs/scheduling.md)", err=True)


def validate_start_args(args: Sequence[str]) -> RunConfig:
    """Parse a schedule's start arguments with the real `soak start` parser and resolve the config, running nothing.

    The library cannot import the command line, so `soak schedule add` passes this to add_schedule.
    """
    from soak.cli.start import start, start_flags
    from soak.config import resolve_config

    try:
        ctx = start.make_context("start", list(args), resilient_parsing=False)
    except click.exceptions.Exit:
        raise ConfigError("the start arguments asked for help or the version instead of a run") from None
    except click.ClickException as exc:
        raise ConfigError(f"invalid start arguments: {exc.format_message()}") from None
    options = dict(ctx.params)
    options.pop("json_output", None)
    return resolve_config(start_flags(options))


@click.group()
def schedule() -> None:
    """Scheduled soak runs (fired by `soak daemon`)."""


@schedule.command(context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.option("--cron", "cron", required=True, metavar="EXPR",
              help='Five-field crontab, Sunday = 0, e.g. "0 20 * * FRI" (or @daily, @weekly…).')
@click.option("--timezone", metavar="TZ", help="IANA zone of the cron times (default: the host's zone).")
@click.option("--notify-env", metavar="VAR", help="Environment variable holding a webhook URL, read by the daemon "
              "at fire time (the URL is never stored).")
@click.option("--misfire-grace", metavar="D", default="1h", show_default=True,
              help="A fire this late (daemon down) still runs; later ones are recorded as missed.")
@click.option("--first-fire-in", metavar="D", hidden=True, help="Tests: first fire after D, then the cron.")
@location_options
@click.option("--json", "json_output", is_flag=True, help="Print the schedule as JSON.")
@click.argument("start_args", nargs=-1, type=click.UNPROCESSED)
def add(name: str, cron: str, timezone: str | None, notify_env: str | None, misfire_grace: str,
        first_fire_in: str | None, locations: Locations, json_output: bool, start_args: tuple[str, ...]) -> None:
    """Add schedule NAME running `soak start START_ARGS…` (put them after --).

    \b
    Example:
      soak schedule add weekend --cron "0 20 * * FRI" -- --hours 48 --model my/model
    """
    from soak.schedule import ScheduleSpec, add_schedule, first_fire_at, host_timezone_name
    from soak.store import Store

    spec = ScheduleSpec(name=name, cron=cron, timezone=timezone or host_timezone_name(),
                        start_args=tuple(start_args), notify_env=notify_env, workdir=os.getcwd())
    added = add_schedule(Store.open(locations), spec, check_start_args=validate_start_args,
                         misfire_grace_s=_duration_s(misfire_grace),
                         first_fire_at=first_fire_at(_duration_s(first_fire_in)))
    _echo_schedule(added, "added")
    if notify_env and not os.environ.get(notify_env):
        click.echo(f"note: ${notify_env} is not set here; the daemon reads it from its own environment", err=True)
    _warn_without_daemon(locations.out_dir)
    if json_output:
        print_json(added.as_dict())


def _table(columns: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="soak schedules")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*["—" if value is None else str(value) for value in row])
    Console(width=160).print(table)


def _list_row(listing: ScheduleListing) -> list[Any]:
    """One row of the `schedule list` table."""
    schedule, run, event = listing.schedule, listing.last_run, listing.last_event
    return [schedule.name, schedule.cron, schedule.timezone,
            "paused" if schedule.paused else schedule.next_fire_at,
            None if run is None else f"{run.id} {run.status} {run.verdict or ''}".strip(),
            event and f"{event.kind} {event.at}", " ".join(schedule.start_args)]


@schedule.command(name="list")
@location_options
@click.option("--json", "json_output", is_flag=True, help="Print the schedules as JSON.")
def list_(locations: Locations, json_output: bool) -> None:
    """List schedules: cron, next fire time, last run and its verdict, last daemon event."""
    from soak.schedule import list_schedules

    store = open_store_or_none(locations)
    found = list_schedules(store) if store else []
    if json_output:
        print_json([listing.as_dict() for listing in found])
        return
    _table(["name", "cron", "zone", "next fire", "last run", "last event", "start arguments"],
           [_list_row(listing) for listing in found])


@schedule.command()
@click.argument("name")
@location_options
def remove(name: str, locations: Locations) -> None:
    """Remove schedule NAME (a run in progress continues; its history stays)."""
    from soak.schedule import remove_schedule
    from soak.store import Store

    remove_schedule(Store.open(locations), name)
    click.echo(f"removed schedule {name}", err=True)


@schedule.command()
@click.argument("name")
@location_options
def pause(name: str, locations: Locations) -> None:
    """Stop firing schedule NAME until resumed."""
    from soak.schedule import pause_schedule
    from soak.store import Store

    _echo_schedule(pause_schedule(Store.open(locations), name), "paused")


@schedule.command()
@click.argument("name")
@location_options
def resume(name: str, locations: Locations) -> None:
    """Fire schedule NAME again from its next cron time."""
    from soak.schedule import resume_schedule
    from soak.store import Store

    _echo_schedule(resume_schedule(Store.open(locations), name), "resumed")


@schedule.command(name="run-now")
@click.argument("name")
@location_options
def run_now(name: str, locations: Locations) -> None:
    """Ask the daemon to fire schedule NAME now (same rules: one run at a time, lock respected)."""
    from soak.schedule import request_run_now
    from soak.store import Store

    out_dir = locations.out_dir
    request = request_run_now(Store.open(locations), name, out_dir)
    if request.daemon_pid is None:
        click.echo(f"queued run of {name}; no soak daemon is running for {out_dir}: it starts when one does "
                   "(within the misfire grace time)", err=True)
    else:
        click.echo(f"queued run of {name} for the daemon (pid {request.daemon_pid})", err=True)


@schedule.command()
@click.argument("name", required=False)
@location_options
@click.option("--limit", type=int, default=50, show_default=True, help="Show at most this many events.")
@click.option("--json", "json_output", is_flag=True, help="Print the events as JSON.")
def events(name: str | None, locations: Locations, limit: int, json_output: bool) -> None:
    """What the daemon did with each fire (started, finished, skipped, missed, notified), newest first."""
    from soak.schedule import list_events
    from soak.store.queries import row_to_dict

    store = open_store_or_none(locations)
    found = list_events(store, name, limit=limit) if store else []
    if json_output:
        print_json([row_to_dict(event) for event in found])  # the JSON edge: every column of each event
        return
    for event in found:
        run = f" run {event.run_id}" if event.run_id else ""
        click.echo(f"{event.at}  {event.schedule_name}  {event.kind}{run}  {event.message}")


@click.command()
@location_options
@click.option("--on-stop", type=click.Choice(["stop", "wait"]), default="stop", show_default=True,
              help="On SIGTERM/SIGINT: stop a run in progress (it writes its report) or wait for it to end.")
@click.option("--stop-timeout", metavar="D", default="90s", show_default=True,
              help="With --on-stop stop: how long a run may take to stop and write its report before SIGKILL.")
@click.option("--poll-every", metavar="D", default="5s", show_default=True,
              help="How often to pick up schedules changed by other commands and run-now requests.")
def daemon(locations: Locations, on_stop: str, stop_timeout: str, poll_every: str) -> None:
    """Fire the schedules of this database until SIGTERM (run it under systemd: docs/deploy/)."""
    from soak.schedule import DaemonSettings, run_daemon
    from soak.store import Store

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s soak daemon: %(message)s", datefmt="%Y-%m-%dT%H:%M:%S%z")
    for noisy in ("apscheduler", "alembic"):  # soak's own lines say what happened
        logging.getLogger(noisy).setLevel(logging.WARNING)
    settings = DaemonSettings(out_dir=locations.out_dir, db_url=locations.db_url, config_file=locations.config_file,
                              on_stop=on_stop, stop_timeout_s=_duration_s(stop_timeout), poll_s=_duration_s(poll_every))
    run_daemon(Store.open(locations), settings)
