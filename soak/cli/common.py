"""Pieces every `soak` command shares: options made from the settings table, locations, the store, JSON output."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import click

from soak.settings import CONFIG_ENV, SETTINGS_BY_KEY, Setting

if TYPE_CHECKING:
    from soak.locations import Locations
    from soak.store import Store

VERDICT_EXIT = {"PASS": 0, "FAIL": 1, "SUSPECT": 3, "INCONCLUSIVE": 3, "INVALID": 3}  # 3: not signed off
CLICK_TYPES: dict[str, Any] = {"int": int, "float": float, "file": click.Path(dir_okay=False),
                               "folder": click.Path(file_okay=False)}
CONFIG_HELP = f"TOML file of settings, keys named like the `soak start` options. Env {CONFIG_ENV}."


def setting_option(setting: Setting, show_env: bool = False) -> Callable:
    """The click option of one row of the settings table; not given, it is None (or empty) and overrides nothing."""
    kwargs: dict[str, Any] = {"help": f"{setting.help} Env {setting.env}." if show_env else setting.help,
                              "metavar": setting.metavar}
    if setting.kind == "flag":
        kwargs.update(is_flag=True, default=None)
    elif setting.kind == "choice":
        kwargs["type"] = click.Choice(setting.choices)
    elif setting.kind in CLICK_TYPES:
        kwargs["type"] = CLICK_TYPES[setting.kind]
    if setting.multiple:
        kwargs.update(multiple=True, default=())
    if setting.flag_value is not None:  # `--web` alone, or `--web ADDR`
        kwargs.update(is_flag=False, flag_value=setting.flag_value)
    return click.option(setting.flag, setting.key, **kwargs)


def config_option() -> Callable:
    """--config FILE (else SOAK_CONFIG)."""
    return click.option("--config", "config", metavar="FILE", type=click.Path(dir_okay=False), help=CONFIG_HELP)


def apply_options(command: Callable, options: Iterable[Callable]) -> Callable:
    """Apply option decorators so that --help lists them in the order given."""
    for option in reversed(list(options)):
        command = option(command)
    return command


def location_flags(command: Callable) -> Callable:
    """--out, --db and --config as plain parameters `out`, `db`, `config`."""
    return apply_options(command, [setting_option(SETTINGS_BY_KEY["out"], show_env=True),
                                   setting_option(SETTINGS_BY_KEY["db"], show_env=True), config_option()])


def location_options(command: Callable) -> Callable:
    """--out, --db and --config, resolved into one `locations` argument (soak.locations.Locations)."""

    @functools.wraps(command)
    def with_locations(*args: Any, out: str | None, db: str | None, config: str | None, **kwargs: Any) -> Any:
        from soak.locations import resolve_locations

        return command(*args, locations=resolve_locations(out, db, config), **kwargs)

    return location_flags(with_locations)


def open_store_or_none(locations: Locations) -> Store | None:
    """The store of `locations` opened read-only, or None where there is no database yet (listing commands
    then list nothing, and leave no empty database behind)."""
    from soak.errors import MissingDatabaseError
    from soak.store import Store

    try:
        return Store.open(locations, read_only=True)
    except MissingDatabaseError:
        return None


def print_json(value: Any) -> None:
    """JSON to stdout (progress and errors go to stderr)."""
    click.echo(json.dumps(value, indent=2, default=str))
