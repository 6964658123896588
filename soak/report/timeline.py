"""The run's timeline in words: each phase as a sentence, and the events grouped into rows a person reads.

An idle probe is recorded as four to six events (start, drained or timed out, reading, end, and whether requests
kept streaming); the report says it once. Consecutive canary answers that matched the reference become one row.
Every row keeps what was recorded, as raw JSON, for a disclosure: the visible text holds no Python reprs, no
JSON and no epoch times.
"""

from __future__ import annotations

from typing import Any

from soak.contracts import Event
from soak.report.formatting import (
    MISSING,
    format_bytes,
    format_elapsed,
    format_rate,
    format_seconds,
    format_share,
    format_span,
    format_utc,
    is_number,
    raw_json,
)
from soak.report.markers import event_class

MAX_EVENT_ROWS = 2000
PROBE_KINDS = ("probe_start", "probe_drained", "probe_drain_timeout", "probe_reading", "probe_end",
               "probe_drain_streaming")


# ---- phases -------------------------------------------------------------------------------------------

def phase_load(data: dict[str, Any]) -> str:
    """What a phase's load was: `steady at 2 req/s`, `wave 2 → 6 req/s, period 1h`, `ramp 1 → 8 req/s over 30m`."""
    kind = str(data.get("phase_kind") or data.get("name") or "steady")
    rate, to_rate = data.get("rate_rps", data.get("rate")), data.get("to_rate_rps")
    period = format_span(data.get("period_s"))
    if kind == "ramp" and is_number(rate) and is_number(to_rate):
        return f"ramp {format_rate(rate).removesuffix(' req/s')} → {format_rate(to_rate)} over {format_span(data.get('ramp_s'))}"
    if kind == "wave" and is_number(rate) and is_number(data.get("amplitude")):
        low, high = rate * (1 - data["amplitude"]), rate * (1 + data["amplitude"])
        return f"wave {format_rate(low).removesuffix(' req/s')} → {format_rate(high)}, period {period}"
    if kind == "burst" and is_number(rate) and is_number(data.get("factor")):
        return (f"{format_rate(rate)} with bursts of {format_rate(rate * data['factor'])} "
                f"for {format_span(data.get('burst_s'))} every {period}")
    return f"{kind} at {format_rate(rate)}"


def phase_title(data: dict[str, Any], fallback: str) -> str:
    """`warm-up` or `phase 2` (phases counted from 1, as a person counts them)."""
    if data.get("name") == "warmup":
        return "warm-up"
    index = data.get("index")
    return f"phase {index + 1}" if isinstance(index, int) else str(data.get("name") or fallback)


def phases(events: list[Event], end_s: float | None) -> list[dict[str, Any]]:
    """Each phase as a row: start, a sentence (`steady at 2 req/s for 40s`) and the recorded settings."""
    phase_events = [event for event in events if event.kind == "phase"]
    rows = []
    for i, event in enumerate(phase_events):
        until_s = phase_events[i + 1].t_s if i + 1 < len(phase_events) else end_s
        data = event.data
        lasted = format_span(until_s - event.t_s) if is_number(until_s) else MISSING
        rows.append({"start": format_elapsed(event.t_s), "name": phase_title(data, event.message or "phase"),
                     "sentence": f"{phase_load(data)} for {lasted}" if data else str(event.message or ""),
                     "lasted": lasted, "raw": raw_json(data) if data else ""})
    return rows


# ---- probes -------------------------------------------------------------------------------------------

def _probe_drain(parts: dict[str, dict[str, Any]]) -> str:
    """How the drain went: `drained in 4.3 s`, or `drain timed out after 60 s with 3 in flight (still streaming)`."""
    if "probe_drain_timeout" in parts:
        timeout = parts["probe_drain_timeout"]
        in_flight = timeout.get("in_flight")
        text = f"drain timed out after {format_seconds(timeout.get('drain_s'))}"
        text += f" with {in_flight:.0f} in flight" if is_number(in_flight) else ""
        return text + (" (they kept streaming)" if "probe_drain_streaming" in parts else "")
    if "probe_drained" in parts:
        return f"drained in {format_seconds(parts['probe_drained'].get('drain_s'))}"
    return "drain not recorded"


