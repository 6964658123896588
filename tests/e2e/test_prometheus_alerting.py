"""The run's live series through a real Prometheus and Alertmanager: one `soak start --metrics-bind` run on the
reference server with a planted leak (and 5 % of planted 500s, so the error panels and the error alert have
something to show), scraped every second; what Prometheus stored agrees with summary.json and the stored windows,
every expression of the shipped dashboard and alert rules answers from it, and the leak's FAIL reaches
Alertmanager's webhook.

Needs Debian's `prometheus` and `prometheus-alertmanager`; skipped without them, failed under SOAK_REQUIRE_ALL=1.
Prometheus, Alertmanager and soak run as this test's own children on free loopback ports with their own data
folders, never as the Debian services, and are stopped by their PIDs. The rules Prometheus loads are the shipped
file with every `for:` longer than 10 s cut to 10 s (a 5-minute `for` does not fit a 160 s run); nothing else
changes.

One run serves every test here (a module fixture, one xdist group): 160 s planned, 12 s warm-up, 4 s windows, so
37 windows and early-stop looks from 20 complete windows every 2 (the first due about 100 s in). A look is a child
process that took 30–40 s on a busy 2-core machine, so the first one must come well before the end; 512 KiB a
request at 4 requests/s grows the server by ~2 MiB/s, past leak.rss's 64 MiB least change within those 80 s.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from soak.metrics import catalog
from soak.store.histograms import decode_histogram, merged_percentiles, new_histogram
from soak.units import parse_duration
from support.monitoring import ALERTS, alert_expressions, alert_rules, dashboard_expressions, substitute
from support.processes import stop_process
from support.prometheus_api import free_port, one_value, query, wait_ready
from support.require import skip_or_fail

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(480),
              pytest.mark.xdist_group("prometheus_alerting")]

RUN = ("start", "--duration", "160s", "--warmup", "12s", "--window", "4s", "--sample-every", "1s", "--rate", "4",
       "--scenario", "chat_short", "--no-idle-probes", "--canary-every", "0", "--forensics", "off",
       "--reference-fault", "rss-leak=512KiB", "--reference-fault", "error-rise=0.05:0.05",
       "--slo", "ttft=2s,e2e=30s", "--json")
RUN_TIMEOUT_S = 360.0
TEST_FOR_S = 10.0  # the longest `for:` the test's copy of the rules keeps
RATE_INTERVAL = "30s"  # what Grafana's $__rate_interval stands for here (scrapes every 1 s)
# A quantile Prometheus interpolates lies in the bucket holding its rank, within BUCKET_RATIO of the exact value;
# 1 % more for the stored HDR histograms' own precision (3 significant digits, whole microseconds).
QUANTILE_BOUND = catalog.BUCKET_RATIO * 1.01

# Expressions that need what the reference server on a CPU cannot give: empty here, and that is right.
NO_DATA_HERE = {
    "GPU memory / A": "no GPU: soak exports no GPU series without NVML",
    "GPU memory / B": "no GPU: soak exports no GPU series without NVML",
}
# How each alert's expression is shown to answer from this run (a test fails on a rule missing here):
#   fires  — the run plants what it alerts on: it fired in Prometheus and its expression answers then;
#   bool   — a healthy client is never late: the comparison made `bool` answers with every series it compares;
#   after  — quiet during the run and after its normal end; what it compares (before `unless`) answers after it.
ALERT_PROOF = {"SoakCheckFailed": "fires", "SoakErrorBudgetBurn": "fires", "SoakClientLate": "bool",
               "SoakClientLateSends": "bool", "SoakRunHeartbeatStale": "after"}
COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)(\s*)(?=[0-9.])")


@pytest.fixture(scope="module")
def tools() -> dict[str, str]:
    found = {name: shutil.which(name) for name in ("prometheus", "prometheus-alertmanager")}
    if not all(found.values()):
        skip_or_fail("prometheus and prometheus-alertmanager are not installed "
                     "(Debian: apt-get install prometheus prometheus-alertmanager)")
    return found


# -- the pieces ---------------------------------------------------------------------------------------------------
class AlertReceiver:
    """Alertmanager's webhook receiver: an HTTP server on a loopback port that keeps every payload posted."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    receiver.payloads.append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert of every payload received so far."""
        with self._lock:
            return [alert for payload in self.payloads for alert in payload["alerts"]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_logged(command: list[str], log: Path) -> subprocess.Popen:
    """`command` with its output in `log`."""
    with open(log, "w") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)


