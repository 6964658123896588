"""The typed records of `soak/samples.py` become rows of their tables in the store's writer, stamped by the recorder
with the run id (and a sample with its time); a window written again replaces the one before."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from soak.samples import (
    GpuProcessReading,
    GpuReading,
    KeptRequest,
    LatencyWindow,
    MetricReading,
    ProcessReading,
    ProcessStats,
    RequestWindow,
    ServerReading,
)
from soak.store import Store
from soak.store.models import (
    GpuProcessSample,
    GpuSample,
    LatencyWindowRow,
    MetricSample,
    ProcessSample,
    RequestRow,
    RequestWindowRow,
    Run,
    ServerSample,
)
from soak.store.recorder import Recorder
from soak.store.writer import TABLES, columns

pytestmark = pytest.mark.timeout(60)

RUN = {"id": "r1", "status": "running", "started_at": "2026-01-01T00:00:00+00:00", "t0_epoch_s": 0.0,
       "planned_duration_s": 60.0, "warmup_s": 5.0, "window_s": 5.0, "out_dir": "runs", "target_kind": "external",
       "config_json": "{}", "environment_json": "{}"}


def stored(store: Store, model: type) -> list[dict]:
    """Every row of a table, by column, without the autoincrement id."""
    with store.engine.connect() as connection:
        rows = connection.execute(select(model.__table__)).mappings().all()
    return [{key: value for key, value in row.items() if key != "id"} for row in rows]


def recorded(tmp_path, record) -> Store:
    """A store whose run r1 recorded `record` (written with the recorder's calls) and was committed."""
    store = Store.open(f"sqlite:///{tmp_path / 'soak.db'}")
    writer = store.writer()
    writer.insert(Run, RUN)
    record(Recorder(writer, "r1", t0_epoch_s=0.0))
    assert writer.flush()
    return store


def test_every_record_names_every_column_of_its_table():
    examples = [ProcessReading("server", ProcessStats(pid=1, name="p", rss_bytes=1)), GpuReading(gpu_index=0),
                GpuProcessReading(gpu_index=0, pid=1, used_bytes=1), ServerReading(source="u", scrape_ok=False),
                MetricReading("m", 1.0), LatencyWindow(0, "*", "e2e", 0.0, 5.0, 0, *[None] * 7),
                RequestWindow(0, "*", 0.0, 5.0), KeptRequest("chat", 0.0, *[None] * 7)]
    assert {type(example) for example in examples} == set(TABLES)
    for example in examples:
        table = TABLES[type(example)].__table__
        assert set(columns(example)) == set(table.columns.keys()) - {"id", "run_id", "t_s"}, type(example)


def test_samples_become_rows_at_their_time(tmp_path):
    stats = ProcessStats(pid=7, name="vllm", rss_bytes=100, ppid=1, swap_bytes=0, threads=4, cpu_percent=12.5,
                         pss_bytes=90, uss_bytes=80, fds=9)
    store = recorded(tmp_path, lambda recorder: recorder.samples([
        ProcessReading("server", stats), ProcessReading("client", ProcessStats(pid=8, name="soak", rss_bytes=50)),
        GpuReading(gpu_index=0, name="H100", mem_used_bytes=10, xid_errors=0),
        GpuReading(gpu_index=1, uuid="GPU-1", source="http://dcgm/metrics", last_xid=79, row_remap_failure=0),
        GpuProcessReading(gpu_index=0, pid=7, used_bytes=None),
        ServerReading(source="http://s/metrics", scrape_ok=True, health_ok=None, running=2.0, kv_usage=0.5),
        MetricReading("soak_host_memory_available_bytes", 1e9),
        MetricReading("x_total", 3.0, {"b": "2", "a": "1"}),
    ], t_s=12.5))
    process_rows = stored(store, ProcessSample)
    assert process_rows[0] == {"run_id": "r1", "t_s": 12.5, "role": "server", "pid": 7, "ppid": 1, "name": "vllm",
                               "rss_bytes": 100, "pss_bytes": 90, "uss_bytes": 80, "swap_bytes": 0, "fds": 9,
                               "threads": 4, "cpu_percent": 12.5}
    assert (process_rows[1]["role"], process_rows[1]["pid"], process_rows[1]["pss_bytes"]) == ("client", 8, None)
    nvml, dcgm = stored(store, GpuSample)
    assert (nvml["name"], nvml["mem_used_bytes"], nvml["xid_errors"], nvml["source"], nvml["uuid"]) == ("H100", 10, 0,
                                                                                                        None, None)
    assert (dcgm["source"], dcgm["uuid"], dcgm["last_xid"], dcgm["row_remap_failure"], dcgm["name"]) == (
        "http://dcgm/metrics", "GPU-1", 79, 0, None)
    assert stored(store, GpuProcessSample) == [{"run_id": "r1", "t_s": 12.5, "gpu_index": 0, "pid": 7,
                                                "used_bytes": None}]
    [server] = stored(store, ServerSample)
    assert (server["scrape_ok"], server["health_ok"], server["running"], server["kv_usage"], server["waiting"]) == (
        True, None, 2.0, 0.5, None)
    assert [(row["name"], row["labels_json"], row["value"]) for row in stored(store, MetricSample)] == [
        ("soak_host_memory_available_bytes", "{}", 1e9), ("x_total", '{"a": "1", "b": "2"}', 3.0)]


def test_a_window_written_again_replaces_the_one_before(tmp_path):
    def latency(count: int) -> LatencyWindow:
        return LatencyWindow(window_index=0, scenario="*", metric="e2e", start_s=5.0, end_s=10.0, count=count,
                             mean_ms=1.0, p50_ms=1.0, p90_ms=1.0, p95_ms=1.0, p99_ms=1.0, max_ms=2.0, hist="HIST")

    def write(recorder: Recorder) -> None:
        recorder.windows([latency(1), RequestWindow(window_index=0, scenario="*", start_s=5.0, end_s=10.0, requests=1)])
        recorder.windows([latency(3), RequestWindow(window_index=0, scenario="*", start_s=5.0, end_s=10.0, requests=3,
                                                    ok=2, err_timeout=1, slo_met=2)])

    store = recorded(tmp_path, write)
    [row] = stored(store, LatencyWindowRow)
    assert (row["run_id"], row["count"], row["hist"], row["metric"]) == ("r1", 3, "HIST", "e2e")
    [row] = stored(store, RequestWindowRow)
    assert (row["run_id"], row["requests"], row["ok"], row["err_timeout"], row["cancelled"], row["slo_met"]) == (
        "r1", 3, 2, 1, 0, 2)


def test_a_kept_request_becomes_a_row_of_its_run(tmp_path):
    request = KeptRequest(scenario="chat", intended_s=3.5, lag_ms=1.0, queue_ms=0.0, ttft_ms=20.0, e2e_ms=200.0,
                          output_tokens=12, status_code=200, error_class=None)
    store = recorded(tmp_path, lambda recorder: recorder.request(request))
    assert stored(store, RequestRow) == [{"run_id": "r1", "scenario": "chat", "intended_s": 3.5, "lag_ms": 1.0,
                                          "queue_ms": 0.0, "ttft_ms": 20.0, "e2e_ms": 200.0, "output_tokens": 12,
                                          "status_code": 200, "error_class": None}]