def _probe_reading(reading: dict[str, Any] | None) -> str:
    """The idle floor: `KV 0 %, 0 running; RSS 258 MiB`; what was not measured is left out."""
    if reading is None:
        return "no reading"
    gauges = []
    if is_number(reading.get("kv_usage")):
        gauges.append(f"KV {format_share(reading['kv_usage'])}")
    for name in ("running", "waiting"):
        if is_number(reading.get(name)) and (name == "running" or reading[name]):
            gauges.append(f"{reading[name]:.0f} {name}")
    text = ", ".join(gauges) or "no server gauges"
    rss = [p.get("rss_bytes") for p in reading.get("processes") or [] if isinstance(p, dict)]
    if rss and all(is_number(x) for x in rss):
        text += f"; RSS {format_bytes(sum(rss))}"
    return text


def probe_sentence(number: int, parts: dict[str, dict[str, Any]]) -> str:
    """`probe 2: drained in 4.3 s; KV 0 %, 0 running; RSS 258 MiB`."""
    text = f"idle probe {number}: {_probe_drain(parts)}; {_probe_reading(parts.get('probe_reading'))}"
    end = parts.get("probe_end")
    if end is None:
        return text + "; no end recorded"
    return text + (f"; idle for {format_seconds(end['duration_s'])}" if is_number(end.get("duration_s")) else "")


def _probe_row(number: int, group: list[Event]) -> dict[str, Any]:
    parts = {event.kind: event.data for event in group}
    first = group[0]
    bad = "probe_drain_timeout" in parts
    return _row(first, "idle probe", "probe_timeout" if bad else "probe", probe_sentence(number, parts), group)


def _probe_key(event: Event, open_key: Any) -> Any:
    """The probe an event belongs to: its recorded index, else the probe still open, else a probe of its own."""
    data = event.data
    if isinstance(data.get("index"), int):
        return data["index"]
    return open_key if open_key is not None and event.kind != "probe_start" else ("at", event.t_s)


# ---- rows ---------------------------------------------------------------------------------------------

def _raw(events: list[Event]) -> str:
    """What was recorded for a row, one JSON object per event."""
    return "\n".join(raw_json({"t_s": round(event.t_s, 3), "kind": event.kind,
                               "message": event.message, "data": event.data}) for event in events)


def _row(first: Event, label: str, css: str, text: str, group: list[Event]) -> dict[str, Any]:
    return {"t_s": first.t_s, "t": format_elapsed(first.t_s), "at": format_utc(first.at),
            "kind": label, "class": css, "text": text, "raw": _raw(group)}


def event_sentence(event: Event) -> str:
    """One event's line: phases in words, the rest as the recorder worded them."""
    data = event.data
    if event.kind == "phase" and data:
        return f"{phase_title(data, 'phase')}: {phase_load(data)}"
    if event.kind == "warmup_end":
        return "warm-up over: from here on, windows are judged"
    return str(event.message or event.kind.replace("_", " "))


def _is_match(event: Event) -> bool:
    """A canary answer that matched the reference (the first answer, the reference itself, is not)."""
    data = event.data
    return event.kind == "canary" and data.get("reference") is False


def _canary_row(group: list[Event]) -> dict[str, Any]:
    span = f"{format_elapsed(group[0].t_s)} to +{format_elapsed(group[-1].t_s)}"
    text = (f"{len(group)} canary answers the same as the reference, +{span}" if len(group) > 1
            else event_sentence(group[0]))
    return _row(group[0], "canary", "other", text, group)


def grouped_rows(events: list[Event]) -> list[dict[str, Any]]:
    """Events as rows: one per probe, one per run of matching canaries, one per other event; in time order."""
    rows, probes, order, open_key, matches = [], {}, [], None, []
    for event in events:
        if event.kind in PROBE_KINDS:
            key = _probe_key(event, open_key)
            if key not in probes:
                probes[key], _ = [], order.append(key)
            probes[key].append(event)
            open_key = None if event.kind == "probe_end" else key
            continue
        if _is_match(event):
            matches.append(event)
            continue
        if matches:
            rows.append(_canary_row(matches))
            matches = []
        rows.append(_row(event, event.kind.replace("_", " "), event_class(event.kind),
                         event_sentence(event), [event]))
    if matches:
        rows.append(_canary_row(matches))
    rows += [_probe_row(number, probes[key]) for number, key in enumerate(order, start=1)]
    return sorted(rows, key=lambda row: row["t_s"])


def events_table(events: list[Event]) -> dict[str, Any]:
    """The Events section: grouped rows in time order (capped, with the number left out)."""
    rows = grouped_rows(events)
    return {"rows": rows[:MAX_EVENT_ROWS], "left_out": max(len(rows) - MAX_EVENT_ROWS, 0),
            "recorded": len(events)}
