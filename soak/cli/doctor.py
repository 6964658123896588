"""`soak doctor`: check what this machine can run before a long run is started on it."""

from __future__ import annotations

import click

from soak.cli.common import location_flags, print_json, setting_option
from soak.errors import EXIT_PASS, EXIT_USAGE
from soak.settings import SETTINGS_BY_KEY

MARKS = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


@click.command()
@location_flags
@setting_option(SETTINGS_BY_KEY["vllm_bin"], show_env=True)
@setting_option(SETTINGS_BY_KEY["target"], show_env=True)
@setting_option(SETTINGS_BY_KEY["served_model"], show_env=True)
@setting_option(SETTINGS_BY_KEY["api_key_env"], show_env=True)
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON on stdout.")
@click.pass_context
def doctor(ctx: click.Context, out: str | None, db: str | None, config: str | None, vllm_bin: str | None,
           target: tuple[str, ...], served_model: str | None, api_key_env: str | None, as_json: bool) -> None:
    """Check GPU/NVML, vLLM, torch, Chromium, the database and disk, and say what `soak start` would run here.

    With --target URL (repeatable: each replica of a fleet) it also asks each server what it serves and accepts
    (LoRA adapters, JSON schema, tools, images), one small request each, as `soak start` does before its load.

    It reads the settings `soak start` would (flags, SOAK_*, the --config file) and creates nothing.
    Exits 0 when soak can run here (warnings included) and 2 when nothing can (or --target does not answer).
    """
    from soak.config import target_urls
    from soak.locations import Locations
    from soak.run.doctor import run_checks, usable
    from soak.settings import read_layers
    from soak.target.base import bearer_headers

    layers = read_layers({"out": out, "db": db, "config": config, "vllm_bin": vllm_bin, "target": target,
                          "served_model": served_model, "api_key_env": api_key_env})
    checks = run_checks(locations=Locations.from_layers(layers), vllm_bin=layers.value("vllm_bin"),
                        targets=target_urls(layers.value("target")), served_model=layers.value("served_model"),
                        headers=bearer_headers(layers.value("api_key_env")))
    ok = usable(checks)
    if as_json:
        print_json({"usable": ok, "checks": [check.as_dict() for check in checks]})
    else:
        width = max(len(check.name) for check in checks)
        for check in checks:
            click.echo(f"{MARKS.get(check.status, check.status)}  {check.name:<{width}}  {check.detail}")
        warnings = sum(check.status == "warn" for check in checks)
        click.echo(f"soak doctor: {'usable' if ok else 'NOT usable'} ({warnings} warning(s))")
    ctx.exit(EXIT_PASS if ok else EXIT_USAGE)
