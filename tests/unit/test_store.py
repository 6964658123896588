"""`Store`: opened from a URL or `Locations`, it owns the engine and the one writer; read-only never writes."""

from __future__ import annotations

import dataclasses
import json

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from soak.contracts import Event, EventKind
from soak.errors import MissingDatabaseError, StorageError, UnknownRunError
from soak.locations import resolve_locations
from soak.store import Store
from soak.store.models import EventRow, Run, RunLabel
from soak.store.records import StoredRun

pytestmark = pytest.mark.timeout(60)


def run_row(run_id: str) -> dict:
    return {"id": run_id, "status": "completed", "started_at": "2026-01-01T00:00:00+00:00", "t0_epoch_s": 0.0,
            "planned_duration_s": 60.0, "warmup_s": 5.0, "window_s": 5.0, "out_dir": "runs", "target_kind": "external",
            "config_json": "{}", "environment_json": "{}"}


def write_two_runs(db_url: str) -> None:
    """Two runs, labels and an event, through the store's writer, committed by `close`."""
    with Store.open(db_url) as store:
        writer = store.writer()
        assert store.writer() is writer  # one writer per store, started once
        for run_id in ("r1", "r2"):
            writer.insert(Run, run_row(run_id))
        writer.insert(RunLabel, {"run_id": "r2", "key": "release", "value": "1.4"})
        writer.insert(EventRow, {"run_id": "r2", "t_s": 1.0, "at": "2026-01-01T00:00:01+00:00", "kind": "phase",
                                 "message": "", "data_json": '{"rate": 3}'})


def test_what_the_writer_queued_is_read_back_through_the_store_of_the_same_locations(tmp_path):
    locations = resolve_locations(out=str(tmp_path), environ={})
    write_two_runs(locations.db_url)
    with Store.open(locations, read_only=True) as store:
        assert [run.id for run in store.list_runs()] == ["r2", "r1"]
        assert [run.id for run in store.list_runs(labels={"release": "1.4"})] == ["r2"]
        assert store.latest_run_id() == "r2"
        assert store.get_run("r2").labels == {"release": "1.4"}
        assert [event.data for event in store.read_events("r2")] == [{"rate": 3}]
        with pytest.raises(UnknownRunError, match="'r9'.*soak.db"):
            store.get_run("r9")


def test_read_only_never_creates_a_database(tmp_path):
    db_path = tmp_path / "runs" / "soak.db"
    with pytest.raises(MissingDatabaseError, match="no database at"):
        Store.open(f"sqlite:///{db_path}", read_only=True)
    assert not db_path.exists() and not db_path.parent.exists()


def test_read_only_refuses_every_write(tmp_path):
    db_url = f"sqlite:///{tmp_path / 'soak.db'}"
    write_two_runs(db_url)
    store = Store.open(db_url, read_only=True)
    with pytest.raises(StorageError, match="read-only"):
        store.writer()
    with pytest.raises(StorageError, match="read-only"), store.writing():
        pass
    with pytest.raises(OperationalError, match="readonly"), store.engine.begin() as connection:
        connection.execute(text("DELETE FROM runs"))  # even past the store's methods, SQLite is query-only
    store.close()
    assert [run.id for run in Store.open(db_url, read_only=True).list_runs()] == ["r2", "r1"]


def test_runs_and_events_come_back_as_typed_records(tmp_path):
    db_url = f"sqlite:///{tmp_path / 'soak.db'}"
    write_two_runs(db_url)
    with Store.open(db_url, read_only=True) as store:
        run = store.get_run("r2")
        (event,) = store.read_events("r2")
    assert isinstance(run, StoredRun) and isinstance(event, Event)
    assert event.kind is EventKind.PHASE and event.t_s == 1.0
    assert run.as_dict()["labels"] == {"release": "1.4"} and json.dumps(run.as_dict()) and json.dumps(event.as_dict())
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.status = "completed"


def test_every_runs_column_is_a_field_of_the_run_record():
    columns = {column.key for column in Run.__table__.columns}
    fields = {field.name for field in dataclasses.fields(StoredRun)}
    assert columns <= fields, f"add {sorted(columns - fields)} to StoredRun (soak/store/records.py)"
