"""Alembic migrations: from empty to the models' schema, and from the previous schema with data kept."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

import soak.store.schedule_models  # noqa: F401 - registers its tables on the shared metadata
from soak.store.db import alembic_config, create_db_engine
from soak.store.models import Base

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'm.db'}"
    return request.getfixturevalue("postgres_url")


def _revisions(engine):
    script = ScriptDirectory.from_config(alembic_config(engine))
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def test_upgrade_from_empty_gives_the_models_schema(db_url):
    engine = create_db_engine(db_url)
    command.upgrade(alembic_config(engine), "head")
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert differences == []


def test_upgrade_from_the_previous_schema_keeps_the_data(db_url):
    engine = create_db_engine(db_url)
    revisions = _revisions(engine)
    assert revisions[0] == "0001"
    previous = revisions[-2] if len(revisions) > 1 else "base"
    command.upgrade(alembic_config(engine), previous)
    with engine.begin() as connection:
        connection.execute(text(
            "insert into runs (id, status, started_at, t0_epoch_s, planned_duration_s, warmup_s, window_s, out_dir, "
            "target_kind, config_json, environment_json) values "
            "('20261202T000000Z-abcd', 'completed', '2026-12-02T00:00:00+00:00', 0, 60, 10, 5, '/x', 'reference', "
            "'{}', '{}')"))
        connection.execute(text(
            "insert into events (run_id, t_s, at, kind, message) values "
            "('20261202T000000Z-abcd', 1.5, '2026-12-02T00:00:01+00:00', 'server_start', 'kept')"))
    command.upgrade(alembic_config(engine), "head")
    with engine.connect() as connection:
        assert connection.execute(text("select status from runs")).scalar() == "completed"
        assert connection.execute(text("select message from events")).scalar() == "kept"
        version = connection.execute(text("select version_num from alembic_version")).scalar()
    assert version == revisions[-1]