def rules_for_the_test(folder: Path) -> Path:
    """The shipped rules with every `for:` longer than TEST_FOR_S cut to it."""
    def shorten(match: re.Match[str]) -> str:
        kept = match.group(2) if parse_duration(match.group(2)) <= TEST_FOR_S else f"{TEST_FOR_S:g}s"
        return match.group(1) + kept

    path = folder / "soak-alerts.yml"
    path.write_text(re.sub(r"(\bfor:\s*)(\S+)", shorten, ALERTS.read_text(encoding="utf-8")), encoding="utf-8")
    return path


def prometheus_config(folder: Path, soak_port: int, alertmanager_port: int, servers: Path) -> Path:
    """Scrape soak's page and (once the test names it in `servers`) the server's own /metrics every second;
    evaluate the rules every second and send alerts to the test's Alertmanager."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]},
        "rule_files": [str(rules_for_the_test(folder))],
        "scrape_configs": [
            {"job_name": "soak", "static_configs": [{"targets": [f"127.0.0.1:{soak_port}"]}]},
            {"job_name": "server", "file_sd_configs": [{"files": [str(servers)], "refresh_interval": "1s"}]},
        ],
    }
    path = folder / "prometheus.yml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


def alertmanager_config(folder: Path, webhook_url: str) -> Path:
    """Every alert to the test's webhook at once, each alert its own group."""
    config = {"route": {"receiver": "test", "group_by": ["..."], "group_wait": "1s", "group_interval": "1s",
                        "repeat_interval": "1h"},
              "receivers": [{"name": "test", "webhook_configs": [{"url": webhook_url, "send_resolved": False}]}]}
    path = folder / "alertmanager.yml"
    path.write_text(json.dumps(config, indent=2))
    return path


# -- asking Prometheus ---------------------------------------------------------------------------------------------
def samples(url: str, selector: str) -> list[tuple[float, float]]:
    """(scrape time, value) of every sample Prometheus stored for one series over the last 15 minutes."""
    result = query(url, f"{selector}[15m]")
    assert len(result) == 1, (selector, result)
    return [(float(t), float(v)) for t, v in result[0]["values"]]


# -- the run -------------------------------------------------------------------------------------------------------
@dataclass
class Observed:
    """One run as Prometheus and Alertmanager saw it, with soak's own record of it."""

    prometheus: str
    receiver: AlertReceiver
    out: Path
    summary: dict[str, Any]
    run_id: str = ""
    target: str = ""
    finished_at: float = 0.0  # the scrape that first read soak_run_finished 1
    last_running: float = 0.0  # the scrape before it
    failed_at: float = 0.0  # the first scrape that read leak.rss FAIL
    fired: dict[str, float] = field(default_factory=dict)  # alert name → first time ALERTS read it firing


def name_the_server(url: str, servers: Path) -> tuple[str, str] | None:
    """Once soak's page says which server it loads, point the `server` scrape job at it; (run id, target)."""
    info = query(url, "soak_run_info")
    if not info:
        return None
    labels = info[0]["metric"]
    draft = servers.with_suffix(".tmp")
    draft.write_text(json.dumps([{"targets": [labels["target"]]}]))
    draft.replace(servers)  # file_sd must never read half a file
    return labels["run_id"], labels["target"]


