"""Whole `soak start` runs of the lora scenario with adapters churned every 3 s against a reference server: with
`lora-leak` planted (each adapter load keeps 8 MiB its unload never frees) `leak.rss` FAILs and its evidence says
how much each load/unload cycle carries; without it, the same churn leaves nothing to FAIL and sends no request to
an adapter soak had unloaded."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(200)]

MiB = 2**20
LEAK_BYTES = 8 * MiB


def churn_run(soak_cli, tmp_path: Path, *extra: str):
    """45 s at 3 req/s: 20 judged windows of 2 s, an adapter cycled every 3 s (about 13 cycles judged)."""
    adapters = []
    for name in ("sql", "chat", "code"):
        (tmp_path / name).mkdir()
        adapters += ["--lora", f"{name}={tmp_path / name}"]
    out = tmp_path / "out"
    result = soak_cli("start", "--duration", "45s", "--warmup", "5s", "--window", "2s", "--sample-every", "1s",
                      "--rate", "3", "--no-idle-probes", *adapters, "--lora-churn-every", "3s", "--out", str(out),
                      "--json", *extra, timeout_s=150)
    return result, out / "soak.db"


def event_counts(db_path: Path) -> dict[str, int]:
    with sqlite3.connect(db_path) as db:
        return dict(db.execute("select kind, count(*) from events group by kind").fetchall())


def scenario_totals(db_path: Path) -> dict[str, tuple[int, int]]:
    """Requests and 4xx answers per scenario."""
    with sqlite3.connect(db_path) as db:
        rows = db.execute("select scenario, sum(requests), sum(err_http_4xx) from request_windows group by scenario")
        return {scenario: (requests, http_4xx) for scenario, requests, http_4xx in rows}


def test_a_leak_per_adapter_load_fails_leak_rss_with_the_growth_per_cycle(soak_cli, tmp_path):
    result, db_path = churn_run(soak_cli, tmp_path, "--scenario", "lora", "--reference-fault", "lora-leak=8MiB")
    assert result.returncode == 1, result.stderr[-3000:]
    finding = next(f for f in json.loads(result.stdout)["findings"] if f["check"] == "leak.rss")
    assert finding["verdict"] == "FAIL", finding["evidence"]
    churn = finding["details"]["lora_churn"]
    assert churn["named"] and churn["cycles"] >= 8, churn
    assert 0.8 * LEAK_BYTES < churn["per_cycle"] < 1.2 * LEAK_BYTES, churn
    assert re.search(r"growth follows lora churn: ≈ \d+\.\d MiB per load/unload cycle \(95 % CI", finding["evidence"])
    assert "LoRA adapter loads and unloads" in finding["next_step"]
    events = event_counts(db_path)
    assert events["lora_load"] >= 3 + churn["cycles"] and events["lora_unload"] >= churn["cycles"]
    assert "lora_error" not in events


def test_healthy_churn_does_not_fail_and_never_asks_for_an_unloaded_adapter(soak_cli, tmp_path):
    result, db_path = churn_run(soak_cli, tmp_path, "--scenario", "lora:2", "--scenario", "chat_short")
    assert result.returncode in (0, 3), result.stderr[-3000:]  # PASS, or INCONCLUSIVE for a short run's latencies
    findings = {f["check"]: f for f in json.loads(result.stdout)["findings"]}
    assert all(f["verdict"] != "FAIL" for f in findings.values()), {c: f["evidence"] for c, f in findings.items()}
    # 40 s judged is short: the server's own settling can read as SUSPECT, but churn must not be named for it
    assert not findings["leak.rss"]["details"].get("lora_churn", {}).get("named"), findings["leak.rss"]["evidence"]
    requests, http_4xx = scenario_totals(db_path)["lora"]
    assert requests > 50 and http_4xx == 0
    events = event_counts(db_path)
    assert events["lora_load"] >= 10 and events["lora_unload"] >= 10 and "lora_error" not in events
