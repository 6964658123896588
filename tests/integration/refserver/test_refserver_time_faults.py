"""Faults driven by model time (hang, crash, error rise and bursts, creep, stalls), with a big --time-scale."""

import math
import time

import httpx
import pytest
from refserver_helpers import wait_until

pytestmark = pytest.mark.timeout(120)
TINY = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}


class ServerClock:
    """Maps local perf_counter readings to the server's wall uptime (from /debug/faults)."""

    def __init__(self, server, samples: int = 5) -> None:
        readings = []
        for _ in range(samples):  # keep the reading with the shortest round trip: the least uncertain
            before = time.perf_counter()
            uptime_s = server.debug()["uptime_s"]
            after = time.perf_counter()
            readings.append((after - before, (before + after) / 2 - uptime_s))
        self.offset_s = min(readings)[1]

    def uptime(self, local_s: float | None = None) -> float:
        return (time.perf_counter() if local_s is None else local_s) - self.offset_s


def _timed_requests(server, until_uptime_s: float) -> list[tuple[float, float, int]]:
    """Send tiny requests back to back; (sent, answered) in server uptime, and the status of each."""
    clock = ServerClock(server)
    results = []
    with server.client() as client:
        while clock.uptime() < until_uptime_s:
            sent = clock.uptime()
            status = client.post("/v1/chat/completions", json=TINY).status_code
            results.append((sent, clock.uptime(), status))
    return results


def test_hang_after_keeps_health_but_produces_nothing(start_refserver):
    server = start_refserver("--fault", "hang-after=1m", "--time-scale", "60")
    wait_until(lambda: "engine loop stopped" in server.stderr(), 15, what="the engine to hang")
    tokens = server.metric("vllm:generation_tokens_total")
    body = {**TINY, "max_tokens": 5, "stream": True}
    with httpx.Client(timeout=httpx.Timeout(30, read=1.5)) as client:
        with client.stream("POST", server.url + "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200  # accepted...
            with pytest.raises(httpx.ReadTimeout):
                next(line for line in response.iter_lines() if line)  # ...but not one token comes
    assert server.get("/health").status_code == 200
    # The request joined the batch and stays there, aborted or not: running > 0 with tokens flat.
    assert server.metric("vllm:num_requests_running") >= 1
    assert server.metric("vllm:generation_tokens_total") == tokens
    assert server.debug()["hung"] is True


def test_crash_after_exits_nonzero(start_refserver):
    server = start_refserver("--fault", "crash-after=1m", "--time-scale", "60")
    code = server.process.wait(timeout=20)
    assert code != 0
    assert "crash-after" in server.stderr()


def test_error_rise_follows_the_ramp(start_refserver):
    # From 0 to 1 over a 1 h horizon, i.e. 4 s of wall time at x900.
    server = start_refserver("--fault", "error-rise=0:1", "--fault-horizon", "1h", "--time-scale", "900")
    results = _timed_requests(server, until_uptime_s=4.6)
    horizon_s = 4.0
    expected = [min(1.0, sent / horizon_s) for sent, _, _ in results]
    failures = [status == 500 for _, _, status in results]
    assert set(status for _, _, status in results) <= {200, 500}
    spread = 4 * math.sqrt(sum(p * (1 - p) for p in expected)) + 3
    assert abs(sum(failures) - sum(expected)) <= spread
    early = [f for (sent, _, _), f in zip(results, failures) if sent < 1.0]
    late = [f for (sent, _, _), f in zip(results, failures) if 3.0 <= sent < 4.0]
    assert sum(early) / len(early) < 0.4 and sum(late) / len(late) > 0.6
    assert all(f for (sent, _, _), f in zip(results, failures) if sent > horizon_s + 0.05)
    error = server.post("/v1/chat/completions", TINY).json()["error"]
    assert error["type"] == "InternalServerError" and error["code"] == 500 and "error-rise" in error["message"]


def test_error_bursts_come_in_bursts(start_refserver):
    # 0.4 bursts per model hour at x3600 = one every 2.5 s of wall time on average, 1 s each.
    server = start_refserver("--fault", "error-bursts=0.4:1s", "--time-scale", "3600")
    schedule = server.debug()["error_bursts"]
    watched = schedule[:2]
    assert watched[1][1] < 20, "the seeded schedule should put two bursts within the first 20 s"
    results = _timed_requests(server, until_uptime_s=watched[1][1] + 0.3)
    margin_s = 0.05

    def inside(sent, answered):
        return any(start + margin_s <= sent and answered <= end - margin_s for start, end in schedule)

    def outside(sent, answered):
        return all(answered < start - margin_s or sent > end + margin_s for start, end in schedule)

    assert all(status == 500 for sent, answered, status in results if inside(sent, answered))
    assert all(status == 200 for sent, answered, status in results if outside(sent, answered))
    for start, end in watched:  # each burst was seen: a run of 500s
        assert sum(1 for sent, answered, _ in results if start + margin_s <= sent and answered <= end - margin_s) >= 3


def test_latency_creep_slows_later_requests(start_refserver):
    # +200 % per model hour at x3600: each wall second of uptime adds 2x the step's compute time,
    # so a request at 6 s runs ~13x slower per step than one at 0 s, and >= 4x slower than one at 1 s.
    server = start_refserver("--fault", "latency-creep=200", "--time-scale", "3600")
    body = {**TINY, "max_tokens": 10, "ignore_eos": True}

    def elapsed() -> float:
        started = time.perf_counter()
        assert server.post("/v1/chat/completions", body).status_code == 200
        return time.perf_counter() - started

    elapsed()  # the first request pays one-off warm-up costs
    # A busy machine only ever adds time: the quickest of three early requests is the nearest to the server's own.
    early_s = min(elapsed() for _ in range(3))
    wait_until(lambda: server.debug()["uptime_s"] >= 6.0, 20, what="6 s of uptime")
    late_s = elapsed()
    assert late_s > 2.5 * early_s, (early_s, late_s)


def test_stalls_pause_the_engine_and_it_recovers(start_refserver):
    # 0.5 stalls per model hour at x3600 = one every 2 s of wall time on average, 1 s each.
    server = start_refserver("--fault", "stalls=0.5:1s", "--time-scale", "3600")
    state = server.debug()
    start_s = next(start for start, _ in state["stalls"] if start > state["uptime_s"] + 0.7)
    assert start_s < 20, "the seeded schedule should stall within the first 20 s"
    wait_until(lambda: server.debug()["uptime_s"] >= start_s - 0.5, 25, what="the stall to near")
    result = server.stream_chat(max_tokens=1500, ignore_eos=True)  # streams well past the stall's start
    gaps = [b - a for a, b in zip(result.arrival_s, result.arrival_s[1:])]
    assert result.done and max(gaps) >= 0.8  # the whole engine paused mid-stream...
    assert sorted(gaps)[len(gaps) // 2] < 0.1  # ...and otherwise streamed at its normal pace
    assert server.debug()["stalls_taken"] >= 1
    assert server.get("/health").status_code == 200
    assert server.chat(max_tokens=5).status_code == 200
