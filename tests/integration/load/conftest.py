"""Fixtures for the load stage's integration tests: the mock OpenAI server, one per session."""

from __future__ import annotations

import pytest
from loadtools import start_mock


@pytest.fixture(scope="session")
def mock_server():
    server = start_mock()
    yield server
    server.process.kill()  # hanging test requests would hold up a graceful shutdown
    server.process.wait(timeout=10)
