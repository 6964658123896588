"""The shipped Grafana dashboard (docs/deploy/grafana/soak.json) and Prometheus alert rules
(docs/deploy/prometheus/soak-alerts.yml): a dashboard Grafana can import, whose every panel queries the chosen
Prometheus; expressions that read only series soak exports (or the server's own, named here); rules promtool
accepts, whose alerts fire on the series they are written for (tests/data/prometheus/soak-alerts.test.yml).

The live proof — a real run scraped by a real Prometheus, every expression answered, the alert delivered — is
tests/e2e/test_prometheus_alerting.py (slow).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from support.monitoring import (
    ALERTS,
    alert_expressions,
    alert_rules,
    catalog_sample_names,
    dashboard,
    dashboard_expressions,
    panels,
    series_names,
    substitute,
)
from support.require import skip_or_fail

REPO = Path(__file__).resolve().parents[2]
RULE_TESTS = REPO / "tests" / "data" / "prometheus" / "soak-alerts.test.yml"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Series a panel reads that soak does not export: the server's own, when the same Prometheus scrapes it.
SERVER_SERIES = {"vllm:num_requests_waiting", "vllm:num_requests_running"}
VARIABLES = {"datasource": "prom", "run_id": "r", "replica": ".*", "target": "t:1", "__rate_interval": "30s",
             "__interval": "15s", "__range": "1h"}


def test_the_dashboard_is_a_grafana_model_with_a_prometheus_picker_and_a_run_picker():
    model = dashboard()
    assert 36 <= model["schemaVersion"] <= 41 and model["uid"] and model["title"]
    variables = {variable["name"]: variable for variable in model["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    run_id = variables["run_id"]
    assert run_id["type"] == "query" and run_id["datasource"] == DATASOURCE
    assert run_id["query"]["query"] == run_id["definition"] == "label_values(soak_run_info, run_id)"
    replica = variables["replica"]
    # Outside a fleet the replica label is "" (no label in Prometheus): "All" must match its absence too.
    assert replica["definition"].startswith("label_values(soak_run_info") and replica["allValue"] == ".*"
    assert replica["includeAll"]


def test_every_panel_queries_the_chosen_prometheus_and_sits_on_the_grid():
    model = dashboard()
    ids = [panel["id"] for panel in model["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels(model):
        where = panel["title"]
        assert panel["datasource"] == DATASOURCE, where
        assert panel["targets"], where
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE and target["expr"].strip() and target["refId"], where
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, where


def test_every_expression_reads_only_series_soak_exports_or_the_servers_own():
    known = catalog_sample_names()
    for expression in dashboard_expressions() + alert_expressions():
        names = series_names(expression.expr)
        assert names, expression  # the parser found what it selects
        assert names <= known | SERVER_SERIES, (expression.where, names - known - SERVER_SERIES)
        substitute(expression.expr, VARIABLES)  # every variable it uses is one the dashboard defines


def test_the_dashboard_draws_what_the_issue_asks_for():
    names = set().union(*(series_names(e.expr) for e in dashboard_expressions()))
    for wanted in ("gen_ai_client_operation_time_to_first_chunk_seconds_bucket",
                   "gen_ai_client_operation_time_per_output_chunk_seconds_bucket",
                   "gen_ai_client_operation_duration_seconds_bucket", "soak_request_time_per_output_token_seconds_bucket",
                   "soak_server_requests_running", "soak_server_requests_waiting", "soak_server_kv_cache_usage_ratio",
                   "vllm:num_requests_waiting", "soak_server_process_resident_memory_bytes",
                   "soak_server_process_swap_bytes", "soak_requests_within_slo_total", "soak_request_errors_total",
                   "soak_requests_offered_total", "soak_requests_sent_total", "soak_schedule_lag_seconds_bucket",
                   "soak_requests_in_flight", "soak_client_cpu_seconds_total", "soak_client_resident_memory_bytes",
                   "soak_check_verdict"):
        assert wanted in names, wanted
    lamps = next(p for p in panels(dashboard()) if "soak_check_verdict" in p["targets"][0]["expr"])
    assert lamps["type"] == "stat"
    mapped = lamps["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert {key: value["text"] for key, value in mapped.items()} == {
        "-1": "SKIPPED", "0": "PASS", "1": "INCONCLUSIVE", "2": "SUSPECT", "3": "FAIL", "4": "INVALID"}
    assert mapped["3"]["color"] == "red" and mapped["0"]["color"] == "green"


def test_every_alert_names_its_run_and_says_how_bad():
    rules = alert_rules()
    assert {rule["alert"] for rule in rules} >= {"SoakCheckFailed", "SoakClientLate", "SoakErrorBudgetBurn",
                                                  "SoakRunHeartbeatStale"}
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        for text in (rule["annotations"]["summary"], rule["annotations"]["description"]):
            assert "{{ $labels.run_id }}" in text, rule["alert"]
    failed = next(rule for rule in rules if rule["alert"] == "SoakCheckFailed")
    assert "{{ $labels.check }}" in failed["annotations"]["summary"] and "== 3" in failed["expr"]


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        skip_or_fail("promtool is not installed (Debian: apt-get install prometheus)")
    return found


def test_promtool_accepts_the_rules(promtool):
    checked = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout


def test_the_alerts_fire_on_the_series_they_are_written_for_and_only_there(promtool):
    tested = subprocess.run([promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr
