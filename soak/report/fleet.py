"""The fleet report: one page with the fleet's verdict, a table of its replicas and a link to each one's report."""

from __future__ import annotations

import os
from pathlib import Path

import soak
from soak.contracts import FleetSummary
from soak.report.render import environment, write_atomically

TEMPLATE = "fleet.html.j2"


def replica_links(summary: FleetSummary, out_path: Path) -> dict[str, str]:
    """Each replica's report, relative to the fleet's page (the replicas' folders sit inside the fleet's)."""
    return {r.name: os.path.relpath(r.report_html, Path(out_path).parent) for r in summary.replicas if r.report_html}


def fleet_html(summary: FleetSummary, links: dict[str, str]) -> str:
    """The fleet's page as text; `links` maps a replica's name to where its report is."""
    return environment().get_template(TEMPLATE).render(fleet=summary, links=links, soak_version=soak.__version__)


def render_fleet_report(summary: FleetSummary, out_path: Path) -> Path:
    """Write the fleet's report.html to `out_path` and return that path."""
    return write_atomically(fleet_html(summary, replica_links(summary, out_path)), Path(out_path))
