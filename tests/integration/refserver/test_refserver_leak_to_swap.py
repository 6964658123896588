"""rss-leak-swapped measured from outside the server: its swap grows by the planted bytes while RSS stays flat
(on a machine with swap), or its RSS grows instead and it says why (without)."""

import pytest

from soak.refserver.swapped import swap_enabled
from soak.telemetry.process import swap_bytes

pytestmark = pytest.mark.timeout(120)
MiB = 2**20


def _requests(server, count: int) -> None:
    with server.client() as client:
        for _ in range(count):
            body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
            assert client.post("/v1/chat/completions", json=body).status_code == 200


def test_the_swapped_leak_leaves_rss_for_swap(start_refserver):
    server = start_refserver("--fault", "rss-leak-swapped=2MiB")
    _requests(server, 5)  # warm-up: allocator pools, first-request caches
    rss_before, swap_before = server.rss_bytes(), swap_bytes(server.pid)
    _requests(server, 20)
    rss_grown, swap_grown = server.rss_bytes() - rss_before, swap_bytes(server.pid) - swap_before
    assert server.debug()["swapped_leak_bytes"] == 25 * 2 * MiB
    if swap_enabled():
        assert swap_grown >= 0.9 * 40 * MiB and rss_grown < 8 * MiB, (swap_grown / MiB, rss_grown / MiB)
    else:
        assert swap_grown == 0 and 0.7 * 40 * MiB <= rss_grown <= 1.3 * 40 * MiB, rss_grown / MiB
        assert "has no swap" in server.stderr()
