"""Fleets: parsing the targets, splitting the load by weight, the median/MAD outlier rule and the fleet verdict."""

from __future__ import annotations

import pytest

from soak.analysis.fleet import FleetMetric, fleet_outliers
from soak.config import ReplicaSpec, parse_targets_file, resolve_config
from soak.contracts import ReplicaOutcome, Verdict
from soak.errors import ConfigError
from soak.run.fleet import plan_fleet
from soak.run.fleet_summary import fleet_verdict, mark_outliers

P99 = FleetMetric("P99 TTFT", "ms", relative_floor=0.1, absolute_floor=1.0)


def fleet_config(*targets: str, **flags):
    return resolve_config({"duration": "10m", "target": list(targets), **flags}, environ={})


# -- the targets ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, name, url, weight", [
    ("http://h:8000", None, "http://h:8000", 1.0),
    ("gpu-0=http://h:8000/v1", "gpu-0", "http://h:8000", 1.0),
    ("gpu-1=https://h:8001/ 2.5", "gpu-1", "https://h:8001", 2.5),
    ("http://h:8000?a=b 0.5", None, "http://h:8000?a=b", 0.5),
    ("g=http://h:8000?a=b", "g", "http://h:8000?a=b", 1.0),
])
def test_a_target_is_an_optional_name_a_url_and_an_optional_weight(text, name, url, weight):
    assert ReplicaSpec.parse(text) == ReplicaSpec(name=name, url=url, weight=weight)


@pytest.mark.parametrize("text, message", [
    ("http://h:1 0", "the weight '0' must be a positive number"),
    ("http://h:1 x", "the weight 'x' must be a positive number"),
    ("http://h:1 inf", "the weight 'inf' must be a positive number"),
    ("h:8000", "must start with http:// or https://"),
    ("bad name=http://h:1", "target URL 'bad' must start with http://"),
    ("http://h:1 2 3", "is not [NAME=]URL [WEIGHT]"),
    ("-x=http://h:1", "replica name '-x' must be"),
])
def test_a_bad_target_says_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]").replace("?", r"\?")):
        ReplicaSpec.parse(text)


def test_one_target_is_a_plain_run_and_several_a_fleet():
    single = fleet_config("http://h:1/v1")
    assert single.target.url == "http://h:1" and not single.target.is_fleet and single.target.kind == "external"
    fleet = fleet_config("http://h:1", "http://h:2")
    assert fleet.target.url is None and fleet.target.is_fleet and fleet.target.kind == "external"


def test_a_replica_names_its_gpus_and_its_run_reads_only_those():
    config = resolve_config({"duration": "10m", "target": ["a=http://h:1"], "metrics_url": ["http://dcgm:9400/metrics"],
                             "replica": ["b=http://h:2,GPU-1,GPU-2 3", "c=http://h:3,GPU-9"]}, environ={})
    assert [(r.name, r.gpus, r.weight) for r in config.target.all_replicas] == [
        ("a", (), 1.0), ("b", ("GPU-1", "GPU-2"), 3.0), ("c", ("GPU-9",), 1.0)]
    plan = plan_fleet(config, fleet_id="F3")
    assert [c.target.gpus for _, c in plan.replicas] == [(), ("GPU-1", "GPU-2"), ("GPU-9",)]
    assert all(c.target.metrics_urls == ("http://dcgm:9400/metrics",) for _, c in plan.replicas)
    from_env = resolve_config({"duration": "10m"}, environ={"SOAK_REPLICA": "b=http://h:2,GPU-1;c=http://h:3,GPU-9"})
    assert [r.gpus for r in from_env.target.all_replicas] == [("GPU-1",), ("GPU-9",)]


@pytest.mark.parametrize("text", ["http://h:1,GPU-1", "b=http://h:2", "b=http://h:2, "])
def test_a_replica_without_a_name_or_a_gpu_is_one_config_error(text):
    with pytest.raises(ConfigError, match="is not NAME=URL,GPU_UUID"):
        resolve_config({"duration": "10m", "replica": [text]}, environ={})