def follow(url: str, soak: subprocess.Popen, servers: Path) -> tuple[str, str]:
    """Name the server to Prometheus as soon as the run is up, then wait for soak to end; (run id, target)."""
    deadline, named = time.monotonic() + RUN_TIMEOUT_S, None
    while soak.poll() is None:
        assert time.monotonic() < deadline, f"soak still running after {RUN_TIMEOUT_S:.0f} s"
        named = named or name_the_server(url, servers)
        time.sleep(0.5)
    assert named, "Prometheus never scraped the run's page"
    return named


def first_sample(url: str, selector: str, value: float) -> float:
    """When Prometheus first stored `value` for the series."""
    return next(t for t, v in samples(url, selector) if v == value)


def first_firing(url: str, alertname: str, matchers: str = "") -> float | None:
    """When Prometheus's own ALERTS series first read the alert firing (None: never)."""
    result = query(url, f'ALERTS{{alertname="{alertname}", alertstate="firing"{matchers}}}[15m]')
    return min((float(t) for series in result for t, _ in series["values"]), default=None)


def wait_for_webhook(receiver: AlertReceiver, run_id: str, check: str, timeout_s: float = 60) -> dict[str, Any]:
    """The SoakCheckFailed alert for `check` of the run, once Alertmanager has posted it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for alert in receiver.alerts():
            labels = alert["labels"]
            if (labels.get("alertname"), labels.get("run_id"), labels.get("check")) == ("SoakCheckFailed", run_id, check):
                return alert
        time.sleep(0.25)
    raise AssertionError(f"no SoakCheckFailed for {check} reached the webhook: {receiver.alerts()}")


@pytest.fixture(scope="module")
def observed(tools, tmp_path_factory) -> Iterator[Observed]:
    """Alertmanager, Prometheus and one soak run they watch; stopped by PID after the module's tests."""
    base = tmp_path_factory.mktemp("alerting")
    soak_port, prom_port, am_port = free_port(), free_port(), free_port()
    servers = base / "servers.json"
    servers.write_text("[]")
    receiver = AlertReceiver()
    children: list[subprocess.Popen] = []
    try:
        children.append(start_logged([tools["prometheus-alertmanager"],
                                      f"--config.file={alertmanager_config(base, receiver.url)}",
                                      f"--storage.path={base / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
                                      "--cluster.listen-address="], base / "alertmanager.log"))
        wait_ready(f"http://127.0.0.1:{am_port}/-/ready", children[-1], base / "alertmanager.log")
        children.append(start_logged([tools["prometheus"],
                                      f"--config.file={prometheus_config(base, soak_port, am_port, servers)}",
                                      f"--storage.tsdb.path={base / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{prom_port}"], base / "prometheus.log"))
        url = f"http://127.0.0.1:{prom_port}"
        wait_ready(f"{url}/-/ready", children[-1], base / "prometheus.log")
        with open(base / "soak.out", "w") as stdout, open(base / "soak.err", "w") as stderr:
            soak = subprocess.Popen([sys.executable, "-m", "soak", *RUN, "--metrics-bind", f"127.0.0.1:{soak_port}",
                                     "--out", str(base / "runs")], stdout=stdout, stderr=stderr)
        children.append(soak)
        run_id, target = follow(url, soak, servers)
        assert soak.returncode == 1, (base / "soak.err").read_text()[-3000:]  # FAIL
        run = Observed(url, receiver, base / "runs", json.loads((base / "soak.out").read_text()), run_id, target)
        assert run.summary["run_id"] == run_id
        selector = f'{{run_id="{run_id}"}}'
        run.finished_at = first_sample(url, f"soak_run_finished{selector}", 1.0)
        run.last_running = max(t for t, v in samples(url, f"soak_run_finished{selector}") if t < run.finished_at)
        run.failed_at = first_sample(url, f'soak_check_verdict{{run_id="{run_id}", check="leak.rss"}}', 3.0)
        yield run
    finally:
        for child in reversed(children):
            stop_process(child)
        receiver.close()


