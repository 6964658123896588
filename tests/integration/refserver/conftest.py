"""Fixtures that start reference servers as subprocesses on port 0 and stop exactly those PIDs."""

from collections.abc import Callable, Iterator

import pytest
from refserver_helpers import RefServer, launch


@pytest.fixture
def start_refserver() -> Iterator[Callable[..., RefServer]]:
    """Factory: start a server with extra flags; every server started is stopped at teardown."""
    started: list[RefServer] = []

    def start(*args: str) -> RefServer:
        server = launch(*args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
        server.stderr_path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def shared_refserver() -> Iterator[RefServer]:
    """One plain server for tests that only read from it or clean up after themselves."""
    server = launch()
    yield server
    server.stop()
    server.stderr_path.unlink(missing_ok=True)
