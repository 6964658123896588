"""`soak start`: flags → RunConfig → run → verdict exit code, with live progress on stderr."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from soak.cli.common import VERDICT_EXIT, location_options, print_json
from soak.errors import ConfigError
from soak.units import format_duration, parse_duration

MULTI = {"multiple": True, "default": ()}


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
    if "seed" in flags:  # one seed drives both the prompts and the reference server
        flags["reference_seed"] = flags["seed"]
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

    def __call__(self, progress: dict[str, Any]) -> None:
        line = describe_progress(progress)
        if self.interactive:
            self._status.update(line)
        elif progress.get("stage") not in ("warm-up", "measuring") or time.monotonic() - self._last_print >= 10:
            self._last_print = time.monotonic()
            click.echo(line, err=True)

    def close(self) -> None:
        if self.interactive:
            self._status.stop()


def describe_progress(progress: dict[str, Any]) -> str:
    """One human line of progress."""
    stage = progress.get("stage", "")
    if stage == "starting":
        return f"starting the {progress.get('target')} server…"
    if stage == "finalising":
        return f"run {progress.get('run_id')}: stopping load, analysing, writing the report…"
    if stage == "storage_failure":
        return f"storage failure: {progress.get('message')}"
    elapsed, total = progress["elapsed_s"], progress["duration_s"]
    p99 = progress.get("p99_ms") or {}
    rate = progress.get("rate_rps")
    return (f"{progress['run_id']} {stage} {format_duration(elapsed)}/{format_duration(total)} "
            f"(left {format_duration(max(total - elapsed, 0))}) | "
            f"{progress['requests']} req, {rate if rate is None else f'{rate:.2f}'} req/s, "
            f"{progress['errors']} errors | P99 TTFT {p99.get('ttft', 0):.0f} ms, E2E {p99.get('e2e', 0):.0f} ms | "
            f"server RSS {progress['server_rss_bytes'] / 2**20:.0f} MiB | in flight {progress['in_flight']}")


def print_verdict(summary: dict[str, Any]) -> None:
    """The verdict and the failing checks, to stderr."""
    click.echo(f"verdict: {summary['verdict']} — {summary.get('verdict_reason', '')}", err=True)
    for finding in summary["findings"]:
        if finding["verdict"] in ("FAIL", "SUSPECT", "INVALID", "INCONCLUSIVE"):
            click.echo(f"  {finding['check']}: {finding['verdict']} — {finding['evidence']}", err=True)
    click.echo(f"report: {summary['report_html']}", err=True)


@click.command()
@click.option("--duration", metavar="D", help="Run length (90s, 5m, 24h, 1h30m); includes warm-up and probes.")
@click.option("--hours", type=float, help="Run length in hours.")
@click.option("--minutes", type=float, help="Run length in minutes.")
@click.option("--target", metavar="URL", help="Base URL of a running OpenAI-compatible server (no /v1).")
@click.option("--model", metavar="NAME", help="Start embedded vLLM serving NAME (needs `vllm` on PATH).")
@click.option("--served-model", metavar="NAME", help="Model name to send (default: the only one listed).")
@click.option("--vllm-bin", metavar="PATH", help="The vllm executable to run (default: from PATH).")
@click.option("--serve-arg", metavar="ARG", **MULTI, help="Extra argument for `vllm serve` (repeatable).")
@click.option("--scenario", metavar="NAME[:W]|PATH", **MULTI, help="Scenario and weight (repeatable).")
@click.option("--rate", metavar="RPS", type=float, help="Target request rate (open-loop arrivals).")
@click.option("--burstiness", type=float, help="Gamma arrivals with this burstiness (default Poisson).")
@click.option("--max-concurrency", type=int, metavar="N", help="Cap on requests in flight (queue time recorded).")
@click.option("--warmup", metavar="D", help="Warm-up excluded from verdicts (default 5 %% of the run, 30s–60m).")
@click.option("--window", metavar="D", help="Analysis window (default (run − warm-up)/48, 5s–30m).")
@click.option("--sample-every", metavar="D", help="Telemetry sampling interval (default 5s).")
@click.option("--idle-probe-every", metavar="D", help="Idle probe interval (default run/6, 1m–60m).")
@click.option("--idle-probe-for", metavar="D", help="Hold after an idle probe's drain (default 30s).")
@click.option("--no-idle-probes", is_flag=True, default=None, help="Never pause arrivals for idle probes.")
@click.option("--server-pid", type=int, metavar="PID", **MULTI, help="Extra server process to sample (repeatable).")
@click.option("--metrics-url", metavar="URL", **MULTI, help="Extra Prometheus endpoint to scrape (repeatable).")
@click.option("--workers", type=int, metavar="N", help="Locust worker processes (default 0: in-process).")
@click.option("--dataset", metavar="FILE", type=click.Path(dir_okay=False), help="ShareGPT JSON/JSONL prompts.")
@click.option("--seed", type=int, help="Seed of prompts, arrivals and the reference server (default 0).")
@click.option("--reference-fault", metavar="NAME[=VALUE]", **MULTI,
              help="Plant a fault in the reference server (repeatable; see docs/refserver.md).")
@click.option("--time-scale", type=float, help="Reference server model-time compression (default 1).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), help="Reference server device (default cpu).")
@click.option("--restart", type=click.Choice(["never", "on-crash"]), help="Restart policy for a managed server.")
@click.option("--max-restarts", type=int, help="Most restarts under --restart on-crash (default 3).")
@click.option("--startup-timeout", metavar="D", help="Longest wait for a managed server to be ready (15m).")
@click.option("--request-timeout", metavar="D", help="Per-request timeout (default 5m).")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key (never stored).")
@click.option("--gates", metavar="FILE", type=click.Path(dir_okay=False), help="Gates file (TOML).")
@click.option("--baseline", metavar="RUN", help="Compare with this earlier run.")
@click.option("--keep-requests", is_flag=True, default=None, help="Also store one row per request.")
@location_options
@click.option("--config", metavar="FILE", type=click.Path(dir_okay=False), help="TOML file with the same keys.")
@click.option("--json", "json_output", is_flag=True, default=None, help="Also print summary.json to stdout.")
def start(**options: Any) -> None:
    """Run a soak test: start (or attach to) a server, load it, sample it, and decide.

    With no --target and no --model, soak starts its embedded CPU reference server.
    Exit codes: 0 PASS, 1 FAIL, 2 usage/config/startup error, 3 INVALID or INCONCLUSIVE, 4 internal error.
    """
    from soak.config import resolve_config

    json_output = bool(options.pop("json_output"))
    config = resolve_config(start_flags(options))
    if json_output:
        config = config.model_copy(update={"json_output": True})
    summary = _run(config)
    print_verdict(summary)
    if config.json_output:
        print_json(summary)
    sys.exit(VERDICT_EXIT.get(summary["verdict"], 3))


def _run(config) -> dict[str, Any]:  # config: a RunConfig
    from soak.run.conductor import execute  # imports Locust (gevent patching) only for `start`

    printer = ProgressPrinter()
    try:
        return execute(config, printer)
    finally:
        printer.close()
