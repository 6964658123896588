"""Shared test helpers: run the `soak` CLI as a real subprocess, bounded in time."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from support.require import require_all, skip_or_fail

REPO = Path(__file__).resolve().parents[1]


def run_soak(*args: str, timeout_s: float = 240, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`soak ARGS…` in a fresh interpreter; stdout/stderr captured as text."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "soak", *args], capture_output=True, text=True,
                          timeout=timeout_s, env=full_env, cwd=cwd or REPO)


_hub_kept_alive = False


def _keep_the_gevent_hub_alive() -> None:
    """Locust's pytest plugin and the load tests gevent-patch this process, so threading's locks are gevent's.
    An xdist worker that waits for its next test (a gevent lock, released from execnet's own thread) with
    nothing else scheduled makes the hub raise LoopExit ("this operation would block forever") and the worker
    dies; a greenlet that sleeps in a loop keeps the hub running, so the wake-up from the other thread arrives."""
    global _hub_kept_alive
    from gevent import monkey

    # Only in xdist workers: in a plain run the wait never happens, and a test that ends on LoopExit must not hang.
    if _hub_kept_alive or not os.environ.get("PYTEST_XDIST_WORKER") or not monkey.is_module_patched("threading"):
        return
    import gevent

    def idle() -> None:
        while True:
            gevent.sleep(1.0)

    gevent.spawn(idle)
    _hub_kept_alive = True


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist: the tests of a file that share a module fixture (one soak run that several tests read)
    are one xdist group, so the run is made once, not once per worker (with --dist loadgroup); and the files that
    may run longest (by their time limit) go first, so a ten-minute run does not start last and leave the other
    workers idle behind it. A file's tests stay together and in order."""
    if not hasattr(config, "workerinput"):  # only an xdist worker collects what it runs
        return
    for item in items:
        if _reads_a_module_fixture(item) and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    limits: dict[Path, float] = {}
    for item in items:
        limits[item.path] = max(limits.get(item.path, 0.0), _time_limit_s(item, config))
    items.sort(key=lambda item: -limits[item.path])


def _reads_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info is not None else ()
    return any(fixture.scope == "module" for fixtures in definitions for fixture in fixtures)


def _time_limit_s(item: pytest.Item, config: pytest.Config) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(config.getini("timeout") or 0)


def pytest_collection_finish(session: pytest.Session) -> None:
    _keep_the_gevent_hub_alive()


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    _keep_the_gevent_hub_alive()  # a test that imported Locust itself patched the process only now


@pytest.fixture(scope="session")
def soak_cli():
    """The `run_soak` helper as a fixture."""
    return run_soak



@pytest.fixture
def postgres_url():
    """A fresh PostgreSQL database (from SOAK_TEST_PG_URL's server), dropped afterwards."""
    base = os.environ.get("SOAK_TEST_PG_URL")
    if not base:
        if require_all():
            pytest.fail("SOAK_TEST_PG_URL is not set but SOAK_REQUIRE_ALL=1")
        pytest.skip("no PostgreSQL server (set SOAK_TEST_PG_URL)")
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = "soak_test_" + uuid.uuid4().hex[:8]
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(base).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def debugger() -> str:
    """gdb (or lldb), which memray attaches through; a skip without it (a failure under SOAK_REQUIRE_ALL=1)."""
    import shutil

    found = shutil.which("gdb") or shutil.which("lldb")
    if not found:
        skip_or_fail("memray attaches through gdb or lldb: apt-get install gdb")
    return found
