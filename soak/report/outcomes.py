"""The report's "Errors and expectations" section: the context length, failed requests grouped by message, and
validation gaps, all from the summary (`context`, `error_messages`, `validation_gaps`); and the load workers
(`workers`): who sent the load, and a banner line for each one lost mid-run."""

from __future__ import annotations

from typing import Any

from soak.contracts import Summary
from soak.report.formatting import format_count, format_elapsed

GAP_BANNER = "{count} request(s) answered 200 where a refusal was expected (validation gaps: see Errors and expectations)."


def context_line(summary: Summary) -> str | None:
    """"Requests were sized for a context of 1024 tokens (from GET /props)." or None when not recorded."""
    context = summary.context
    if context is None or not context.tokens:
        return None
    line = f"Requests were sized for a context of {format_count(context.tokens)} tokens (from {context.source})"
    if context.stated is not None and context.stated != context.tokens:
        line += f"; the server states {format_count(context.stated)}"
    return line + "."


def workers_line(summary: Summary) -> str | None:
    """"The load came from 3 load workers (2 of them soak worker processes on other hosts)." or None."""
    workers = summary.workers
    if workers is None or not workers.joined:
        return None
    where = f"{workers.remote} of them soak worker processes on other hosts" if workers.remote else "local processes"
    return f"The load came from {workers.joined} load workers ({where})."


def lost_worker_lines(summary: Summary) -> list[str]:
    """One banner line per load worker lost mid-run: when, why, and what became of its share."""
    lines = []
    for lost in summary.workers.lost if summary.workers else []:
        fate = ("its share of the rate moved to the remaining workers" if lost.on_loss == "redistributed"
                else "no worker remained, so the run ended")
        silence = f"; windows over its {lost.unseen_s:.1f} s silence are left out of trends" if lost.unseen_s else ""
        lines.append(f"Load worker {lost.index} ({lost.host}, pid {lost.pid}) was lost at "
                     f"{format_elapsed(lost.t_s)} ({lost.why}): {fate}{silence}.")
    return lines


def error_rows(summary: Summary) -> list[dict[str, Any]]:
    """One row per error message: "9 × HTTP 400: …", its class and scenarios."""
    return [{"text": f"{format_count(item.count)} × {item.message}", "class": item.error_class,
             "scenarios": ", ".join(item.scenarios)}
            for item in summary.error_messages]


def gap_rows(summary: Summary) -> list[dict[str, Any]]:
    """One row per validation gap: "27 × bad_input", what was expected, what came back."""
    rows = []
    for item in summary.validation_gaps:
        got = f"HTTP {item.status_code or 200}"
        if item.max_output_tokens is not None:
            got += f", up to {format_count(item.max_output_tokens)} output tokens"
        rows.append({"text": f"{format_count(item.count)} × {item.scenario}", "expected": item.expectation,
                     "got": got})
    return rows


def outcomes(summary: Summary | None) -> dict[str, Any]:
    """The section's content, and the banner line that validation gaps add (all empty without a summary)."""
    if summary is None:
        return {"context": None, "errors": [], "gaps": [], "workers": None, "banner": []}
    total = sum(item.count for item in summary.validation_gaps)
    return {"context": context_line(summary), "errors": error_rows(summary), "gaps": gap_rows(summary),
            "workers": workers_line(summary),
            "banner": ([GAP_BANNER.format(count=total)] if total else []) + lost_worker_lines(summary)}
