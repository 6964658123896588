"""The fleet report: one page with the fleet's verdict, a table of its replicas with a link to each one's report, and
each replica's memory and P99 E2E side by side (`fleet_charts`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import soak
from soak.contracts import FleetSummary
from soak.report.render import environment, plotly_js, script_json, write_atomically
from soak.store.store import Store

TEMPLATE = "fleet.html.j2"


def replica_links(summary: FleetSummary, out_path: Path) -> dict[str, str]:
    """Each replica's report, relative to the fleet's page (the replicas' folders sit inside the fleet's)."""
    return {r.name: os.path.relpath(r.report_html, Path(out_path).parent) for r in summary.replicas if r.report_html}


def fleet_html(summary: FleetSummary, links: dict[str, str], charts: dict[str, Any] | None = None) -> str:
    """The fleet's page as text; `links` maps a replica's name to where its report is, `charts` (chart id →
    figure, `fleet_charts.fleet_small_multiples`) adds the small multiples and plotly.js inline."""
    return environment().get_template(TEMPLATE).render(
        fleet=summary, links=links, soak_version=soak.__version__, charts=charts or {},
        chart_json=script_json(charts or {}), plotly_js=plotly_js() if charts else "")


def render_fleet_report(summary: FleetSummary, out_path: Path, store: Store | None = None) -> Path:
    """Write the fleet's report.html to `out_path` (with each replica's charts when `store` holds their runs)
    and return that path."""
    from soak.report.fleet_charts import fleet_small_multiples

    charts = fleet_small_multiples(store, summary) if store is not None else None
    return write_atomically(fleet_html(summary, replica_links(summary, out_path), charts), Path(out_path))
