"""leak.rss judges resident + swapped memory: a leak the kernel pushed out to swap leaves RSS flat."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from sqlalchemy.orm import Session

from soak.analysis.findings import FAIL, PASS
from soak.analysis.gates import Gates
from soak.analysis.inputs import ProbeReading, ProcessReading, ProcessSeries
from soak.analysis.loader import load_run_data
from soak.analysis.memory import check_rss
from soak.report.charts import Frame, memory_chart
from soak.store import Store
from soak.store.models import EventRow, ProcessSample, Run
from support.synthetic import MIB, bare_run

RUN_S = 6 * 3600.0
FRAME = Frame(time_unit_s=60.0, time_label="minutes since start", end_s=600.0)


def swapping_process(swap_per_h: float, seed: int = 0) -> ProcessSeries:
    """A server whose resident memory only wanders (its leak is paged out as it is written) while its swap grows
    by `swap_per_h`: the shape reported of llama.cpp's server, RssAnon + VmSwap rising while RSS fell."""
    rng = np.random.default_rng(seed)
    t_s = np.arange(0.0, RUN_S, 10.0)
    rss = 800 * MIB + 0.03 * 800 * MIB * ((t_s / 60.0) % 1.0) + rng.normal(0, 0.8 * MIB, t_s.size)
    swap = swap_per_h * t_s / 3600
    return ProcessSeries(pid=7, name="llama-server", t_s=t_s, rss_bytes=rss, swap_bytes=swap)


def test_held_memory_is_resident_plus_swapped_and_a_missing_swap_reading_is_missing():
    series = ProcessSeries(pid=1, name="x", t_s=[0.0, 1.0, 2.0], rss_bytes=[10.0, 10.0, 9.0],
                           swap_bytes=[0.0, np.nan, 5.0])
    held = series.held_bytes
    assert held[0] == 10.0 and np.isnan(held[1]) and held[2] == 14.0
    assert series.swapped
    never_read = ProcessSeries(pid=1, name="x", t_s=[0.0, 1.0], rss_bytes=[10.0, 11.0])
    assert list(never_read.held_bytes) == [10.0, 11.0] and not never_read.swapped
    assert not ProcessSeries(pid=1, name="x", t_s=[0.0], rss_bytes=[10.0], swap_bytes=[0.0]).swapped
    assert ProcessReading(1, "x", rss_bytes=10.0, swap_bytes=4.0).held_bytes == 14.0
    assert ProcessReading(1, "x", rss_bytes=10.0).held_bytes == 10.0


def test_a_leak_in_swap_fails_leak_rss_where_rss_alone_passes():
    process = swapping_process(200 * MIB)
    finding = check_rss(bare_run(RUN_S, processes=(process,)), Gates())
    assert finding.verdict == FAIL, finding.evidence
    assert finding.value == pytest.approx(200 * MIB, rel=0.05)
    assert finding.evidence.startswith("resident + swapped memory of llama-server (pid 7)"), finding.evidence
    rss_alone = check_rss(bare_run(RUN_S, processes=(replace(process, swap_bytes=None),)), Gates())
    assert rss_alone.verdict == PASS, rss_alone.evidence
    assert rss_alone.evidence.startswith("RSS of llama-server"), rss_alone.evidence


def test_memory_moving_between_ram_and_swap_is_no_leak():
    # Memory pressure pages a steady process out: RSS falls as swap rises by as much, and nothing is held more.
    t_s = np.arange(0.0, RUN_S, 10.0)
    moved = np.clip((t_s - 3600.0) / 7200.0, 0.0, 1.0) * 300 * MIB
    noise = np.random.default_rng(3).normal(0, 0.5 * MIB, t_s.size)
    process = ProcessSeries(pid=7, name="srv", t_s=t_s, rss_bytes=1000 * MIB - moved + noise, swap_bytes=moved)
    finding = check_rss(bare_run(RUN_S, processes=(process,)), Gates())
    assert finding.verdict == PASS, finding.evidence
    assert "resident + swapped" in finding.evidence


