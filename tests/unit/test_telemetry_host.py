"""Each telemetry tick records the host's available memory, the headroom a leak eats into."""

from __future__ import annotations

import psutil

from soak.samples import MetricReading, ProcessStats
from soak.store.models import HOST_AVAILABLE_METRIC
from soak.telemetry.sampler import Snapshot, Telemetry


class FakeRecorder:
    """Keeps what the sampler records: (samples, t_s) per call."""

    def __init__(self):
        self.calls: list[tuple[list, float]] = []

    def samples(self, samples: list, t_s: float) -> None:
        self.calls.append((samples, t_s))


def _telemetry() -> tuple[Telemetry, FakeRecorder]:
    telemetry = Telemetry.__new__(Telemetry)  # no scheduler, no NVML: only the host reading is under test
    telemetry.recorder = recorder = FakeRecorder()
    return telemetry, recorder


def test_the_host_reading_is_stored_as_a_metric_sample_at_the_tick():
    telemetry, recorder = _telemetry()
    snapshot = Snapshot(t_s=5.0, server_processes=[ProcessStats(pid=1, name="server", rss_bytes=10)])
    telemetry._sample_host(snapshot, 5.0)
    [([reading], t_s)] = recorder.calls
    assert isinstance(reading, MetricReading) and reading.name == HOST_AVAILABLE_METRIC and t_s == 5.0
    assert 0 < reading.value <= psutil.virtual_memory().total and reading.labels == {}
    assert snapshot.host_available_bytes == reading.value


def test_no_host_reading_without_a_server_process_on_this_host():
    telemetry, recorder = _telemetry()
    telemetry._sample_host(Snapshot(t_s=5.0), 5.0)
    assert recorder.calls == []
