"""`soak doctor`: check what this machine can run before a long run is started on it."""

from __future__ import annotations

import click

from soak.cli.common import location_options, print_json
from soak.errors import EXIT_PASS, EXIT_USAGE

MARKS = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


@click.command()
@location_options
@click.option("--vllm-bin", "vllm_bin", metavar="PATH", help="The vLLM executable to check (default: `vllm` on "
              "PATH; env SOAK_VLLM_BIN).")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON on stdout.")
@click.pass_context
def doctor(ctx: click.Context, out: str | None, db: str | None, vllm_bin: str | None, as_json: bool) -> None:
    """Check GPU/NVML, vLLM, torch, Chromium, the database and disk, and say what `soak start` would run here.

    Exits 0 when soak can run here (warnings included) and 2 when nothing can.
    """
    from soak.run.doctor import run_checks, usable

    checks = run_checks(out=out, db=db, vllm_bin=vllm_bin)
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