@pytest.mark.parametrize("targets, flags, message", [
    (("a=http://h:1", "a=http://h:2"), {}, "two targets have the same name 'a'"),
    (("http://h:1", "b=http://h:1"), {}, "two targets have the same url 'http://h:1'"),
    (("http://h:1", "http://h:2"), {"model": "tiny"}, "cannot be combined with --model"),
])
def test_a_fleet_that_cannot_be_is_one_config_error(targets, flags, message):
    with pytest.raises(ConfigError, match=message):
        fleet_config(*targets, **flags)


def test_a_targets_file_has_one_target_a_line_and_comments(tmp_path):
    path = tmp_path / "fleet.txt"
    path.write_text("# the fleet\ngpu-0=http://h:1 2  # the big one\n\n  http://h:2\n", encoding="utf-8")
    assert parse_targets_file(path) == [ReplicaSpec(name="gpu-0", url="http://h:1", weight=2.0),
                                        ReplicaSpec(url="http://h:2")]


@pytest.mark.parametrize("text, message", [
    ("http://h:1\nhttp://h:2 -3\n", "line 2: target 'http://h:2 -3': the weight '-3' must be a positive number"),
    ("# nothing\n", "names no target"),
])
def test_a_bad_targets_file_names_its_line(tmp_path, text, message):
    path = tmp_path / "fleet.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        parse_targets_file(path)


def test_a_missing_targets_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the targets file"):
        plan_fleet(fleet_config(targets_file=str(tmp_path / "none.txt")))


# -- the plan ------------------------------------------------------------------------------------------------
def test_the_load_is_split_by_weight_and_each_replica_has_its_own_seed(tmp_path):
    targets = tmp_path / "more.txt"
    targets.write_text("http://h:3 2\n", encoding="utf-8")
    config = fleet_config("gpu-0=http://h:1", "http://h:2", rate="8", max_concurrency="8", seed="5",
                          phase=["ramp to_rate_rps=4 duration_s=1m"], targets_file=str(targets), out=str(tmp_path))
    plan = plan_fleet(config, fleet_id="F1")
    names = [spec.name for spec, _ in plan.replicas]
    assert names == ["gpu-0", "replica-2", "replica-3"]
    rates = [c.load.rate_rps for _, c in plan.replicas]
    assert rates == pytest.approx([2.0, 2.0, 4.0]) and sum(rates) == pytest.approx(8.0)
    assert [c.load.phases[0].to_rate_rps for _, c in plan.replicas] == pytest.approx([1.0, 1.0, 2.0])
    assert [c.load.max_concurrency for _, c in plan.replicas] == [2, 2, 4]
    assert len({c.load.seed for _, c in plan.replicas}) == 3
    for spec, replica in plan.replicas:
        assert replica.target.url == spec.url and not replica.target.is_fleet
        assert (replica.fleet_id, replica.replica, replica.out_dir) == ("F1", spec.name, tmp_path / "F1")
    assert plan.config.target.replicas == tuple(spec for spec, _ in plan.replicas)  # stored named, file read


def test_a_replica_config_survives_the_trip_to_its_process():
    from soak.config import RunConfig

    _, replica = plan_fleet(fleet_config("http://h:1", "http://h:2", slo="ttft=500ms")).replicas[1]
    assert RunConfig.model_validate_json(replica.model_dump_json()) == replica


@pytest.mark.parametrize("flags, named", [({"web": "true"}, "--web"), ({"workers": "2"}, "--workers"),
                                          ({"server_pid": ["12"]}, "--server-pid"), ({"baseline": "R"}, "--baseline")])