# -- what the stored run says --------------------------------------------------------------------------------------
def stored(out: Path, sql: str, *params: Any) -> list[tuple]:
    db = sqlite3.connect(out / "soak.db")
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def stored_histograms(run: Observed, metric: str, after_warmup: bool = False) -> list[str]:
    """The run's stored latency windows of `metric`, every scenario together; the warm-up's too unless told."""
    rows = stored(run.out, "select hist, window_index from latency_windows where run_id = ? and metric = ? "
                           "and scenario = '*'", run.run_id, metric)
    return [hist for hist, index in rows if hist and (index >= 0 or not after_warmup)]


def exact_quantile_s(hists: list[str], q: float) -> tuple[float, int]:
    """The value of rank ⌈q·n⌉ of the merged histograms, in seconds (the rank Prometheus's histogram_quantile
    interpolates at, in the same float arithmetic), and n."""
    merged = new_histogram()
    for text in hists:
        merged.add(decode_histogram(text))
    total = merged.get_total_count()
    rank = max(1, math.ceil(q * total))
    for item in merged.get_recorded_iterator():
        if item.total_count_to_this_value >= rank:
            return merged.get_highest_equivalent_value(item.value_iterated_to) / 1e6, total
    raise AssertionError("an empty histogram")


# -- the tests -----------------------------------------------------------------------------------------------------
def test_the_request_counts_prometheus_stored_are_summary_jsons(observed):
    """soak_requests_total counts every finished request, warm-up and cancels included, as totals.requests does
    (both are fed by the same hand-over of each request); read at the scrape that saw the run finished."""
    run, at = observed, observed.finished_at
    totals = run.summary["totals"]
    assert totals["requests"] > 400 and totals["errors"] > 0
    assert one_value(run.prometheus, f'sum(soak_requests_total{{run_id="{run.run_id}"}})', at) == totals["requests"]
    assert one_value(run.prometheus, f'sum(soak_request_errors_total{{run_id="{run.run_id}"}})', at) == totals["errors"]
    assert one_value(run.prometheus, f'sum(soak_requests_total{{run_id="{run.run_id}", outcome="cancelled"}}) '
                                     f'or vector(0)', at) == totals["cancelled"]
    by_class = query(run.prometheus, f'sum by (error_class) (soak_request_errors_total{{run_id="{run.run_id}"}})', at)
    assert {r["metric"]["error_class"]: float(r["value"][1]) for r in by_class} == {
        name: count for name, count in totals["errors_by_class"].items() if count}
    assert one_value(run.prometheus, f'sum(soak_requests_within_slo_total{{run_id="{run.run_id}"}})', at) > 0


@pytest.mark.parametrize("metric, family", [("ttft", catalog.TTFT), ("itl", catalog.ITL), ("e2e", catalog.E2E)])
def test_the_latency_histograms_agree_with_the_stored_windows_and_summary_json(observed, metric, family):
    """summary.json's percentiles are over the windows after warm-up; Prometheus's cumulative buckets hold the
    whole run. So: the summary is the stored windows after warm-up (exactly), and Prometheus's quantile over its
    last buckets is within a bucket of the exact quantile of all stored windows, warm-up included."""
    run, at = observed, observed.finished_at
    measured = merged_percentiles(stored_histograms(run, metric, after_warmup=True))
    assert run.summary["latency_ms"][metric] == measured
    whole = stored_histograms(run, metric)
    count = one_value(run.prometheus, f'sum({family.prom}_count{{run_id="{run.run_id}"}})', at)
    for q in (0.5, 0.99):
        exact_s, total = exact_quantile_s(whole, q)
        assert count == total  # the same requests on both sides
        promql = f'histogram_quantile({q}, sum by (le) ({family.prom}_bucket{{run_id="{run.run_id}"}}))'
        estimate_s = one_value(run.prometheus, promql, at)
        assert exact_s / QUANTILE_BOUND <= estimate_s <= exact_s * QUANTILE_BOUND, (metric, q, exact_s, estimate_s)


