"""What a test needs from the machine: under SOAK_REQUIRE_ALL=1 (set by CI) a missing service or tool fails the
test instead of skipping it."""

from __future__ import annotations

import os

import pytest


def require_all() -> bool:
    """SOAK_REQUIRE_ALL=1 (set by CI) turns "missing service" skips into failures."""
    return os.environ.get("SOAK_REQUIRE_ALL") == "1"


def skip_or_fail(reason: str) -> None:
    """Skip for `reason`, or fail where everything is required."""
    if require_all():
        pytest.fail(f"{reason} but SOAK_REQUIRE_ALL=1")
    pytest.skip(reason)