def test_what_a_fleet_cannot_do_yet_is_refused_before_anything_starts(flags, named):
    with pytest.raises(ConfigError, match=f"{named}.* cannot be combined with several targets"):
        plan_fleet(fleet_config("http://h:1", "http://h:2", **flags))


def test_behind_a_router_the_router_run_carries_all_the_load_and_the_replicas_are_only_observed(tmp_path):
    config = fleet_config("a=http://h:1", "b=http://h:2 3", router="http://r:9/v1", rate="6", out=str(tmp_path))
    assert config.target.is_fleet and config.target.router == "http://r:9"
    plan = plan_fleet(config, fleet_id="F2")
    assert [(spec.name, spec.url) for spec, _ in plan.replicas] == [("router", "http://r:9"), ("a", "http://h:1"),
                                                                    ("b", "http://h:2")]
    (_, router), *observed = plan.replicas
    assert router.target.url == "http://r:9" and router.load.rate_rps == 6.0 and not router.observe_only
    assert all(c.observe_only and not c.target.is_fleet and c.target.router is None for _, c in observed)
    assert plan.config.target.members()[0].name == "router"


@pytest.mark.parametrize("targets, message", [
    ((), "--router needs the replicas behind it"),
])
def test_a_router_without_replicas_is_one_config_error(targets, message):
    with pytest.raises(ConfigError, match=message):
        plan_fleet(fleet_config(*targets, router="http://r:9"))


@pytest.mark.parametrize("targets, flags, message", [
    (("router=http://h:1",), {}, "cannot be named 'router'"),
    (("a=http://r:9",), {}, "--router http://r:9 is also given as a replica"),
    (("a=http://h:1",), {"lora": ["x=/tmp/x"]}, "--lora cannot be combined with --router"),
])
def test_what_a_router_fleet_cannot_be_is_refused_before_anything_starts(targets, flags, message):
    with pytest.raises(ConfigError, match=message):
        plan_fleet(fleet_config(*targets, router="http://r:9", **flags))


def test_an_observed_replica_is_judged_on_its_server_alone():
    from soak.analysis.checks import LOAD_CHECKS, analyse
    from soak.analysis.gates import Gates
    from soak.analysis.inputs import RunData
    from soak.analysis.verdict import required_checks

    findings = analyse(RunData(planned_duration_s=600, actual_duration_s=600, warmup_s=30, window_s=10, windows=(),
                               observe_only=True))
    by_check = {f.check: f for f in findings}
    assert all(by_check[name].verdict == Verdict.SKIPPED and "router" in by_check[name].evidence
               for name in LOAD_CHECKS)
    required = required_checks(findings, Gates())
    assert required and not set(required) & set(LOAD_CHECKS) and "leak.rss" in required


def test_the_router_is_never_compared_with_its_replicas():
    outcomes = [outcome("router", Verdict.PASS, ttft=5000.0, role="router")]
    outcomes += [outcome(name, Verdict.PASS, ttft=ttft, role="observed") for name, ttft in zip("abc", (300, 310, 305))]
    assert all(not o.outliers for o in mark_outliers(outcomes, [(P99, "ttft_p99_ms")]))
    verdict, reason = fleet_verdict([outcome("router", Verdict.FAIL, "creep", role="router"),
                                     outcome("a", Verdict.PASS, role="observed")])
    assert verdict == Verdict.FAIL and reason == "1 of 2 replicas FAIL: router: creep"


# -- the outlier rule ----------------------------------------------------------------------------------------
def test_a_replica_far_above_its_peers_is_an_outlier():
    [outlier] = fleet_outliers({"a": 300.0, "b": 310.0, "c": 900.0}, P99)
    assert outlier.replica == "c" and outlier.median == 310.0
    assert outlier.robust_z == pytest.approx((900 - 310) / max(1.4826 * 10, 31.0))
    assert "P99 TTFT 900 ms against a median of 310 ms" in outlier.describe()


