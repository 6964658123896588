"""Every summary.json schema soak ever wrote is still read: a frozen example of each (tests/data/summaries)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import insert

from soak.cli import main
from soak.contracts import (
    READABLE_SUMMARY_SCHEMAS,
    SUMMARY_SCHEMA,
    Summary,
    parse_summary,
    read_summary,
    stored_summary,
)
from soak.errors import StorageError
from soak.store import Store
from soak.store.models import Run

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "summaries"


def example(schema: str) -> dict:
    return json.loads((EXAMPLES / f"{schema.replace('/', '-')}.json").read_text())


def test_there_is_a_frozen_example_of_every_schema_and_no_other():
    assert sorted(path.stem for path in EXAMPLES.glob("*.json")) == sorted(
        schema.replace("/", "-") for schema in READABLE_SUMMARY_SCHEMAS)
    assert READABLE_SUMMARY_SCHEMAS[-1] == SUMMARY_SCHEMA


@pytest.mark.parametrize("schema", READABLE_SUMMARY_SCHEMAS)
def test_each_example_reads_as_todays_summary(schema):
    data = example(schema)
    assert data["schema"] == schema
    summary = Summary.model_validate(read_summary(data))
    assert summary.run_id == data["run_id"] and summary.verdict == data["verdict"]
    assert [f.check for f in summary.findings] == [f["check"] for f in data["findings"]]


def test_a_schema_soak_never_wrote_is_named():
    with pytest.raises(ValueError, match="summary schema 'other/9' is not one soak writes or wrote"):
        read_summary({"schema": "other/9"})


@pytest.mark.parametrize("schema", READABLE_SUMMARY_SCHEMAS)
def test_a_stored_summary_of_each_schema_is_the_typed_summary(schema):
    data = example(schema)
    assert stored_summary(json.dumps(data), "r1") == parse_summary(data) == Summary.model_validate(read_summary(data))
    assert stored_summary(None, "r1") is None


@pytest.mark.parametrize(("text", "says"), [
    (json.dumps({"schema": SUMMARY_SCHEMA, "run_id": "r1"}), "status: Field required"),
    (json.dumps({"schema": "other/9"}), "summary schema 'other/9' is not one soak writes or wrote"),
    ("{not json", "Expecting property name")])
def test_a_stored_summary_soak_cannot_read_is_one_line_naming_the_run(text, says):
    with pytest.raises(StorageError, match="the summary stored with run r7 cannot be read: ") as raised:
        stored_summary(text, "r7")
    assert says in str(raised.value) and "\n" not in str(raised.value)


def _store(tmp_path: Path, summaries: list[dict]) -> str:
    db_url = f"sqlite:///{tmp_path / 'soak.db'}"
    store = Store.open(db_url)
    with store.engine.begin() as connection:
        connection.execute(insert(Run), [{
            "id": data["run_id"], "status": "completed", "started_at": data["started_at"], "t0_epoch_s": 0.0,
            "planned_duration_s": data["planned_duration_s"], "duration_s": data["duration_s"], "warmup_s": 10.0,
            "window_s": 5.0, "soak_pid": 1, "out_dir": str(tmp_path / data["run_id"]), "target_kind": "reference",
            "model": "soak-reference", "config_json": "{}", "environment_json": "{}",
            "summary_json": json.dumps(data), "verdict": data["verdict"]} for data in summaries])
    store.engine.dispose()
    return db_url


def test_compare_and_history_read_an_old_and_a_new_summary_side_by_side(tmp_path):
    old, new = example(READABLE_SUMMARY_SCHEMAS[0]), example(SUMMARY_SCHEMA)
    db_url = _store(tmp_path, [old, new])
    compared = CliRunner().invoke(main, ["compare", old["run_id"], new["run_id"], "--db", db_url, "--json"])
    assert compared.exit_code == 0, compared.output
    rows = {row["name"]: row for row in json.loads(compared.stdout)["rows"]}
    assert rows["latency.ttft.p99"]["baseline"] == old["latency_ms"]["ttft"]["p99"]
    assert rows["latency.ttft.p99"]["current"] == new["latency_ms"]["ttft"]["p99"]
    history = CliRunner().invoke(main, ["history", "--db", db_url, "--json"])
    assert history.exit_code == 0, history.output
    verdicts = {row["run_id"]: row["verdict"] for row in json.loads(history.stdout)}
    assert verdicts == {old["run_id"]: old["verdict"], new["run_id"]: new["verdict"]}
