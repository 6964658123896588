"""Every command and subcommand has help text, and every option says what it does."""

import click
import pytest
from click.testing import CliRunner

from soak.cli import main


def _walk(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield prefix + (name,), command
        if isinstance(command, click.Group):
            yield from _walk(command, prefix + (name,))


COMMANDS = list(_walk(main))


def test_the_documented_commands_exist():
    names = {path[0] for path, _ in COMMANDS}
    assert {"start", "runs", "status", "report", "close", "compare", "refserver"} <= names


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_command_has_help(path, command):
    assert command.help and command.help.strip(), f"soak {' '.join(path)} has no help text"
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"option {param.opts} of soak {' '.join(path)} has no help"
    if path == ("refserver",):
        return  # its flags belong to the reference server's own parser
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_main_help_lists_commands():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "start" in result.output and "report" in result.output


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS] + [()], ids=[" ".join(p) for p, _ in COMMANDS] + ["soak"])
def test_help_never_shows_a_doubled_percent_sign(path):
    # click prints help text as written: "5 %%" (an optparse habit) would show as "5 %%".
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "%%" not in result.output
