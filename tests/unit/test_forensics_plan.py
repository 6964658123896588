"""When a forensics window opens, for how long, over which processes — and what the checks then leave out."""

from __future__ import annotations

import pytest

from soak.analysis.early_stop import growing_pids
from soak.analysis.findings import FAIL, PASS, SUSPECT, Finding, ProcessGrowth
from soak.analysis.inputs import ProbeReading
from soak.analysis.loader import INTERVAL_KINDS, _intervals, build_windows, outside
from soak.config import resolve_config
from soak.contracts import Event
from soak.errors import ConfigError
from soak.run.forensics import ForensicsWatch, WindowRequest, choose_processes
from soak.samples import ProcessStats
from soak.store.records import StoredRun

API = ProcessStats(pid=100, name="vllm", rss_bytes=800, ppid=1)
ENGINE = ProcessStats(pid=101, name="VLLM::EngineCore", rss_bytes=2000, ppid=100)
HELPER = ProcessStats(pid=102, name="python3.11", rss_bytes=300, ppid=100)
TREE = [API, ENGINE, HELPER, ProcessStats(pid=0, name="server (from /metrics)", rss_bytes=9)]


def chosen(process: str, suspects: tuple[int, ...] = ()) -> list[tuple[int, str]]:
    request = WindowRequest(60.0, process, "test", suspects)
    return [(p.pid, p.role) for p in choose_processes(request, TREE, roots=[100])]


def test_engine_means_the_growing_process_else_the_engine_core():
    assert chosen("engine", suspects=(100,)) == [(100, "api")]
    assert chosen("engine") == [(101, "engine")]
    assert chosen("api") == [(100, "api")]
    assert chosen("all") == [(101, "engine"), (100, "api"), (102, "process")]  # largest first; never the /metrics row
    assert chosen("102") == [(102, "process")]


def test_without_an_engine_the_largest_process_is_watched():
    request = WindowRequest(60.0, "engine", "test")
    assert [p.pid for p in choose_processes(request, [API, HELPER], roots=[100])] == [100]


def growth(pid: int, verdict: str, value: float) -> ProcessGrowth:
    return ProcessGrowth(verdict=verdict, value=value, ci=None, detection_limit=None, mk_p=0.5, points=30, step=None,
                         net_growth=None, warmup=None, pid=pid, name="p", unit="bytes/h", floor=None, trend=None)


def test_a_look_names_the_processes_leak_rss_found_growing():
    both = [growth(100, PASS, 1.0), growth(101, FAIL, 9.0), growth(0, FAIL, 99.0)]
    assert growing_pids(Finding("leak.rss", FAIL, per_process=both)) == (101,)
    total_only = [growth(100, PASS, 1.0), growth(101, PASS, 5.0)]  # seen in the tree total alone: the fastest
    assert growing_pids(Finding("leak.rss", SUSPECT, per_process=total_only)) == (101,)
    assert growing_pids(Finding("leak.rss", PASS, per_process=both)) == ()
    assert growing_pids(None) == ()


def watch(duration: str, **flags) -> ForensicsWatch:
    config = resolve_config({"duration": duration, "warmup": "60s", **flags}, environ={})
    return ForensicsWatch(config, "run", None, None, 0.0, processes=lambda: TREE, roots=lambda: [100])


def test_the_end_window_is_kept_only_on_a_run_four_times_as_long():
    long = watch("24h")
    assert long.end_window_s == 24 * 3600 - 600 - 5
    assert "the last 10m of the run are kept" in long.describe() and "SUSPECT or FAIL" in long.describe()
    short = watch("30m")
    assert short.end_window_s is None and "too short to keep a 10m window" in short.describe()
    assert watch("30m", forensics_for="5m").end_window_s == 30 * 60 - 300 - 5
    assert watch("24h", forensics="off").describe() is None
    assert "whatever leak.rss says" in watch("24h", forensics="always").describe()


def test_a_window_opened_mid_run_takes_at_most_a_quarter_of_the_run_so_far_and_ends_before_the_plan():
    plan = watch("1h")
    request = WindowRequest(600.0, "engine", "leak.rss was FAIL at an early-stop look")
    assert plan._fitted(request, elapsed_s=460.0).for_s == 100.0  # (460 − 60) / 4
    assert plan._fitted(request, elapsed_s=3500.0).for_s == 95.0  # 3600 − 3500 − 5
    assert plan._fitted(request, elapsed_s=90.0) is None  # 7.5 s: too short to show anything


def test_a_bad_forensics_setting_is_one_clear_line():
    with pytest.raises(ConfigError, match="forensics-process.*engine, api, all or a PID"):
        resolve_config({"duration": "1h", "forensics_process": "gpu"}, environ={})
    with pytest.raises(ConfigError, match="forensics"):
        resolve_config({"duration": "1h", "forensics": "sometimes"}, environ={})


def test_windows_a_forensics_window_overlaps_are_left_out_and_so_are_its_probe_readings():
    run = StoredRun(id="r", status="completed", started_at="", t0_epoch_s=0.0, planned_duration_s=100.0,
                    warmup_s=10.0, window_s=10.0, out_dir="", target_kind="reference", duration_s=100.0)
    events = [Event(42.0, "forensics_start"), Event(61.0, "forensics_end")]
    excluded = {w.index: w.excluded for w in build_windows(run, 100.0, events)}
    assert [i for i, why in excluded.items() if why == "forensics"] == [3, 4, 5]
    spans = _intervals(events, *INTERVAL_KINDS["forensics"], 100.0)
    probes = tuple(ProbeReading(t_s=t_s, kv_usage=None, running=None, waiting=None) for t_s in (30.0, 50.0, 70.0))
    assert [p.t_s for p in outside(probes, spans)] == [30.0, 70.0]


def test_soak_forensics_refuses_a_window_of_no_length_and_a_run_that_is_not_there(tmp_path):
    from click.testing import CliRunner

    from soak.cli import main

    none = CliRunner().invoke(main, ["forensics", "r", "--for", "0s", "--out", str(tmp_path)])
    assert none.exit_code == 2 and "a window must last more than 0 s" in none.output
    missing = CliRunner().invoke(main, ["forensics", "r", "--out", str(tmp_path)])
    assert missing.exit_code == 2 and "no database at" in missing.output
