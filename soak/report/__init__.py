"""Report stage: the HTML sign-off report of one run, rebuilt from the database and the run's summary."""

from __future__ import annotations

from pathlib import Path

from soak.analysis.baseline import BaselineComparison
from soak.contracts import Summary
from soak.report.context import build_context
from soak.report.render import render_html, write_atomically
from soak.store.store import Store


def render_report(store: Store, run_id: str, summary: Summary | None, out_path: Path,
                  baseline: BaselineComparison | None = None) -> Path:
    """Write the self-contained HTML report of `run_id` to `out_path` and return that path.

    `summary` is the run's `Summary` (None: the one stored with the run); `baseline` the optional
    before/after comparison with a baseline run (`soak.analysis.baseline.BaselineComparison`).
    """
    return write_atomically(render_html(build_context(store, run_id, summary, baseline)), Path(out_path))


__all__ = ["render_report"]
