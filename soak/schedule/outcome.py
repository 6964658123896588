"""How a fired run ended: the run row its `soak start` wrote, its summary, and what the daemon notifies."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from soak.contracts import loads_summary
from soak.store.models import Run
from soak.store.records import StoredRun
from soak.store.schedule_models import ScheduleEvent
from soak.store.store import Store

# A payload built without summary.json still declares its schema, so receivers read every payload alike.
# (soak.run.summary.SCHEMA, not imported: that module loads the analysis stack into every `soak schedule`.)
NO_SUMMARY_SCHEMA = "soak.run.summary/1"


def last_run(store: Store, name: str) -> StoredRun | None:
    """The newest run tagged with this schedule (or, failing that, named by its events)."""
    query = select(Run).where(Run.schedule_name == name).order_by(Run.id.desc()).limit(1)
    found = store.runs(query)
    if not found:
        run_ids = select(ScheduleEvent.run_id).where(ScheduleEvent.schedule_name == name,
                                                     ScheduleEvent.run_id.is_not(None))
        found = store.runs(select(Run).where(Run.id.in_(run_ids)).order_by(Run.id.desc()).limit(1))
    return found[0] if found else None


def describe_exit(exit_code: int) -> str:
    """`code 2` or `signal SIGKILL`, from a Popen return code."""
    if exit_code < 0:
        try:
            return f"signal {signal.Signals(-exit_code).name}"
        except ValueError:
            return f"signal {-exit_code}"
    return f"code {exit_code}"


@dataclass(frozen=True)
class FireOutcome:
    """How one scheduled run ended: the notification payload of a scheduled run, not its summary.json.

    When the run wrote a summary.json, `summary` holds it and the payload is that document (so a receiver sees
    every summary field). Otherwise the payload is the few fields known here, in summary.json's shape.
    """

    exit_code: int
    log_path: Path
    run_id: str | None  # None: soak start exited before recording a run
    status: str | None
    verdict: str | None
    verdict_reason: str | None
    started_at: str | None = None
    ended_at: str | None = None
    summary: dict[str, Any] | None = None

    @property
    def has_verdict(self) -> bool:
        return bool(self.verdict)

    def event_message(self) -> str:
        """The line of the `finished`/`failed` event."""
        if self.run_id is None:
            return self.verdict_reason or ""
        return (f"soak start exited with {describe_exit(self.exit_code)}; status {self.status}, verdict "
                f"{self.verdict}: {self.verdict_reason or ''}")

    def payload(self) -> dict[str, Any]:
        """The webhook body, before notify adds `text` and `schedule_name`."""
        if self.summary is not None:
            return {**self.summary, "status": self.status}
        if self.run_id is None:
            return {"schema": NO_SUMMARY_SCHEMA, "run_id": None, "status": self.status, "verdict": self.verdict,
                    "verdict_reason": self.verdict_reason, "report_html": None, "log": str(self.log_path),
                    "exit_code": self.exit_code}
        return {"schema": NO_SUMMARY_SCHEMA, "run_id": self.run_id, "status": self.status,
                "started_at": self.started_at, "ended_at": self.ended_at, "verdict": self.verdict,
                "verdict_reason": self.verdict_reason, "report_html": None}


def read_outcome(store: Store, out_dir: Path, pid: int, spawned_epoch_s: float, exit_code: int,
                 log_path: Path) -> FireOutcome:
    """The outcome of the `soak start` child `pid` that has exited with `exit_code`."""
    run = run_started_by(store, pid, spawned_epoch_s)
    if run is None:
        return outcome_without_run(exit_code, log_path)
    return outcome_of_run(run, out_dir, exit_code, log_path)


def run_started_by(store: Store, pid: int, since_epoch_s: float) -> StoredRun | None:
    """The run written by process `pid` after `since_epoch_s` (PIDs are reused, hence the time)."""
    query = (select(Run).where(Run.soak_pid == pid, Run.t0_epoch_s >= since_epoch_s - 1.0)
             .order_by(Run.id.desc()).limit(1))
    found = store.runs(query)
    return found[0] if found else None


def _exited_status(status: str | None) -> str | None:
    """A run whose process has exited is not running, whatever its heartbeat says."""
    return "aborted" if status == "running" else status


def outcome_of_run(run: StoredRun, out_dir: Path, exit_code: int, log_path: Path) -> FireOutcome:
    """The outcome of a run that recorded itself: its summary.json when it wrote one, else its row."""
    summary = run_summary(run, out_dir)
    if summary is not None:
        return FireOutcome(exit_code, log_path, run.id, _exited_status(summary.get("status")),
                           summary.get("verdict"), summary.get("verdict_reason"), summary=summary)
    reason = run.verdict_reason or "the run left no summary (it crashed or was killed)"
    return FireOutcome(exit_code, log_path, run.id, _exited_status(run.status), run.verdict,
                       reason, started_at=run.started_at, ended_at=run.ended_at)


def outcome_without_run(exit_code: int, log_path: Path) -> FireOutcome:
    """The outcome when `soak start` ended before it recorded a run: the last line of its log says why."""
    tail = _last_line(log_path)
    reason = f"soak start exited with {describe_exit(exit_code)} before recording a run"
    return FireOutcome(exit_code, log_path, None, "crashed", None, f"{reason}: {tail}" if tail else reason)


def run_summary(run: StoredRun, out_dir: Path) -> dict[str, Any] | None:
    """The run's summary.json: from its folder, else the database; None when it wrote none."""
    for path in (Path(run.out_dir) / "summary.json", out_dir / run.id / "summary.json"):
        summary = _read_json(path)
        if summary:
            return summary
    return loads_summary(run.summary_json)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _last_line(path: Path, limit_chars: int = 300) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:limit_chars] if lines else ""
