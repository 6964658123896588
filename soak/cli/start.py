"""`soak start`: flags → RunConfig → run → verdict exit code, with live progress on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import click

from soak.cli.common import VERDICT_EXIT, apply_options, config_option, print_json, setting_option
from soak.contracts import FleetSummary, P99Ms, Progress, Stage, Summary, Verdict
from soak.errors import ConfigError
from soak.settings import LENGTH, LOCATIONS, SETTINGS, SETTINGS_BY_KEY
from soak.units import format_duration, parse_duration

# --hours and --minutes are other spellings of --duration; --config names the file; neither is a setting itself.
EXTRA_SECTIONS = {"hours": LENGTH, "minutes": LENGTH, "config": LOCATIONS}


def _duration_flag(hours: float | None, minutes: float | None, duration: str | None) -> str | None:
    given = [name for name, value in (("--duration", duration), ("--hours", hours), ("--minutes", minutes))
             if value is not None]
    if len(given) > 1:
        raise ConfigError(f"give only one of {', '.join(given)}")
    if hours is not None:
        return f"{hours * 3600:g}s"
    if minutes is not None:
        return f"{minutes * 60:g}s"
    if duration is not None:
        parse_duration(duration)  # a malformed duration fails here, before anything starts
    return duration


def start_flags(options: dict[str, Any]) -> dict[str, Any]:
    """Flag values as flat config keys; flags not given are None (or empty lists) and do not override."""
    flags = {key: value for key, value in options.items() if value not in (None, (), False)}
    for key in ("hours", "minutes"):
        flags.pop(key, None)
    duration = _duration_flag(options.get("hours"), options.get("minutes"), options.get("duration"))
    if duration is not None:
        flags["duration"] = duration
    return {key: list(value) if isinstance(value, tuple) else value for key, value in flags.items()}


class ProgressPrinter:
    """Live progress on stderr: a Rich status line on a terminal, a plain line every 10 s otherwise."""

    def __init__(self) -> None:
        self.interactive = sys.stderr.isatty()
        self._last_print = 0.0
        self._console = None
        if self.interactive:
            from rich.console import Console

            self._console = Console(stderr=True)
            self._status = self._console.status("starting…")
            self._status.start()

    def __call__(self, progress: Progress) -> None:
        line = describe_progress(progress)
        if self.interactive and progress.message and progress.stage in (Stage.STARTING, Stage.STORAGE_FAILURE):
            self._console.print(line)  # a start message (the live view's URL…) or a storage outage stays on screen
        elif self.interactive:
            self._status.update(line)
        elif progress.stage not in (Stage.WARM_UP, Stage.MEASURING) or time.monotonic() - self._last_print >= 10:
            self._last_print = time.monotonic()
            click.echo(line, err=True)

    def close(self) -> None:
        if self.interactive:
            self._status.stop()


def describe_progress(progress: Progress) -> str:
    """One human line of progress."""
    stage = progress.stage
    if stage == Stage.STARTING:
        return progress.message or f"starting the {progress.target} server…"
    if stage == Stage.FINALISING:
        return progress.message or f"run {progress.run_id}: stopping load, analysing, writing the report…"
    if stage == Stage.STORAGE_FAILURE:  # a storage outage begun, ended, or beyond its budget: the message says which
        return progress.message or "storage failure"
    elapsed, total = progress.elapsed_s or 0.0, progress.duration_s or 0.0
    return (f"{progress.run_id} {stage} {format_duration(elapsed)}/{format_duration(total)} "
            f"(left {format_duration(max(total - elapsed, 0))}) | {_traffic_text(progress)} | "
            f"{_server_memory_text(progress.server_rss_bytes)} | in flight {progress.in_flight}")


def _traffic_text(progress: Progress) -> str:
    """Requests, rate, errors and P99s — which are measured only after the warm-up, so during it
    the line says so rather than showing "None req/s" and "0 ms"."""
    if progress.rate_rps is None:
        return f"{progress.requests} req, {progress.errors} errors | rate and P99s from the end of warm-up"
    p99 = progress.p99_ms or P99Ms()
    latency = ", ".join(f"{label} {value:.0f} ms" for value, label in ((p99.ttft, "P99 TTFT"), (p99.e2e, "E2E"))
                        if value)
    return (f"{progress.requests} req, {progress.rate_rps:.2f} req/s, {progress.errors} errors | "
            f"{latency or 'P99s after the first finished window'}")


def _server_memory_text(rss_bytes: float | None) -> str:
    """Server RSS, or why it is not known (a server soak did not start and was not given a PID)."""
    if not rss_bytes:
        return "server RSS not sampled (no server PID)"
    return f"server RSS {rss_bytes / 2**20:.0f} MiB"


def print_verdict(summary: Summary) -> None:
    """The verdict and the failing checks, to stderr."""
    click.echo(f"verdict: {summary.verdict.value} — {summary.verdict_reason}", err=True)
    for finding in summary.findings:
        if finding.verdict in (Verdict.FAIL, Verdict.SUSPECT, Verdict.INVALID, Verdict.INCONCLUSIVE):
            click.echo(f"  {finding.check}: {finding.verdict.value} — {finding.evidence}", err=True)
    for line in outcome_lines(summary):
        click.echo(line, err=True)
    click.echo(f"report: {summary.report_html}", err=True)


def outcome_lines(summary: Summary, most: int = 3) -> list[str]:
    """The most frequent error messages, and every validation gap, one line each."""
    messages = summary.error_messages
    lines = [f"  error: {item.count} × {item.message}" for item in messages[:most]]
    if len(messages) > most:
        lines.append(f"  error: … {len(messages) - most} more distinct messages in summary.json")
    lines += [f"  validation gap: {gap.count} × {gap.scenario} expected {gap.expectation}; got HTTP "
              f"{gap.status_code or 200}" for gap in summary.validation_gaps]
    return lines


class SectionedCommand(click.Command):
    """A command whose --help lists its options under the section headings of the settings table."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            setting = SETTINGS_BY_KEY.get(param.name or "")
            title = setting.section if setting else EXTRA_SECTIONS.get(param.name or "", "Other options")
            sections.setdefault(title, []).append(record)
        for title, rows in sections.items():
            with formatter.section(title):
                formatter.write_dl(rows)


