"""A fleet of three reference servers soaked as one run: the one that leaks and the one whose latency creeps are
named in the fleet's FAIL, the healthy one is not failed, and each replica's evidence is its own. Slow: about two
and a half minutes of compressed model time."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from e2e_helpers import query

from support.prometheus_api import run_scraped

# One worker runs the file's tests one after another: two fleets at once (eight servers and two clients on a
# two-core CI machine) left the creeping replica's rise unproven (SUSPECT) in both.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(400), pytest.mark.xdist_group("fleet")]

READY = re.compile(r"^SOAK_REFSERVER_READY (http://\S+)$")
# 23 windows of 5 s after a 20 s warm-up (the trend tests need 20), 1.5 req/s to each replica: light, so a busy
# test machine leaves the clients on time.
FLEET_RUN = ["start", "--duration", "135s", "--warmup", "20s", "--window", "5s", "--sample-every", "1s",
             "--rate", "4.5", "--scenario", "chat_short", "--no-idle-probes", "--json"]
# ITL twice as slow each model hour (×1.3 → ×3.3 over the judged span): near a straight line in log space (a
# faster creep, 1 → 23× over the run, rose fastest early and was now and then taken for a warm-up). Each engine step
# takes at least 50 ms, as a large model's decode step does, so a busy machine's milliseconds of jitter are not a
# creep (at 2 ms a step, a load that came onto the machine mid-run stepped every replica's ITL up 70 %; at 10 ms,
# CI's busiest minutes left the creep unproven now and then; at 20 ms, two runs starting beside the fleet stepped
# the healthy replica's ITL up 43 %, 25.8 → 36.8 ms, and FAILed it).
REPLICAS = {"healthy": [], "leaky": ["--fault", "rss-leak=1MiB"], "creepy": ["--fault", "latency-creep=100"]}


def start_refserver(stack: ExitStack, faults: list[str]) -> tuple[str, int]:
    """A reference server on an OS-picked port, ended with the test; (URL, PID)."""
    process = subprocess.Popen([sys.executable, "-m", "soak.refserver", "--port", "0", "--time-scale", "60",
                                "--step-time", "50ms", *faults],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stack.callback(process.wait, timeout=15)
    stack.callback(process.terminate)
    match = READY.match(process.stdout.readline().strip())
    assert match, "the reference server did not start"
    return match.group(1), process.pid


@pytest.fixture
def fleet():
    """Three reference servers, one healthy, one leaking 1 MiB a request, one creeping 100 % a model hour."""
    with ExitStack() as stack:
        yield {name: start_refserver(stack, faults) for name, faults in REPLICAS.items()}


def test_a_fleet_names_the_replicas_that_leak_and_creep(tmp_path, soak_cli, fleet):
    targets = [arg for name, (url, _) in fleet.items() for arg in ("--target", f"{name}={url}")]
    result = soak_cli(*FLEET_RUN, *targets, "--out", str(tmp_path), timeout_s=360)
    assert result.returncode == 1, result.stderr[-4000:]
    summary = json.loads(result.stdout)
    replicas = {replica["name"]: replica for replica in summary["replicas"]}
    assert summary["schema"] == "soak.fleet.summary/1" and summary["verdict"] == "FAIL"
    assert "replica leaky: " in summary["verdict_reason"] and replicas["leaky"]["verdict"] == "FAIL", replicas
    # The creep FAILs; on a machine busy enough to blur a doubling of ITL into its own jitter it stays SUSPECT (the
    # rise estimated, not proven), never PASS, and a FAIL is named in the fleet's reason.
    creepy = json.loads((Path(replicas["creepy"]["report_html"]).parent / "summary.json").read_text())
    itl = next(f for f in creepy["findings"] if f["check"] == "creep.itl_p99")
    assert itl["verdict"] in ("FAIL", "SUSPECT") and replicas["creepy"]["verdict"] in ("FAIL", "SUSPECT"), itl
    assert (replicas["creepy"]["verdict"] == "FAIL") == ("replica creepy: " in summary["verdict_reason"])
    healthy = json.loads((Path(replicas["healthy"]["report_html"]).parent / "summary.json").read_text())
    assert replicas["healthy"]["verdict"] not in ("FAIL", "INVALID"), replicas["healthy"]
    # short of PASS only for lack of time, or (SUSPECT) a client a busy machine slowed: never for the server
    assert {f["check"] for f in healthy["findings"] if f["verdict"] == "SUSPECT"} <= {"client.saturation"}, healthy
    assert "fleet verdict: FAIL" in result.stderr and "[leaky] " in result.stderr

    leaky = json.loads((Path(replicas["leaky"]["report_html"]).parent / "summary.json").read_text())
    assert {f["check"]: f["verdict"] for f in leaky["findings"]}["leak.rss"] == "FAIL"
    creepy = json.loads((Path(replicas["creepy"]["report_html"]).parent / "summary.json").read_text())
    assert "FAIL" in {f["verdict"] for f in creepy["findings"] if f["check"].startswith("creep.")}
    assert replicas["creepy"]["e2e_p99_ms"] > replicas["healthy"]["e2e_p99_ms"]

    # One run per replica, linked to the fleet's row; each sampled its own server, found by its port.
    fleet_id = summary["fleet_id"]
    rows = query(tmp_path, f"select replica, id from runs where fleet_id = '{fleet_id}'")
    assert sorted(name for name, _ in rows) == sorted(REPLICAS)
    for name, run_id in rows:
        [(pids,)] = query(tmp_path, f"select group_concat(distinct pid) from process_samples where run_id = "
                                     f"'{run_id}' and role = 'server'")
        assert pids == str(fleet[name][1]), (name, pids)
    [(kind, verdict)] = query(tmp_path, f"select target_kind, verdict from runs where id = '{fleet_id}'")
    assert (kind, verdict) == ("fleet", "FAIL")
    fleet_page = Path(summary["report_html"]).read_text()
    assert all(f'id="replica-{name}"' in fleet_page for name in REPLICAS)
    _charts_drawn_offline(Path(summary["report_html"]), expected=2 * len(REPLICAS))

    again = soak_cli("report", fleet_id, "--out", str(tmp_path), "--json", timeout_s=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["verdict"] == "FAIL"
    listed = json.loads(soak_cli("runs", "--out", str(tmp_path), "--json").stdout)
    assert sorted(r["replica"] for r in listed if r["fleet_id"] == fleet_id) == sorted(REPLICAS)


# Long enough past the warm-up that the killed replica's health watch pauses its arrivals before the end.
KILL_RUN = ["start", "--duration", "60s", "--warmup", "10s", "--window", "5s", "--sample-every", "1s",
            "--rate", "3", "--scenario", "chat_short", "--no-idle-probes", "--json"]


def test_a_replica_killed_mid_run_is_a_crash_on_that_replica_only(tmp_path):
    with ExitStack() as stack:
        servers = {name: start_refserver(stack, []) for name in ("steady", "killed")}
        targets = [arg for name, (url, _) in servers.items() for arg in ("--target", f"{name}={url}")]
        fleet = subprocess.Popen([sys.executable, "-m", "soak", *KILL_RUN, *targets, "--out", str(tmp_path)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _until_warmed_up(tmp_path, "killed", timeout_s=120)
            os.kill(servers["killed"][1], signal.SIGKILL)  # a server we started, by its PID
            stdout, stderr = fleet.communicate(timeout=240)
        finally:
            if fleet.poll() is None:
                fleet.kill()
    assert fleet.returncode == 1, stderr[-4000:]
    replicas = {replica["name"]: replica for replica in json.loads(stdout)["replicas"]}
    killed, steady = (_findings(replicas[name]) for name in ("killed", "steady"))
    assert killed["crashes"]["verdict"] == "FAIL" and "ended" in killed["crashes"]["evidence"], killed["crashes"]
    assert str(servers["killed"][1]) in killed["crashes"]["evidence"]
    assert steady["crashes"]["verdict"] == "PASS", steady["crashes"]
    assert "replica killed: " in json.loads(stdout)["verdict_reason"]


def _charts_drawn_offline(page: Path, expected: int) -> None:
    """The fleet page in headless Chromium: each replica's two small charts drawn, nothing fetched, no error."""
    from integration.report.browser import browser_or_skip, load_report, network_requests, start_browser

    driver = start_browser(*browser_or_skip())
    try:
        url = load_report(driver, page)
        assert driver.execute_script("return document.body.getAttribute('data-charts-rendered')") == str(expected)
        assert driver.execute_script("return document.querySelectorAll('div.plot .main-svg').length") >= expected
        assert [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")] == []
        assert network_requests(driver, url) == []
    finally:
        driver.quit()


def start_router(stack: ExitStack, upstreams: list[str]) -> str:
    """The test's own router in front of `upstreams`, ended with the test; its URL."""
    router = Path(__file__).parents[1] / "support" / "tiny_router.py"
    process = subprocess.Popen([sys.executable, str(router), *upstreams], stdout=subprocess.PIPE, text=True)
    stack.callback(process.wait, timeout=15)
    stack.callback(process.terminate)
    line = process.stdout.readline().split()
    assert line and line[0] == "TINY_ROUTER_READY", "the router did not start"
    return line[1]


def test_behind_a_router_the_leaking_replica_is_named_and_the_creep_is_the_routers(tmp_path, soak_cli, fleet):
    with ExitStack() as stack:
        router = start_router(stack, [url for url, _ in fleet.values()])
        targets = [arg for name, (url, _) in fleet.items() for arg in ("--target", f"{name}={url}")]
        result = soak_cli(*FLEET_RUN, "--router", router, *targets, "--out", str(tmp_path), timeout_s=360)
    assert result.returncode == 1, result.stderr[-4000:]
    summary = json.loads(result.stdout)
    members = {member["name"]: member for member in summary["replicas"]}
    assert [m["role"] for m in summary["replicas"]] == ["router", "observed", "observed", "observed"]
    # every request went through the router: the replicas' runs sent none and judged their servers only
    assert members["router"]["requests"] > 100 and all(members[name]["requests"] == 0 for name in REPLICAS)
    leaky, healthy = _findings(members["leaky"]), _findings(members["healthy"])
    assert leaky["leak.rss"]["verdict"] == "FAIL" and members["leaky"]["verdict"] == "FAIL"
    assert "replica leaky: " in summary["verdict_reason"]
    assert healthy["creep.e2e_p99"]["verdict"] == "SKIPPED" and "router" in healthy["creep.e2e_p99"]["evidence"]
    assert members["healthy"]["verdict"] not in ("FAIL", "INVALID"), members["healthy"]
    # Which replica gave an answer is the router's secret, but each replica's /metrics says how long its own tokens
    # took: the creeping one is named from that, the healthy one is not.
    # (The fleet test without a router holds the creeping replica's FAIL; here three replicas and a router share
    # two cores with the runs beside them, and a replica's own ITL windows may leave the creep unproven: never a
    # PASS, though.)
    server_itl = _findings(members["creepy"])["creep.server_itl"]
    assert server_itl["verdict"] in ("FAIL", "SUSPECT", "INCONCLUSIVE"), server_itl
    assert server_itl["verdict"] != "FAIL" or "replica creepy: " in summary["verdict_reason"]
    assert healthy["creep.server_itl"]["verdict"] in ("PASS", "INCONCLUSIVE"), healthy["creep.server_itl"]
    # A third of the answers creep 100 % an hour: the router's run, which timed them all, may not sign the latency
    # off either: a FAIL; a SUSPECT (a rise fitted over the threshold that a busy machine's autocorrelated windows
    # leave unproven, which by the earned-PASS rule signs nothing off); or, on a short busy run, the warm-up found in
    # the data leaving too few windows (it says how much longer to run).
    creep = {check: f for check, f in _findings(members["router"]).items() if check.startswith("creep.")}
    assert {"FAIL", "SUSPECT"} & {f["verdict"] for f in creep.values()} or \
        "settled only at" in creep["creep.itl_p99"]["evidence"], creep
    assert members["router"]["verdict"] != "PASS" and summary["verdict"] == "FAIL"


def _until_warmed_up(out: Path, replica: str, timeout_s: float) -> None:
    """Wait until the replica's run has ended its warm-up (its load is under way)."""
    deadline = time.monotonic() + timeout_s
    sql = ("select count(*) from events e join runs r on e.run_id = r.id "
           f"where r.replica = '{replica}' and e.kind = 'warmup_end'")
    while not _rows_or_none(out, sql):
        assert time.monotonic() < deadline, f"replica {replica} never ended its warm-up"
        time.sleep(0.25)


def _rows_or_none(out: Path, sql: str) -> int:
    try:
        return query(out, sql)[0][0]
    except Exception:  # noqa: BLE001 - the database or its schema is not there yet
        return 0


def _findings(replica: dict) -> dict[str, dict]:
    summary = json.loads((Path(replica["report_html"]).parent / "summary.json").read_text())
    return {finding["check"]: finding for finding in summary["findings"]}


def test_a_fleets_one_metrics_page_has_every_replica(tmp_path):
    """`--metrics-bind` on a fleet: one page, each replica's series under its own `replica` label, read while the
    replicas run (each serves its own page on loopback; the fleet's gathers them at each scrape), to the end: each
    replica's page stays until a scrape has read its final verdicts."""
    with ExitStack() as stack:
        servers = {name: start_refserver(stack, []) for name in ("one", "two")}
        targets = [arg for name, (url, _) in servers.items() for arg in ("--target", f"{name}={url}")]
        run = run_scraped([*KILL_RUN, *targets, "--out", str(tmp_path)])
    assert run.returncode in (0, 1, 3), run.stderr[-4000:]  # a verdict, whichever: a minute judges little
    stdout, last = run.stdout, run.last
    replicas = {replica["name"]: replica for replica in json.loads(stdout)["replicas"]}
    assert {name: seen["run_id"] for name, seen in last.items()} == {n: r["run_id"] for n, r in replicas.items()}
    for name, seen in last.items():
        assert seen["finished"] == 1.0 and seen["requests"] > 0, (name, seen)
        assert seen["verdicts"], (name, seen)  # the final verdicts, one gauge per check
