"""docs/observability.md's table of series and the catalog the page, the push and the export name them from say the
same: every series has its row (Prometheus name, OpenTelemetry name, type, unit, labels), and no row names a series
the catalog lacks."""

from __future__ import annotations

import re
from pathlib import Path

from soak.metrics.catalog import CATALOG

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
ROW = re.compile(r"^\| `(?P<prom>[a-z_:]+)` \| `(?P<otel>[a-z_.]+)` \| (?P<kind>\w+) \| `(?P<unit>[^`]+)` \| "
                 r"(?P<labels>[^|]+) \|")


def documented_rows() -> dict[str, dict[str, str]]:
    rows = (ROW.match(line) for line in DOC.read_text(encoding="utf-8").splitlines())
    return {match["prom"]: match.groupdict() for match in rows if match}


def test_every_series_has_its_row():
    rows = documented_rows()
    for spec in CATALOG:
        row = rows.get(spec.sample_name)
        assert row is not None, f"docs/observability.md has no row for {spec.sample_name}"
        labels = re.findall(r"`(\w+)`", row["labels"])
        assert (row["otel"], row["kind"], row["unit"], labels) == (spec.otel, str(spec.kind), spec.unit,
                                                                   list(spec.labels)), spec.sample_name


def test_no_row_names_a_series_the_catalog_lacks():
    assert set(documented_rows()) == {spec.sample_name for spec in CATALOG}


def test_names_are_unique_in_both_conventions():
    assert len({spec.prom for spec in CATALOG}) == len({spec.otel for spec in CATALOG}) == len(CATALOG)
