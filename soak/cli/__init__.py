"""The `soak` command line: parse, build the typed config, call the library, map errors to exit codes."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from soak import __version__
from soak.errors import EXIT_INTERNAL, SoakError

log = logging.getLogger("soak")


def _fail(exc: BaseException) -> None:
    """Print one clear line (plus any quoted log tail) and exit with the error's code."""
    code = exc.exit_code if isinstance(exc, SoakError) else EXIT_INTERNAL
    message = str(exc) if isinstance(exc, SoakError) else f"internal error: {type(exc).__name__}: {exc}"
    click.echo(f"soak: error: {message}", err=True)
    sys.exit(code)


class SoakGroup(click.Group):
    """A group whose commands turn SoakError into a one-line message and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SoakError as exc:
            _fail(exc)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # last resort: a clean line and exit 4, details in the log
            log.exception("internal error")
            _fail(exc)


@click.group(cls=SoakGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="soak")
def main() -> None:
    """soak: long stability tests for LLM inference servers, with verdicts a release can be signed on."""


# -- commands ---------------------------------------------------------------------------------------
from soak.cli.archive import export, prune  # noqa: E402 - registered after the group exists
from soak.cli.doctor import doctor  # noqa: E402 - registered after the group exists
from soak.cli.forensics import forensics  # noqa: E402 - registered after the group exists
from soak.cli.history import history  # noqa: E402 - registered after the group exists
from soak.cli.model import model  # noqa: E402 - registered after the group exists
from soak.cli.runs import close, compare, report, runs, status  # noqa: E402 - registered after the group exists
from soak.cli.schedule import daemon, schedule  # noqa: E402 - registered after the group exists
from soak.cli.start import replica, start  # noqa: E402 - registered after the group exists
from soak.cli.web import web  # noqa: E402 - registered after the group exists
from soak.cli.worker import worker  # noqa: E402 - registered after the group exists

main.add_command(start)
main.add_command(replica)
main.add_command(runs)
main.add_command(status)
main.add_command(report)
main.add_command(close)
main.add_command(compare)
main.add_command(schedule)
main.add_command(daemon)
main.add_command(doctor)
main.add_command(worker)
main.add_command(history)
main.add_command(export)
main.add_command(prune)
main.add_command(web)
main.add_command(model)
main.add_command(forensics)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []})
@click.pass_context
def refserver(ctx: click.Context) -> None:
    """Run the CPU reference inference server (flags: soak refserver --help)."""
    from soak.refserver import main as refserver_main

    sys.exit(refserver_main(list(ctx.args)))


if __name__ == "__main__":  # pragma: no cover
    main()