def test_peers_within_the_floor_are_not_outliers():
    # MAD is 0 (two alike): the floor, a tenth of the median, keeps 1.3 × the median from counting.
    assert fleet_outliers({"a": 300.0, "b": 300.0, "c": 390.0}, P99) == []
    assert [o.replica for o in fleet_outliers({"a": 300.0, "b": 300.0, "c": 420.0}, P99)] == ["c"]


def test_lower_is_never_an_outlier_and_two_replicas_have_no_majority():
    assert fleet_outliers({"a": 300.0, "b": 310.0, "c": 10.0}, P99) == []
    assert fleet_outliers({"a": 300.0, "b": 3000.0}, P99) == []
    assert fleet_outliers({"a": 300.0, "b": 310.0, "c": None}, P99) == []


def test_the_rule_is_robust_to_a_second_odd_replica_among_many():
    values = {f"r{n}": 100.0 + n for n in range(6)} | {"slow": 400.0, "slower": 900.0}
    assert {o.replica for o in fleet_outliers(values, P99)} == {"slow", "slower"}


def test_no_spread_and_no_floor_flags_nothing():
    assert fleet_outliers({"a": 0.0, "b": 0.0, "c": 0.0}, FleetMetric("leak.rss slope", "MiB/h")) == []


# -- the fleet's verdict -------------------------------------------------------------------------------------
def outcome(name: str, verdict: Verdict, reason: str = "why", ttft: float | None = 300.0, **fields) -> ReplicaOutcome:
    values = {"name": name, "url": f"http://{name}:1", "weight": 1.0, "run_id": f"R-{name}", "status": "completed",
              "verdict": verdict, "verdict_reason": reason, "leak_slope": 0.0, "leak_unit": "MiB/h",
              "ttft_p99_ms": ttft, "e2e_p99_ms": 900.0, "latency_samples": 500, "requests": 500, "errors": 0,
              "report_html": f"/r/{name}/report.html"}
    return ReplicaOutcome(**(values | fields))


def test_the_fleet_takes_the_worst_verdict_and_names_every_replica_with_it():
    verdict, reason = fleet_verdict([outcome("a", Verdict.PASS), outcome("b", Verdict.FAIL, "leak.rss FAIL — grows"),
                                     outcome("c", Verdict.INVALID), outcome("d", Verdict.FAIL, "crashes FAIL")])
    assert verdict == Verdict.FAIL
    assert reason == "2 of 4 replicas FAIL: replica b: leak.rss FAIL — grows; replica d: crashes FAIL"
    assert fleet_verdict([outcome("a", Verdict.PASS), outcome("b", Verdict.PASS)]) == (Verdict.PASS,
                                                                                       "all 2 replicas PASS")


def test_an_outlier_makes_a_pass_suspect_and_leaves_a_fail_alone():
    marked = mark_outliers([outcome("a", Verdict.PASS), outcome("b", Verdict.PASS, ttft=310.0),
                            outcome("e", Verdict.PASS, ttft=305.0), outcome("c", Verdict.PASS, ttft=2000.0),
                            outcome("d", Verdict.FAIL, ttft=2500.0)],
                           [(P99, "ttft_p99_ms")])
    by_name = {o.name: o for o in marked}
    assert by_name["c"].verdict == Verdict.SUSPECT and by_name["c"].verdict_reason.startswith("an outlier among")
    assert by_name["d"].verdict == Verdict.FAIL and by_name["d"].outliers[0].metric == "P99 TTFT"
    assert by_name["a"].verdict == Verdict.PASS and not by_name["a"].outliers


def test_p99s_of_few_requests_are_not_compared():
    marked = mark_outliers([outcome("a", Verdict.PASS), outcome("b", Verdict.PASS),
                            outcome("c", Verdict.PASS, ttft=2000.0, latency_samples=40)], [(P99, "ttft_p99_ms")])
    assert [o.verdict for o in marked] == [Verdict.PASS] * 3