def test_idle_probe_readings_are_judged_resident_plus_swapped_too():
    t_probe = np.linspace(1000, RUN_S - 100, 24)
    probes = tuple(ProbeReading(t, 0.0, 0.0, 0.0, True,
                                (ProcessReading(7, "srv", 500 * MIB, swap_bytes=50 * MIB * t / 3600),))
                   for t in t_probe)
    flat = ProcessSeries(pid=7, name="srv", t_s=np.arange(0.0, RUN_S, 10.0), rss_bytes=np.full(2160, 500 * MIB))
    finding = check_rss(bare_run(RUN_S, processes=(flat,), probes=probes, probes_ran=True), Gates())
    assert finding.details["source"] == "idle-probe readings"
    assert finding.verdict == FAIL and "resident + swapped" in finding.evidence, finding.evidence


def test_the_loader_reads_swap_of_samples_and_of_idle_probes(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'soak.db'}")
    samples = [ProcessSample(run_id="r1", t_s=float(t), role="server", pid=7, name="srv", rss_bytes=100 * MIB,
                             swap_bytes=None if t == 2 else t * MIB) for t in range(4)]
    samples.append(ProcessSample(run_id="r1", t_s=0.0, role="server", pid=8, name="old", rss_bytes=50 * MIB))
    probe = {"index": 0, "drained": True, "processes": [{"pid": 7, "name": "srv", "rss_bytes": 100 * MIB,
                                                         "swap_bytes": 3 * MIB, "fds": 9}]}
    with Session(store.engine) as session:
        session.add(Run(id="r1", status="finished", started_at="2026-01-01T00:00:00Z", t0_epoch_s=0.0,
                        planned_duration_s=4.0, duration_s=4.0, warmup_s=0.0, window_s=1.0, out_dir="out",
                        target_kind="reference", config_json="{}", environment_json="{}"))
        session.flush()
        session.add_all([*samples, EventRow(run_id="r1", t_s=3.5, at="2026-01-01T00:00:03Z", kind="probe_reading",
                                            message="", data_json=json.dumps(probe))])
        session.commit()
    run = load_run_data(store, store.get_run("r1"), stopped_early=False)
    srv, old = run.processes
    assert srv.swap_bytes[0] == 0 and srv.swap_bytes[3] == 3 * MIB and np.isnan(srv.swap_bytes[2])
    assert srv.held_bytes[3] == 103 * MIB and old.swap_bytes is None
    assert run.probes[0].processes[0].held_bytes == 103 * MIB and run.swap_seen


def _columns(swap: np.ndarray | None) -> dict[str, np.ndarray]:
    t_s = np.repeat(np.arange(10.0), 2)
    columns = {"t_s": t_s, "pid": np.tile([1.0, 2.0], 10), "rss_bytes": np.full(20, 100.0 * MIB),
               "pss_bytes": np.full(20, np.nan), "name": np.array(["a", "b"] * 10, dtype=object)}
    if swap is not None:
        columns["swap_bytes"] = swap
    return columns


def test_the_memory_chart_draws_swap_and_the_held_total_only_where_swap_was_found():
    swap = np.repeat(np.arange(10.0), 2) * MIB
    names = [trace["name"] for trace in memory_chart(_columns(swap), FRAME, [])["figure"]["data"]]
    assert "a (1) swap" in names and "b (2) swap" in names
    assert "server tree total resident + swapped" in names
    total = next(t for t in memory_chart(_columns(swap), FRAME, [])["figure"]["data"]
                 if t["name"] == "server tree total resident + swapped")
    assert total["y"][-1] == pytest.approx(2 * 109.0)
    one = {name: values[::2] for name, values in _columns(swap).items()}
    names = [trace["name"] for trace in memory_chart(one, FRAME, [])["figure"]["data"]]
    assert names == ["a (1) RSS", "a (1) swap", "a (1) resident + swapped"]  # PSS was not read: no line
    for no_swap in (None, np.zeros(20)):
        names = [trace["name"] for trace in memory_chart(_columns(no_swap), FRAME, [])["figure"]["data"]]
        assert not any("swap" in name for name in names) and "server tree total RSS" in names
