"""The GPU charts: one GPU per (source, UUID, index), temperature and power on two axes, and the spans in which
each clock-throttle reason was active."""

from __future__ import annotations

import numpy as np

from soak.report.charts import Frame
from soak.report.gpu_charts import gpu_groups, gpu_health_chart, gpu_memory_chart, spans, throttle_chart
from soak.report.markers import event_class

FRAME = Frame(time_unit_s=60.0, time_label="minutes since start", end_s=600.0)
UUID = "GPU-3f2a9c1e"


def _columns(throttle):
    t_s = np.arange(0.0, 10.0)
    nvml = {"t_s": t_s, "gpu_index": np.zeros(10), "source": np.array([None] * 10, dtype=object),
            "uuid": np.array([None] * 10, dtype=object)}
    dcgm = {"t_s": t_s, "gpu_index": np.zeros(10), "source": np.array(["http://x/metrics"] * 10, dtype=object),
            "uuid": np.array([UUID] * 10, dtype=object)}
    columns = {key: np.concatenate([nvml[key], dcgm[key]]) for key in nvml}
    columns.update(temp_c=np.full(20, 60.0), power_w=np.full(20, 300.0), mem_used_bytes=np.full(20, 2.0**30),
                   mem_total_bytes=np.full(20, 2.0**33), throttle_reasons=np.concatenate([np.zeros(10), throttle]))
    return columns


def test_nvml_and_dcgm_rows_of_gpu_0_are_two_gpus_named_by_uuid_where_known():
    assert [label for label, _ in gpu_groups(_columns(np.zeros(10)))] == ["GPU 0", f"GPU {UUID} (DCGM)"]
    names = [trace["name"] for trace in gpu_memory_chart(_columns(np.zeros(10)), FRAME, "")["figure"]["data"]]
    assert f"GPU {UUID} (DCGM) used" in names and "GPU 0 total" in names


def test_temperature_and_power_share_a_chart_on_two_axes():
    data = gpu_health_chart(_columns(np.zeros(10)), FRAME, "")["figure"]["data"]
    assert {trace.get("yaxis") for trace in data if trace["name"].endswith(" W")} == {"y2"}


def test_each_throttle_reason_is_drawn_where_its_bit_was_set():
    assert spans(np.arange(6.0), np.array([0, 1, 1, 0, 1, 0], dtype=bool)) == [(1.0, 2.0), (4.0, 4.0)]
    throttle = np.array([0, 0x4, 0x4 | 0x40, 0x40, 0, 0, 0, 0, 0, 1], dtype=float)  # 1: idle, not a slowdown
    found = throttle_chart(_columns(throttle), FRAME, "")
    traces = [trace for trace in found["figure"]["data"] if trace["name"].startswith("GPU ")]
    assert [trace["name"] for trace in traces] == [f"GPU {UUID} (DCGM): SW power cap",
                                                   f"GPU {UUID} (DCGM): HW thermal slowdown"]
    assert found["figure"]["layout"]["yaxis"]["type"] == "category"
    assert throttle_chart(_columns(np.zeros(10)), FRAME, "")["figure"] is None


def test_an_xid_is_a_marker_of_its_own():
    assert event_class("gpu_xid") == "xid"
