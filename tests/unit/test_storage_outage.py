"""Storage outages: the writer holds rows while the database refuses them (or its volume is full), within a budget
of memory and time, and writes them when it takes them again; the marks it leaves on the report, the live view and
the run's log."""

from __future__ import annotations

import errno
import io
import logging
import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import event, func, insert, select
from sqlalchemy.exc import OperationalError

from soak.contracts import Event
from soak.errors import StorageError
from soak.report.markers import build_markers, event_class
from soak.run.conductor import RunLogHandler
from soak.store import Store
from soak.store.models import EventRow, Run
from soak.store.recorder import Recorder
from soak.store.volumes import FULL_BELOW_BYTES, Volume, VolumeWatch, is_disk_full, mount_point
from soak.store.writer import DATABASE, StorageBudget, StoreWriter, retry_after_s, row_bytes
from soak.web.pages import CachedPage, LivePages

pytestmark = pytest.mark.timeout(120)


def run_row(run_id: str) -> dict:
    return {"id": run_id, "status": "running", "started_at": "2026-01-01T00:00:00+00:00", "t0_epoch_s": 0.0,
            "planned_duration_s": 60.0, "warmup_s": 5.0, "window_s": 5.0, "out_dir": "runs", "target_kind": "external",
            "config_json": "{}", "environment_json": "{}"}


class Refusing:
    """Makes an engine's writes fail like a locked database while `on` (a hook on every statement)."""

    def __init__(self, engine, message: str = "database is locked"):
        self.on, self.tries, self.message = False, 0, message
        event.listen(engine, "before_cursor_execute", self._check)

    def _check(self, _connection, _cursor, statement, *_args) -> None:
        if self.on and statement.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
            self.tries += 1
            raise OperationalError(statement[:20], {}, sqlite3.OperationalError(self.message))


def wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def open_writer(tmp_path: Path, **options) -> tuple[Store, StoreWriter, Refusing]:
    """A store holding run "r" (events need their run), a fast writer on it, and the switch that refuses writes."""
    store = Store.open(f"sqlite:///{tmp_path / 'soak.db'}")
    with store.engine.begin() as connection:
        connection.execute(insert(Run), [run_row("r")])
    refusing = Refusing(store.engine, options.pop("message", "database is locked"))
    writer = StoreWriter(store.engine, interval_s=0.02, **options).start()
    return store, writer, refusing


def events_stored(store: Store) -> int:
    with store.engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(EventRow)).scalar()