def test_the_leak_reads_fail_at_a_look_during_the_run_and_the_run_ends_finished(observed):
    run = observed
    assert {f["check"]: f["verdict"] for f in run.summary["findings"]}["leak.rss"] == "FAIL"
    assert run.failed_at < run.last_running < run.finished_at  # FAIL from a look, before the end
    looks = one_value(run.prometheus, f'soak_check_looks_total{{run_id="{run.run_id}"}}', run.failed_at)
    assert looks >= 1
    final = query(run.prometheus, f'soak_check_verdict{{run_id="{run.run_id}"}}', run.finished_at)
    verdicts = {r["metric"]["check"]: float(r["value"][1]) for r in final}
    assert verdicts == {f["check"]: catalog.VERDICT_VALUES[f["verdict"]] for f in run.summary["findings"]}
    assert one_value(run.prometheus, f'soak_run_finished{{run_id="{run.run_id}"}}', run.finished_at) == 1.0


def test_the_heartbeat_moves_while_the_run_drives_its_load(observed):
    run = observed
    start_s = one_value(run.prometheus, f'soak_run_start_time_seconds{{run_id="{run.run_id}"}}', run.finished_at)
    driving = [(t, v) for t, v in samples(run.prometheus, f'soak_run_heartbeat_timestamp_seconds{{run_id="{run.run_id}"}}')
               if start_s + 5 <= t <= start_s + run.summary["duration_s"]]
    assert len(driving) > 100
    assert max(t - v for t, v in driving) < 10  # scraped every second, never more than a few ticks old
    assert [v for _, v in driving] == sorted(v for _, v in driving)


def test_every_dashboard_expression_answers_from_the_run(observed):
    run = observed
    values = {"run_id": run.run_id, "replica": ".*", "target": run.target, "__rate_interval": RATE_INTERVAL,
              "__interval": "15s", "__range": "5m"}
    empty = []
    for expression in dashboard_expressions():
        result = query(run.prometheus, substitute(expression.expr, values), run.last_running)
        if not result and expression.where not in NO_DATA_HERE:
            empty.append(expression.where)
    assert not empty, f"no data from: {empty}"


def test_every_alert_expression_answers_from_the_run(observed):
    run = observed
    rules = {rule["alert"]: rule["expr"].strip() for rule in alert_rules()}
    assert set(rules) == set(ALERT_PROOF)
    assert len(alert_expressions()) == len(rules)
    for name, proof in ALERT_PROOF.items():
        expr = rules[name]
        if proof == "fires":
            fired = first_firing(run.prometheus, name, f', run_id="{run.run_id}"')
            assert fired is not None and fired < run.finished_at + 60, name
            assert query(run.prometheus, expr, fired), name
        elif proof == "bool":
            assert query(run.prometheus, COMPARISON.sub(r"\1 bool\2", expr), run.last_running), name
        else:
            assert first_firing(run.prometheus, name) is None, name
            compared = expr.split("unless")[0]
            for after_s in (150.0, 1800.0):  # the rule as Prometheus will evaluate it once the heartbeat is old
                assert not query(run.prometheus, expr, run.finished_at + after_s), (name, after_s)
                assert query(run.prometheus, compared, run.finished_at + after_s), (name, after_s)
            assert not query(run.prometheus, expr, run.last_running), name


def test_every_rule_evaluates_without_error(observed):
    with urllib.request.urlopen(f"{observed.prometheus}/api/v1/rules", timeout=10) as answer:
        groups = json.load(answer)["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert {rule["name"] for rule in rules} == set(ALERT_PROOF)
    assert all(rule["health"] == "ok" for rule in rules), [(r["name"], r.get("lastError")) for r in rules]


def test_alertmanager_delivers_the_leaks_fail_to_the_webhook(observed):
    run = observed
    alert = wait_for_webhook(run.receiver, run.run_id, "leak.rss")
    assert alert["status"] == "firing"
    assert alert["labels"]["severity"] == "critical" and alert["labels"]["target"] == run.target
    assert alert["annotations"]["summary"] == f"soak run {run.run_id}: check leak.rss FAIL"
    assert run.run_id in alert["annotations"]["description"]
