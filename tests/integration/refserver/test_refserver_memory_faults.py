"""Memory and fd faults, measured from outside the server process (RSS, open fds)."""

import time

import pytest
from refserver_helpers import wait_until

pytestmark = pytest.mark.timeout(120)
MiB = 2**20


def _requests(server, count: int) -> None:
    with server.client() as client:
        for _ in range(count):
            body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
            assert client.post("/v1/chat/completions", json=body).status_code == 200


def _sample_rss(server, duration_s: float, interval_s: float = 0.02) -> list[int]:
    samples, deadline = [], time.monotonic() + duration_s
    while time.monotonic() < deadline:
        samples.append(server.rss_bytes())
        time.sleep(interval_s)  # the sampling period, not a wait for a condition
    return samples


def test_rss_leak_grows_by_planted_bytes(start_refserver):
    server = start_refserver("--fault", "rss-leak=2MiB")
    _requests(server, 5)  # warm-up: allocator pools, first-request caches
    before = server.rss_bytes()
    _requests(server, 20)
    grown = server.rss_bytes() - before
    assert 0.7 * 40 * MiB <= grown <= 1.3 * 40 * MiB, grown / MiB
    assert server.debug()["retained_bytes"] == 25 * 2 * MiB


def test_no_fault_no_growth(start_refserver):
    server = start_refserver()
    _requests(server, 5)
    before = server.rss_bytes()
    _requests(server, 20)
    assert abs(server.rss_bytes() - before) < 8 * MiB


def test_fd_leak_opens_n_per_request(start_refserver):
    server = start_refserver("--fault", "fd-leak=3")
    with server.client() as client:  # one kept-alive connection, so sockets do not move the count
        body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        client.post("/v1/chat/completions", json=body)
        before = server.open_fds()
        for _ in range(10):
            assert client.post("/v1/chat/completions", json=body).status_code == 200
        assert server.open_fds() - before == 30
    assert server.debug()["leaked_fds"] == 33


def test_warmup_ratchet_climbs_then_holds(start_refserver):
    # 5 steps of 16 MiB over 10 model minutes = 2 s of wall time at x300.
    server = start_refserver("--fault", "warmup-ratchet=16MiB:10m", "--time-scale", "300")
    _requests(server, 5)  # the server's own first-request warm-up, before measuring
    held_at_start = server.debug()["ratchet_bytes"]
    rss_at_start = server.rss_bytes()
    wait_until(lambda: server.debug()["ratchet_bytes"] == 80 * MiB, 10, what="the ratchet's last step")
    plateau = server.rss_bytes()
    assert plateau - rss_at_start >= 0.7 * (80 * MiB - held_at_start)
    _requests(server, 30)  # traffic on the plateau
    samples = _sample_rss(server, 1.5)
    assert max(samples) - plateau < 8 * MiB and plateau - min(samples) < 8 * MiB
    assert server.debug()["ratchet_bytes"] == 80 * MiB


def _sample_rss_timed(server, duration_s: float, interval_s: float = 0.02) -> list[tuple[float, int]]:
    samples, deadline = [], time.monotonic() + duration_s
    while time.monotonic() < deadline:
        samples.append((time.monotonic(), server.rss_bytes()))
        time.sleep(interval_s)  # the sampling period, not a wait for a condition
    return samples


def _sudden_falls(samples: list[tuple[float, int]], high: int, low: int, within_s: float) -> int:
    """Falls from at least `high` to at most `low` inside `within_s` (a busy machine may split one over samples)."""
    falls, last_high_at = 0, None
    for at, rss in samples:
        if rss >= high:
            last_high_at = at
        elif rss <= low and last_high_at is not None:
            falls += at - last_high_at <= within_s
            last_high_at = None
    return falls


def test_gc_sawtooth_returns_to_floor(start_refserver):
    # One 64 MiB cycle per model minute = 2 s of wall time at x30; 7 s of samples hold three cycle ends.
    server = start_refserver("--fault", "gc-sawtooth=64MiB:1m", "--time-scale", "30")
    samples = _sample_rss_timed(server, 7.0)
    values = [rss for _, rss in samples]
    floor, peak = min(values), max(values)
    assert peak - floor >= 45 * MiB
    # The climb takes 2 s; a fall across most of the range within 0.5 s is everything handed back at once.
    falls = _sudden_falls(samples, high=floor + 30 * MiB, low=floor + 10 * MiB, within_s=0.5)
    assert falls >= 2, falls
    last_cycle = values[-len(values) * 2 // 7:]  # the last 2 s hold a full cycle's low point
    assert min(last_cycle) - floor < 8 * MiB


def _disconnect_mid_stream(server) -> None:
    body = {"model": "soak-reference", "messages": [{"role": "user", "content": "go on"}],
            "max_tokens": 1500, "ignore_eos": True, "stream": True}
    with server.client() as client, client.stream("POST", server.url + "/v1/chat/completions", json=body) as response:
        events = (line for line in response.iter_lines() if line)
        for _ in range(3):
            assert next(events).startswith("data: ")
    # leaving both blocks closes the connection with the stream unread


def test_rss_leak_on_cancel_leaks_only_for_streams_the_client_abandons(start_refserver):
    server = start_refserver("--fault", "rss-leak-on=cancel:2MiB")
    for _ in range(3):
        assert server.stream_chat(max_tokens=8).done  # streamed to the end: no leak
    _requests(server, 3)
    assert server.debug()["retained_bytes"] == 0
    for count in (1, 2):
        _disconnect_mid_stream(server)
        wait_until(lambda count=count: server.debug()["retained_bytes"] == count * 2 * MiB, 10,
                   what=f"abort {count} to leak")


def test_rss_leak_on_long_prompt_leaks_only_for_prompts_of_1024_tokens_or_more(start_refserver):
    server = start_refserver("--fault", "rss-leak-on=long-prompt:2MiB")
    for content in ("hello", "x" * 900):  # well under 1024 tokens with the chat template around them
        assert server.chat(content, max_tokens=4).status_code == 200
    assert server.stream_chat("y" * 900, max_tokens=4).done
    assert server.debug()["retained_bytes"] == 0
    assert server.chat("x" * 1100, max_tokens=4).status_code == 200
    assert server.stream_chat("y" * 1100, max_tokens=4).done
    assert server.debug()["retained_bytes"] == 2 * 2 * MiB


def test_rss_steps_hold_each_step_for_good(start_refserver):
    # Two 48 MiB steps at model minutes 1 and 2: 1 s and 2 s of wall time at x60.
    server = start_refserver("--fault", "rss-steps=48MiB@1m,2m", "--time-scale", "60")
    before = server.rss_bytes()
    wait_until(lambda: server.debug()["step_bytes"] == 96 * MiB, 15, what="both steps")
    _requests(server, 10)  # traffic after the steps frees nothing of theirs
    samples = _sample_rss(server, 1.0)
    assert min(samples) - before >= 0.8 * 96 * MiB, (min(samples) - before) / MiB
    assert server.debug()["step_bytes"] == 96 * MiB
