"""The report's "Errors and expectations" section: the context length, failed requests grouped by message, and
validation gaps, all from the summary (`context`, `error_messages`, `validation_gaps`); and the load workers
(`workers`): who sent the load, and a banner line for each one lost mid-run."""

from __future__ import annotations

from typing import Any

from soak.report.formatting import format_count, format_elapsed

GAP_BANNER = "{count} request(s) answered 200 where a refusal was expected (validation gaps: see Errors and expectations)."


def context_line(summary: dict[str, Any]) -> str | None:
    """"Requests were sized for a context of 1024 tokens (from GET /props)." or None when not recorded."""
    context = summary.get("context")
    if not isinstance(context, dict) or not context.get("tokens"):
        return None
    line = f"Requests were sized for a context of {format_count(context['tokens'])} tokens (from {context.get('source')})"
    stated = context.get("stated")
    if stated is not None and stated != context["tokens"]:
        line += f"; the server states {format_count(stated)}"
    return line + "."


def workers_line(summary: dict[str, Any]) -> str | None:
    """"The load came from 3 load workers (2 of them soak worker processes on other hosts)." or None."""
    workers = summary.get("workers")
    if not isinstance(workers, dict) or not workers.get("joined"):
        return None
    remote = int(workers.get("remote") or 0)
    where = f"{remote} of them soak worker processes on other hosts" if remote else "local processes"
    return f"The load came from {workers['joined']} load workers ({where})."


def lost_worker_lines(summary: dict[str, Any]) -> list[str]:
    """One banner line per load worker lost mid-run: when, why, and what became of its share."""
    lines = []
    for lost in (summary.get("workers") or {}).get("lost") or []:
        fate = ("its share of the rate moved to the remaining workers" if lost.get("on_loss") == "redistributed"
                else "no worker remained, so the run ended")
        silence = (f"; windows over its {lost['unseen_s']:.1f} s silence are left out of trends"
                   if lost.get("unseen_s") else "")
        lines.append(f"Load worker {lost.get('index')} ({lost.get('host')}, pid {lost.get('pid')}) was lost at "
                     f"{format_elapsed(lost.get('t_s'))} ({lost.get('why')}): {fate}{silence}.")
    return lines


def error_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per error message: "9 × HTTP 400: …", its class and scenarios."""
    return [{"text": f"{format_count(item['count'])} × {item['message']}", "class": item.get("error_class"),
             "scenarios": ", ".join(item.get("scenarios") or [])}
            for item in summary.get("error_messages") or [] if isinstance(item, dict)]


def gap_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per validation gap: "27 × bad_input", what was expected, what came back."""
    rows = []
    for item in summary.get("validation_gaps") or []:
        got = f"HTTP {item.get('status_code') or 200}"
        if item.get("max_output_tokens") is not None:
            got += f", up to {format_count(item['max_output_tokens'])} output tokens"
        rows.append({"text": f"{format_count(item['count'])} × {item['scenario']}", "expected": item["expectation"],
                     "got": got})
    return rows


def outcomes(summary: dict[str, Any]) -> dict[str, Any]:
    """The section's content, and the banner line that validation gaps add."""
    gaps = summary.get("validation_gaps") or []
    total = sum(int(item.get("count") or 0) for item in gaps)
    return {"context": context_line(summary), "errors": error_rows(summary), "gaps": gap_rows(summary),
            "workers": workers_line(summary),
            "banner": ([GAP_BANNER.format(count=total)] if total else []) + lost_worker_lines(summary)}
