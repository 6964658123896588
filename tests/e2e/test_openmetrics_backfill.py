"""History into Prometheus, end to end: a real `soak start` on the reference server, `soak export --format
openmetrics`, `promtool tsdb create-blocks-from openmetrics`, then a real Prometheus on those blocks answering
queries at times inside the run as the store says.

Needs Debian's `prometheus` package (promtool and prometheus); skipped without it, failed under SOAK_REQUIRE_ALL=1.
Prometheus runs as this test's own child process on a free loopback port and its own data folder, never as the
Debian service, and is stopped by its PID.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from soak.metrics import catalog
from soak.store.histograms import merged_percentiles
from support.processes import stop_process
from support.prometheus_api import free_port, one_value, query, wait_ready
from support.require import skip_or_fail

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(400),
              pytest.mark.xdist_group("openmetrics_backfill")]

RUN = ("start", "--duration", "30s", "--warmup", "5s", "--window", "5s", "--sample-every", "1s", "--rate", "4",
       "--no-idle-probes", "--json")


@pytest.fixture(scope="module")
def tools() -> dict[str, str]:
    found = {name: shutil.which(name) for name in ("promtool", "prometheus")}
    if not all(found.values()):
        skip_or_fail("promtool and prometheus are not installed (Debian: apt-get install prometheus)")
    return found


@pytest.fixture(scope="module")
def backfilled(tools, tmp_path_factory, soak_cli):
    """A finished run, exported, imported by promtool; (run id, out folder, exported samples, promtool's count)."""
    out = tmp_path_factory.mktemp("runs")
    started = soak_cli(*RUN, "--out", str(out), timeout_s=240)
    assert started.returncode in (0, 1, 3), started.stderr[-3000:]
    run_id = json.loads(started.stdout)["run_id"]
    exported = soak_cli("export", run_id, "--out", str(out), "--format", "openmetrics",
                        "--export-dir", str(out / "om"), timeout_s=120)
    assert exported.returncode == 0, exported.stderr[-3000:]
    path = out / "om" / f"{run_id}.om.txt"
    assert exported.stdout.strip().endswith(str(path))
    samples = int(exported.stdout.split()[0].replace(",", ""))
    blocks = subprocess.run([tools["promtool"], "tsdb", "create-blocks-from", "openmetrics", str(path),
                             str(out / "tsdb")], capture_output=True, text=True, timeout=120)
    assert blocks.returncode == 0, blocks.stderr[-3000:]
    return run_id, out, samples, promtool_samples(blocks.stdout)


def promtool_samples(table: str) -> int:
    """The NUM SAMPLES column of promtool's table of the blocks it created, summed."""
    lines = table.strip().splitlines()
    column = re.split(r"\s{2,}", lines[0].strip()).index("NUM SAMPLES")
    return sum(int(re.split(r"\s{2,}", line.strip())[column]) for line in lines[1:])


@pytest.fixture(scope="module")
def prometheus(tools, backfilled):
    """A Prometheus on the blocks, scraping nothing; its base URL."""
    _, out, _, _ = backfilled
    config = out / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = free_port()
    log = open(out / "prometheus.log", "w")
    process = subprocess.Popen([tools["prometheus"], f"--config.file={config}", f"--storage.tsdb.path={out / 'tsdb'}",
                                f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(f"{url}/-/ready", process, out / "prometheus.log")
        yield url
    finally:
        stop_process(process)
        log.close()


def stored(out: Path, sql: str, *params) -> list[tuple]:
    db = sqlite3.connect(out / "soak.db")
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def test_promtool_imports_every_exported_sample(backfilled):
    _, _, samples, imported = backfilled
    assert samples > 1000
    assert imported == samples  # none dropped as out of order, duplicate or unparsable


def test_a_counter_at_the_runs_end_is_the_stored_total(backfilled, prometheus):
    run_id, out, _, _ = backfilled
    (t0, duration_s), = stored(out, "select t0_epoch_s, duration_s from runs where id = ?", run_id)
    (ok,), = stored(out, "select sum(ok) from request_windows where run_id = ? and scenario != '*'", run_id)
    total = one_value(prometheus, f'sum(soak_requests_total{{run_id="{run_id}",outcome="ok"}})', t0 + duration_s)
    assert ok > 50 and total == ok


def test_a_histogram_quantile_agrees_with_the_stored_histograms(backfilled, prometheus):
    run_id, out, _, _ = backfilled
    (t0, duration_s), = stored(out, "select t0_epoch_s, duration_s from runs where id = ?", run_id)
    hists = [row[0] for row in stored(out, "select hist from latency_windows where run_id = ? and metric = 'e2e' "
                                           "and scenario = '*'", run_id)]
    p50_s = merged_percentiles(hists)["p50"] / 1000.0
    promql = f'histogram_quantile(0.5, sum by (le) (gen_ai_client_operation_duration_seconds_bucket{{run_id="{run_id}"}}))'
    estimate_s = one_value(prometheus, promql, t0 + duration_s)
    # Prometheus interpolates inside the bucket holding the median: within one bucket's width of the exact value.
    assert p50_s / catalog.BUCKET_RATIO <= estimate_s <= p50_s * catalog.BUCKET_RATIO


def test_a_gauge_inside_the_run_is_the_stored_sample(backfilled, prometheus):
    run_id, out, _, _ = backfilled
    (t0, pgid), = stored(out, "select t0_epoch_s, server_pgid from runs where id = ?", run_id)
    rows = stored(out, "select pid, t_s, rss_bytes from process_samples where run_id = ? and role = 'server' "
                       "and pid = ? and rss_bytes is not null order by t_s", run_id, pgid)
    pid, t_s, rss = rows[len(rows) // 2]  # mid-run
    result = query(prometheus, f'soak_server_process_resident_memory_bytes{{run_id="{run_id}",pid="{pid}"}}',
                   round(t0 + t_s, 3))
    assert len(result) == 1 and float(result[0]["value"][1]) == rss
    assert result[0]["metric"]["process_role"] == "api"  # the process soak started: a root of the server's tree


def test_the_verdicts_and_the_end_stand_at_the_runs_end(backfilled, prometheus):
    run_id, out, _, _ = backfilled
    (t0, duration_s, summary), = stored(out, "select t0_epoch_s, duration_s, summary_json from runs where id = ?",
                                        run_id)
    hang = next(f["verdict"] for f in json.loads(summary)["findings"] if f["check"] == "hang")
    at = t0 + duration_s
    assert one_value(prometheus, f'soak_check_verdict{{run_id="{run_id}",check="hang"}}', at) \
        == catalog.VERDICT_VALUES[hang]
    assert one_value(prometheus, f'soak_run_finished{{run_id="{run_id}"}}', at) == 1.0
    assert one_value(prometheus, f'soak_run_finished{{run_id="{run_id}"}}', t0 + duration_s / 2) == 0.0