def start_options(command: Callable) -> Callable:
    """One option per row of the settings table, in its order, with --hours/--minutes after --duration."""
    options = []
    for setting in SETTINGS:
        options.append(setting_option(setting))
        if setting.key == "duration":
            options += [click.option("--hours", type=float, help="Run length in hours."),
                        click.option("--minutes", type=float, help="Run length in minutes.")]
    return apply_options(command, [*options, config_option()])


@click.command(cls=SectionedCommand)
@start_options
def start(**options: Any) -> None:
    """Run a soak test: start (or attach to) a server, load it, sample it, and decide.

    With no --target and no --model, soak starts its embedded CPU reference server.

    Each option can also be set as SOAK_<NAME> (SOAK_SAMPLE_EVERY=5s) or in the --config TOML file
    (sample-every = "5s"); flags win over the environment, which wins over the file.

    Exit codes: 0 PASS, 1 FAIL, 2 usage/config/startup error, 3 SUSPECT, INVALID or INCONCLUSIVE (not signed
    off), 4 internal error.
    """
    from soak.config import resolve_config

    config = resolve_config(start_flags(options))
    if config.target.is_fleet:
        _start_fleet(config)
    summary = _run(config)
    print_verdict(summary)
    if config.json_output:
        print_json(summary.to_json_dict())  # the CLI's edge: summary.json's document
    sys.exit(VERDICT_EXIT.get(summary.verdict.value, 3))


def _start_fleet(config) -> None:  # config: a RunConfig with several targets
    """Several targets: one run per replica under a fleet run, the fleet's verdict as the exit code."""
    from soak.run.fleet import FleetConductor

    fleet = FleetConductor(config, lambda line: click.echo(line, err=True)).execute()
    print_fleet_verdict(fleet)
    if config.json_output:
        print_json(fleet.to_json_dict())
    sys.exit(VERDICT_EXIT.get(fleet.verdict.value, 3))


def print_fleet_verdict(fleet: FleetSummary) -> None:
    """The fleet's verdict, then one line per replica, to stderr."""
    click.echo(f"fleet verdict: {fleet.verdict.value} — {fleet.verdict_reason}", err=True)
    for replica in fleet.replicas:
        click.echo(f"  replica {replica.name}: {replica.verdict.value} — {replica.verdict_reason}", err=True)
    click.echo(f"report: {fleet.report_html}", err=True)


@click.command(hidden=True)
@click.argument("config_file", type=click.Path(exists=True, dir_okay=False))
def replica(config_file: str) -> None:
    """One replica's run of a fleet, from the config its fleet wrote (started by `soak start`, not by hand)."""
    from pathlib import Path

    from soak.config import RunConfig

    config = RunConfig.model_validate_json(Path(config_file).read_text(encoding="utf-8"))
    summary = _run(config)
    print_verdict(summary)
    sys.exit(VERDICT_EXIT.get(summary.verdict.value, 3))


def _run(config) -> Summary:  # config: a RunConfig
    from soak.run.conductor import execute  # imports Locust (gevent patching) only for `start`

    printer = ProgressPrinter()
    try:
        return execute(config, printer)
    finally:
        printer.close()
