"""Where runs are stored: the output folder and the database, resolved the same way by every command.

Flags (`--out`, `--db`) win over `SOAK_OUT`/`SOAK_DB`, which win over `out`/`db` in the TOML file named by
`--config` or `SOAK_CONFIG`; the defaults are ./soak-runs and sqlite:///<out>/soak.db.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from soak.settings import Layers, read_layers

DEFAULT_OUT = "./soak-runs"
DEFAULT_DB_ORIGIN = "default (soak.db in the output folder)"


@dataclass(frozen=True)
class Locations:
    """The output folder, the database URL, and where each came from (`--out`, `SOAK_DB`, `db in FILE`, …)."""

    out_dir: Path
    db_url: str
    out_origin: str = "default"
    db_origin: str = DEFAULT_DB_ORIGIN
    config_file: Path | None = None

    @classmethod
    def from_layers(cls, layers: Layers) -> Locations:
        """Resolve from settings already read; a relative path is taken from the working directory."""
        out_dir = Path(layers.value("out") or DEFAULT_OUT).expanduser().resolve()
        db_url = layers.value("db")
        db_origin = layers.origin("db") if db_url else DEFAULT_DB_ORIGIN
        return cls(out_dir=out_dir, db_url=db_url or f"sqlite:///{out_dir / 'soak.db'}",
                   out_origin=layers.origin("out"), db_origin=db_origin, config_file=layers.config_file)


def resolve_locations(out: str | None = None, db: str | None = None, config: str | None = None,
                      environ: Mapping[str, str] | None = None) -> Locations:
    """The locations given these flag values (None = not given), the `SOAK_*` environment and the config file."""
    return Locations.from_layers(read_layers({"out": out, "db": db, "config": config}, environ))
