"""The sampler with a fake dcgm-exporter among its scraped pages: each GPU becomes a gpu_samples row of that source
at every sample, and a change of a GPU's last-XID gauge to a non-zero code is one gpu_xid event."""

from __future__ import annotations

import pytest

from soak.contracts import EventKind
from soak.store.models import GpuSample
from soak.telemetry.sampler import Telemetry, TelemetrySources
from support.collector import Collector
from support.fake_dcgm import FakeDcgmExporter, FakeGpu

pytestmark = pytest.mark.timeout(60)

UUID = "GPU-3f2a9c1e-5b7d-4e21-9a0c-1d2e3f405162"


def test_each_gpu_is_a_row_of_its_page_and_a_new_xid_an_event():
    # scrape 0: XID 13 from before the run (not new); scrape 2: XID 79 (new); scrape 3: still 79 (nothing new)
    codes = [13, 13, 79, 79]
    gpus = [FakeGpu(0, UUID, xid=lambda n: codes[int(n)]), FakeGpu(1, "GPU-0b11")]
    collector = Collector()
    with FakeDcgmExporter(gpus, by_scrape=True) as exporter:
        telemetry = Telemetry(collector, TelemetrySources(server_pids=lambda: [], metrics_urls=[exporter.url]),
                              windows=None, sample_every_s=1.0, flush_every_s=1.0)
        for _ in codes:
            telemetry.sample()
    rows = collector.rows_by_model[GpuSample]
    assert len(rows) == 8 and {row["source"] for row in rows} == {exporter.url}
    assert [row["xid_errors"] for row in rows if row["uuid"] == UUID] == [0, 0, 1, 1]
    xids = [(message, data) for kind, message, data in collector.events if kind == EventKind.GPU_XID]
    assert [data["xid"] for _, data in xids] == [79] and xids[0][1]["previous_xid"] == 13
    assert xids[0][0] == f"XID 79 on GPU {UUID} (dcgm-exporter)"
    seen = [message for kind, message, _ in collector.events if kind == EventKind.GPU_DCGM]
    assert seen == [f"dcgm-exporter {exporter.url}: 2 GPU(s); GPU {UUID} showed XID 13 before the run"]