def queue_events(writer: StoreWriter, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        writer.insert(EventRow, {"run_id": "r", "t_s": float(n), "at": "2026-01-01T00:00:00+00:00", "kind": "phase",
                                 "message": f"row {n}", "data_json": None})


def test_rows_wait_through_an_outage_and_are_written_when_the_database_returns(tmp_path):
    store, writer, refusing = open_writer(tmp_path)
    refusing.on = True
    queue_events(writer, 100)
    wait_for(lambda: writer.outage is not None)
    assert writer.held_rows == 100 and writer.held_bytes > 100 * 200 and writer.exhausted is None
    assert events_stored(store) == 0
    refusing.on = False
    assert writer.flush(30)
    outage = writer.outages[0]
    assert writer.outage is None and len(writer.outages) == 1 and outage.ended_epoch_s >= outage.started_epoch_s
    assert outage.rows_held == 100 and outage.bytes_held > 0 and "database is locked" in outage.reason
    assert events_stored(store) == 100 and writer.held_rows == 0 and writer.held_bytes == 0
    writer.close()


def test_retries_back_off_exponentially_up_to_a_cap():
    assert [retry_after_s(n) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert retry_after_s(10_000) == 10.0


def test_an_outage_longer_than_its_time_budget_is_exhausted(tmp_path):
    _, writer, refusing = open_writer(tmp_path, budget=StorageBudget(max_bytes=2**30, max_s=0.3))
    refusing.on = True
    queue_events(writer, 3)
    wait_for(lambda: writer.exhausted is not None)
    assert "longer than the 0.3 s allowed" in writer.exhausted
    refusing.on = False
    writer.close()


def test_rows_beyond_the_memory_budget_exhaust_it(tmp_path):
    _, writer, refusing = open_writer(tmp_path, budget=StorageBudget(max_bytes=20_000, max_s=3600))
    refusing.on = True
    queue_events(writer, 10)
    wait_for(lambda: writer.outage is not None)
    assert writer.exhausted is None
    queue_events(writer, 200, start=10)
    assert "MiB allowed" in writer.exhausted
    refusing.on = False
    writer.close()


def test_the_estimate_counts_what_a_row_holds():
    small = row_bytes({"run_id": "r", "t_s": 1.0})
    assert row_bytes({"run_id": "r", "t_s": 1.0, "blob": b"x" * 10_000}) - small > 10_000
    assert row_bytes({"run_id": "r", "t_s": 1.0, "none": None}) - small < 16  # None is shared, a dict slot is not


def test_discarded_rows_are_counted_and_dropped(tmp_path):
    store, writer, refusing = open_writer(tmp_path)
    refusing.on = True
    queue_events(writer, 7)
    wait_for(lambda: writer.outage is not None)
    assert writer.discard() == 7
    assert writer.flush(30) and writer.held_rows == 0 and writer.held_bytes == 0
    refusing.on = False
    writer.close()
    assert events_stored(store) == 0


def test_a_full_database_volume_holds_the_rows_without_trying_the_database(tmp_path, monkeypatch):
    free = {"bytes": 0}
    monkeypatch.setattr("soak.store.volumes.CHECK_EVERY_S", 0.0)
    volumes = VolumeWatch([Volume.of(tmp_path, DATABASE)], free=lambda _path: free["bytes"])
    store, writer, refusing = open_writer(tmp_path, volumes=volumes)
    queue_events(writer, 5)
    wait_for(lambda: writer.outage is not None)
    assert refusing.tries == 0 and events_stored(store) == 0
    assert writer.outage.volume == str(mount_point(tmp_path))
    assert f"the volume mounted at {mount_point(tmp_path)} (holding the database" in writer.stats.failure
    free["bytes"] = FULL_BELOW_BYTES * 10
    assert writer.flush(30) and events_stored(store) == 5 and writer.outage is None
    writer.close()


def test_a_disk_full_error_names_the_database_volume(tmp_path):
    volumes = VolumeWatch([Volume.of(tmp_path, DATABASE)], free=lambda _path: 10 * FULL_BELOW_BYTES)
    _, writer, refusing = open_writer(tmp_path, volumes=volumes, message="database or disk is full")
    refusing.on = True
    queue_events(writer, 2)
    wait_for(lambda: writer.outage is not None)
    assert writer.outage.volume == str(mount_point(tmp_path))
    assert writer.outage.reason.startswith(f"the volume mounted at {mount_point(tmp_path)}")
    refusing.on = False
    writer.close()


def test_a_full_volume_of_the_run_files_is_an_outage_but_commits_go_on(tmp_path, monkeypatch):
    free = {"bytes": 0}
    monkeypatch.setattr("soak.store.volumes.CHECK_EVERY_S", 0.0)
    volumes = VolumeWatch([Volume.of(tmp_path / "run", "the run's files")], free=lambda _path: free["bytes"])
    store, writer, _ = open_writer(tmp_path, volumes=volumes)
    queue_events(writer, 4)
    assert writer.flush(30) and events_stored(store) == 4
    assert writer.outage is not None and "the run's files" in writer.outage.reason and writer.held_rows == 0
    free["bytes"] = FULL_BELOW_BYTES * 10
    queue_events(writer, 1, start=4)
    assert writer.flush(30)
    wait_for(lambda: writer.outage is None)
    writer.close()


def test_disk_full_errors_are_recognised():
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full")))
    assert not is_disk_full(OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked")))


def test_the_mount_point_of_a_path_not_made_yet_is_a_mount_above_it(tmp_path):
    found = mount_point(tmp_path / "not" / "yet")
    assert found.is_mount() and (tmp_path / "x").is_relative_to(found)


def test_an_outage_event_lands_at_its_real_time(tmp_path):
    with Store.open(f"sqlite:///{tmp_path / 'soak.db'}") as store:
        store.writer().insert(Run, run_row("r"))
        recorder = Recorder(store.writer(), "r", t0_epoch_s=1_767_225_600.0)  # 2026-01-01T00:00:00Z
        recorder.event("storage_outage_start", "away", t_s=12.5)
        assert store.writer().flush(30)
        row = store.scalars(select(EventRow))[0]
    assert (row.t_s, row.at) == (12.5, "2026-01-01T00:00:12.500+00:00")


def test_storage_outages_are_spans_on_the_charts():
    assert event_class("storage_outage_start") == event_class("storage_outage_end") == "storage"
    events = [Event(100.0, "storage_outage_start", "away"), Event(160.0, "storage_outage_end", "back")]
    assert [(m.marker_class, m.t_s, m.end_s) for m in build_markers(events, None, 600.0)] == [("storage", 100.0, 160.0)]


def test_a_run_log_on_a_full_volume_says_so_once(tmp_path, capsys):
    handler = RunLogHandler(tmp_path / "soak.log", encoding="utf-8")

    class Full(io.StringIO):
        def write(self, _text):
            raise OSError(errno.ENOSPC, "No space left on device")

    handler.stream = Full()
    logger = logging.getLogger("soak.test.full")
    logger.addHandler(handler)
    try:
        for n in range(5):
            logger.error("line %d", n)
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert err.count("cannot write the run's log") == 1 and "Traceback" not in err


def test_the_live_view_serves_its_last_page_while_the_database_is_away(caplog):
    class Away(LivePages):
        def _build_run_page(self, run_id: str) -> str:
            raise StorageError("cannot read the database: connection refused")

    pages = Away(store=None)
    with pytest.raises(StorageError):
        pages.run_page("r1")  # nothing built yet: the page says the database is away
    pages._cache["r1"] = CachedPage("<html>last</html>", built_at=0.0, max_age_s=1.0)
    with caplog.at_level(logging.WARNING, logger="soak.web.pages"):
        assert [pages.run_page("r1") for _ in range(3)] == ["<html>last</html>"] * 3
    assert len([r for r in caplog.records if "database" in r.getMessage()]) <= 1


class FakeWatch:
    """An early-stop watch that records whether it was polled or had its look dropped."""

    def __init__(self):
        self.polled = self.closed = 0

    def poll(self, _elapsed_s):
        self.polled += 1

    def close(self):
        self.closed += 1


def conductor_over(writer, **state):
    """A Conductor's methods over a stand-in state: only what the storage steps read."""
    from types import SimpleNamespace

    from soak.run.conductor import Conductor

    conductor = object.__new__(Conductor)
    defaults = {"early_stop": None, "looked_outages": 0, "outages_begun": 0, "outages_ended": 0, "t0": 1000.0,
                "run_id": "r", "storage_spent": ""}
    conductor.state = SimpleNamespace(writer=writer, **{**defaults, **state})
    conductor.config = SimpleNamespace(storage_buffer_bytes=256 * 2**20, storage_outage_s=1800.0)
    return conductor


def test_no_early_stop_look_while_rows_are_held_and_none_begun_before_an_outage():
    from types import SimpleNamespace

    from soak.store.writer import Outage

    watch, outage = FakeWatch(), Outage(started_epoch_s=1010.0, reason="locked")
    writer = SimpleNamespace(outage=outage, outages=[outage])
    conductor = conductor_over(writer, early_stop=watch)
    assert conductor._look_for_early_stop(20.0) is None and (watch.polled, watch.closed) == (0, 1)
    writer.outage = None  # back: the next tick looks again
    conductor._look_for_early_stop(21.0)
    assert watch.polled == 1
    writer.outages.append(Outage(started_epoch_s=1030.0, reason="locked", ended_epoch_s=1030.2))  # one too short to see
    conductor._look_for_early_stop(31.0)
    assert (watch.polled, watch.closed) == (1, 2)  # a look that may have read a partial run is dropped


def test_each_outage_is_recorded_once_at_its_real_times_and_said():
    from types import SimpleNamespace

    from soak.store.writer import Outage

    events, said = [], []
    outage = Outage(started_epoch_s=1010.0, reason="cannot write to the database: locked")
    writer = SimpleNamespace(outage=outage, outages=[outage], exhausted=None)
    recorder = SimpleNamespace(event=lambda kind, message, data, t_s: events.append((str(kind), t_s, data)))
    conductor = conductor_over(writer, recorder=recorder)
    conductor._say_storage = said.append
    assert not conductor._storage_spent() and not conductor._storage_spent()
    outage.ended_epoch_s, outage.rows_held = 1070.0, 42
    writer.outage = None
    conductor._storage_spent()
    conductor._storage_spent()
    assert [(kind, t_s) for kind, t_s, _ in events] == [("storage_outage_start", 10.0), ("storage_outage_end", 70.0)]
    assert events[1][2]["rows_held"] == 42 and events[1][2]["lasted_s"] == 60.0
    assert len(said) == 2 and said[0].startswith("storage outage: cannot write") and "42 rows held" in said[1]
    writer.exhausted = "it lasted 1801 s"
    assert conductor._storage_spent() and conductor.state.end_reason == "storage failure"