@pytest.mark.parametrize("args, message", [
    (["--target", "a=http://127.0.0.1:1", "--target", "a=http://127.0.0.1:2"], "two targets have the same name 'a'"),
    (["--target", "http://127.0.0.1:1", "--target", "http://127.0.0.1:2 -1"], "must be a positive number"),
    (["--target", "http://127.0.0.1:1", "--target", "http://127.0.0.1:2", "--web"], "--web cannot be combined"),
])
def test_a_bad_fleet_on_the_command_line_is_one_line_and_exit_2(soak_cli, tmp_path, args, message):
    result = soak_cli("start", "--duration", "1m", "--out", str(tmp_path), *args, timeout_s=60)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("soak: error: ") and message in line
    assert not (tmp_path / "soak.db").exists()


# -- the fleet's summary and report, from a real database -----------------------------------------------------
def store_fleet(tmp_path, replicas: dict[str, tuple[str, float, float]]):
    """A SQLite store holding fleet F (replicas a, b, c, d) and a run for each replica in `replicas`:
    name → (verdict, leak.rss slope, P99 TTFT)."""
    from soak.run.environment import dumps
    from soak.store import Store
    from soak.store.models import Run
    from support.records import run_summary

    store = Store.open(f"sqlite:///{tmp_path / 'soak.db'}")
    plan = plan_fleet(fleet_config(*(f"{n}=http://{n}:1" for n in "abcd"), out=str(tmp_path)), fleet_id="F")
    row = {"status": "completed", "started_at": "2026-01-01T00:00:00+00:00", "t0_epoch_s": 0.0,
           "planned_duration_s": 600.0, "warmup_s": 30.0, "window_s": 10.0, "environment_json": "{}"}
    ttft = {"p50": 100.0, "p95": 200.0, "count": 600}
    with store.writing() as session:
        session.add(Run(id="F", target_kind="fleet", out_dir=str(tmp_path / "F"), config_json=plan.config.model_dump_json(),
                        **row))
        for name, (verdict, slope, p99) in replicas.items():
            folder = tmp_path / "F" / f"R-{name}"
            summary = run_summary(run_id=f"R-{name}", verdict=verdict, verdict_reason=f"{name} said so",
                                  report_html=str(folder / "report.html"),
                                  latency_ms={"ttft": ttft | {"p99": p99}, "itl": ttft | {"p99": 1.0},
                                              "e2e": ttft | {"p99": p99 * 3}},
                                  findings=[{"check": "leak.rss", "verdict": verdict, "value": slope,
                                             "unit": "bytes/h", "threshold": 16e6}])
            session.add(Run(id=f"R-{name}", target_kind="external", out_dir=str(folder), config_json="{}",
                            fleet_id="F", replica=name, verdict=verdict, summary_json=dumps(summary.to_json_dict()),
                            **row))
    return store


def test_the_fleet_summary_and_report_come_from_the_replicas_stored_runs(tmp_path):
    import json

    from soak.run.fleet_summary import finalise_fleet

    # c leaks under the threshold but far above its peers; d never opened its run.
    store = store_fleet(tmp_path, {"a": ("PASS", 1e5, 300.0), "b": ("PASS", 2e5, 310.0), "c": ("PASS", 9e6, 305.0)})
    fleet = finalise_fleet(store, "F", {"d": "connection refused"})
    by_name = {r.name: r for r in fleet.replicas}
    assert by_name["c"].verdict == Verdict.SUSPECT and by_name["c"].outliers[0].metric == "leak.rss slope"
    assert by_name["d"].verdict == Verdict.INVALID and by_name["d"].run_id is None
    assert by_name["d"].verdict_reason == "its run never opened: connection refused"
    assert fleet.verdict == Verdict.INVALID and fleet.verdict_reason.startswith("1 of 4 replicas INVALID: replica d:")
    assert [by_name[n].verdict for n in "ab"] == [Verdict.PASS, Verdict.PASS]
    assert json.loads((tmp_path / "F" / "summary.json").read_text())["verdict"] == "INVALID"
    page = (tmp_path / "F" / "report.html").read_text()
    assert 'href="R-c/report.html"' in page and 'id="replica-d"' in page and "outlier: leak.rss slope" in page
    assert store.get_run("F").verdict == "INVALID"
    store.close()


