"""soak proves its verdicts: each fault planted in the reference server fails exactly its check, and a healthy
but noisy server fails none. Slow: each run is about two minutes of compressed model time."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

# 23 windows of 5 s after a 20 s warm-up: enough for the trend tests (≥ 20 windows).
TREND_RUN = ["start", "--duration", "135s", "--warmup", "20s", "--window", "5s", "--sample-every", "1s",
             "--rate", "4", "--scenario", "chat_short", "--no-idle-probes", "--json"]
TREND_CHECKS = ("leak.rss", "leak.fds", "creep.ttft_p99", "creep.itl_p99", "creep.e2e_p99", "errors.rise",
                "errors.budget", "hang", "crashes", "throughput.decay")


def _findings(result) -> dict[str, dict]:
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    summary = json.loads(result.stdout)
    return {finding["check"]: finding for finding in summary["findings"]}


def _faults(*specs: str) -> list[str]:
    return [arg for spec in specs for arg in ("--reference-fault", spec)]


def test_planted_leaks_creep_and_error_rise_each_fail_their_check(tmp_path, soak_cli):
    # 512 KiB a request builds well over the 64 MiB a memory slope must reach before it can FAIL (leak.rss's
    # least change), in the two judged minutes at 4 req/s. The creep lengthens each engine step by a share of its
    # own time, so steps are held to at least 5 ms (as a GPU's decode step): at 1-3 ms a busy machine's stray
    # milliseconds, multiplied by the creep, drowned the rise (CI saw -25 % to +1364 %).
    result = soak_cli(*TREND_RUN, "--time-scale", "60", "--out", str(tmp_path), "--reference-arg=--step-time=5ms",
                      *_faults("rss-leak=512KiB", "fd-leak=4", "latency-creep=300", "error-rise=0:0.5"), timeout_s=400)
    findings = _findings(result)
    for check in ("leak.rss", "leak.fds", "errors.rise"):
        assert findings[check]["verdict"] == "FAIL", findings[check]
    itl = findings["creep.itl_p99"]  # INVALID when a busy test machine starved the client: it keeps what it measured
    measured = (itl.get("details") or {}).get("measured", {})
    # The planted creep grows step time linearly, so log ITL rises fastest early; on a busy machine that can pass
    # for a warm-up which leaves too few of the 23 windows, and then the check says so rather than guess.
    too_short = "to tell a creep from the warm-up" in (measured.get("evidence") or itl["evidence"])
    # Three runs at once on two cores can blur the rise into the machine's jitter (CI: 95 % CI -82 % to +54928 %):
    # then the estimate stands over the threshold unproven, SUSPECT, which still never passes the run.
    assert {"FAIL", "SUSPECT"} & {itl["verdict"], measured.get("verdict")} or too_short, itl
    assert findings["leak.rss"]["unit"] and findings["leak.rss"]["ci"][0] > 0
    assert findings["leak.rss"].get("per_request"), "a leak reports bytes per request too"
    assert findings["hang"]["verdict"] != "FAIL" and findings["crashes"]["verdict"] == "PASS"
    assert json.loads(result.stdout)["verdict"] == "FAIL"  # a late client does not void the server's leak


def test_a_healthy_but_noisy_server_fails_nothing(tmp_path, soak_cli):
    # Engine steps of at least 10 ms, as a GPU's decode step: at the default 1-3 ms, a run that began beside this one
    # on a busy two-core machine added milliseconds that stepped ITL up 88 % and read as the server's (CI).
    result = soak_cli(*TREND_RUN, "--time-scale", "60", "--out", str(tmp_path), "--reference-arg=--step-time=10ms",
                      *_faults("warmup-ratchet", "gc-sawtooth=64MiB:10m", "stalls=3"), timeout_s=400)
    findings = _findings(result)
    failed = {check: f["evidence"] for check, f in findings.items() if f["verdict"] == "FAIL"}
    assert failed == {}
    # Two minutes of a 64 MiB sawtooth may not rule out a 16 MiB/h leak: then the gate is INCONCLUSIVE (or
    # SUSPECT, when the phase of the saw puts the estimate itself over), never PASS, and it says what it could see.
    rss = findings["leak.rss"]
    if rss["detection_limit"] < rss["threshold"]:
        assert rss["verdict"] in ("PASS", "SUSPECT"), rss
    else:
        assert rss["verdict"] in ("INCONCLUSIVE", "SUSPECT"), rss
        assert "rules out rises above" in rss["evidence"], rss


KV_RUN = ["start", "--duration", "50s", "--warmup", "10s", "--window", "5s", "--sample-every", "1s", "--rate", "3",
          "--scenario", "cancel", "--idle-probe-every", "15s", "--idle-probe-for", "2s", "--json"]


def test_kv_blocks_kept_after_aborted_streams_fail_the_idle_probe(tmp_path, soak_cli):
    result = soak_cli(*KV_RUN, "--out", str(tmp_path), *_faults("kv-leak-on-abort"), timeout_s=200)
    findings = _findings(result)
    assert findings["leak.kv"]["verdict"] == "FAIL", findings["leak.kv"]
    assert findings["leak.kv"]["value"] > 0.001


def test_aborted_streams_on_a_healthy_server_leave_no_residue(tmp_path, soak_cli):
    findings = _findings(soak_cli(*KV_RUN, "--out", str(tmp_path), timeout_s=200))
    assert findings["leak.kv"]["verdict"] == "PASS", findings["leak.kv"]


def test_a_silent_hang_with_health_200_fails_hang(tmp_path, soak_cli):
    result = soak_cli("start", "--duration", "60s", "--warmup", "10s", "--window", "5s", "--sample-every", "1s",
                      "--rate", "2", "--scenario", "chat_short", "--no-idle-probes", "--request-timeout", "20s",
                      "--out", str(tmp_path), "--json", *_faults("hang-after=25s"), timeout_s=200)
    findings = _findings(result)
    assert findings["hang"]["verdict"] == "FAIL", findings["hang"]
    assert findings["crashes"]["verdict"] == "PASS"  # /health stayed 200: nothing died