def test_the_fleet_page_draws_each_replica_side_by_side_on_one_scale(tmp_path):
    import json
    import re

    from soak.run.fleet_summary import finalise_fleet
    from soak.store.models import LatencyWindowRow, ProcessSample

    store = store_fleet(tmp_path, {"a": ("PASS", 1e5, 300.0), "b": ("PASS", 2e5, 310.0), "c": ("FAIL", 9e8, 305.0)})
    growth = {"a": 0, "b": 0, "c": 2**20}  # c's engine gains a MiB a sample; a is one process, b and c two
    with store.writing() as session:
        for name, step in growth.items():
            session.add_all(ProcessSample(run_id=f"R-{name}", t_s=float(t), role="server", pid=pid, name="engine",
                                          rss_bytes=500 * 2**20 + step * t)
                            for t in range(60) for pid in ((1,) if name == "a" else (1, 2)))
            session.add_all(LatencyWindowRow(run_id=f"R-{name}", window_index=i, scenario="*", metric="e2e",
                                             start_s=10.0 * i, end_s=10.0 * (i + 1), count=50, p99_ms=900.0 + i)
                            for i in range(6))
    finalise_fleet(store, "F", {"d": "connection refused"})
    page = (tmp_path / "F" / "report.html").read_text()
    charts = json.loads(re.search(r'id="soak-chart-data">(.*?)</script>', page).group(1))
    assert sorted(charts) == sorted(f"fleet-{kind}-{n}" for kind in ("memory", "e2e") for n in "abc")
    assert all(f'id="{chart_id}-plot"' in page for chart_id in charts) and 'id="small-d"' in page
    # one scale for the row: c's peak (two processes, 500 MiB + 59 MiB each) bounds every memory chart
    ranges = {tuple(charts[f"fleet-memory-{n}"]["layout"]["yaxis"]["range"]) for n in "abc"}
    assert len(ranges) == 1 and ranges.pop()[1] == pytest.approx(2 * 559 * 1.05)
    assert max(charts["fleet-memory-c"]["data"][0]["y"]) == pytest.approx(1118.0)
    assert set(charts["fleet-memory-a"]["data"][0]["y"]) == {500.0}
    store.close()


def test_the_live_view_shows_a_fleet_as_its_table_of_replicas(tmp_path):
    from soak.web.pages import LivePages

    store = store_fleet(tmp_path, {"a": ("PASS", 1e5, 300.0), "b": ("FAIL", 9e7, 310.0)})
    page = LivePages(store).run_page("F")
    assert "2 of 4 replicas INVALID" not in page and "1 of 4 replicas FAIL: replica b: b said so" in page
    assert 'href="/runs/R-a"' in page and 'id="replica-c"' in page
    store.close()


def test_a_fleet_none_of_whose_replicas_starts_is_one_line_and_leaves_no_run(soak_cli, tmp_path):
    import socket

    ports = []
    for _ in range(2):  # ports that were free a moment ago: nothing listens there
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    result = soak_cli("start", "--duration", "30s", "--startup-timeout", "3s", "--out", str(tmp_path),
                      *(arg for port in ports for arg in ("--target", f"http://127.0.0.1:{port}")), timeout_s=90)
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"soak: error: no replica of the fleet started; replica replica-1: target "
                           f"http://127.0.0.1:{ports[0]} is unreachable")
    listed = soak_cli("runs", "--out", str(tmp_path), "--json")
    assert listed.returncode == 0 and listed.stdout.strip() == "[]"
