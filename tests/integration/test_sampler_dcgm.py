"""The sampler with a fake dcgm-exporter among its scraped pages: each GPU becomes a gpu_samples row of that source
at every sample, and a change of a GPU's last-XID gauge to a non-zero code is one gpu_xid event."""

from __future__ import annotations

import pytest

from soak.contracts import EventKind
from soak.samples import GpuReading
from soak.telemetry.dcgm import GpuClaim
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
    rows = collector.samples_of(GpuReading)
    assert len(rows) == 8 and {row.source for row in rows} == {exporter.url}
    assert [row.xid_errors for row in rows if row.uuid == UUID] == [0, 0, 1, 1]
    xids = [(message, data) for kind, message, data in collector.events if kind == EventKind.GPU_XID]
    assert [data["xid"] for _, data in xids] == [79] and xids[0][1]["previous_xid"] == 13
    assert xids[0][0] == f"XID 79 on GPU {UUID} (dcgm-exporter)"
    seen = [message for kind, message, _ in collector.events if kind == EventKind.GPU_DCGM]
    assert seen == [f"dcgm-exporter {exporter.url}: 2 GPU(s); GPU {UUID} showed XID 13 before the run"]


@pytest.mark.parametrize("claim, kept", [
    (GpuClaim(), {UUID, "GPU-0b11", "GPU-77aa"}),  # a plain run: every GPU of the page
    (GpuClaim.of_replica("gpu-0", (UUID,)), {UUID}),  # --replica gpu-0=URL,UUID
    (GpuClaim.of_replica("vllm-1", ()), {"GPU-0b11"}),  # no UUID named: the GPU labelled with its pod
])
def test_a_fleet_replica_reads_only_its_own_gpus_of_a_shared_page(claim, kept):
    gpus = [FakeGpu(0, UUID, pod="vllm-0"), FakeGpu(1, "GPU-0b11", pod="vllm-1"), FakeGpu(2, "GPU-77aa")]
    collector = Collector()
    with FakeDcgmExporter(gpus) as exporter:
        telemetry = Telemetry(collector, TelemetrySources(server_pids=lambda: [], metrics_urls=[exporter.url],
                                                          gpu_claim=claim), windows=None, sample_every_s=1.0,
                              flush_every_s=1.0)
        telemetry.sample()
    assert {row.uuid for row in collector.samples_of(GpuReading)} == kept


def test_a_page_with_none_of_the_replicas_gpus_says_so_once_and_stores_none():
    collector = Collector()
    with FakeDcgmExporter([FakeGpu(0, UUID)]) as exporter:
        sources = TelemetrySources(server_pids=lambda: [], metrics_urls=[exporter.url],
                                   gpu_claim=GpuClaim.of_replica("gpu-3", ()))
        telemetry = Telemetry(collector, sources, windows=None, sample_every_s=1.0, flush_every_s=1.0)
        telemetry.sample()
        telemetry.sample()
    assert collector.samples_of(GpuReading) == []
    [said] = [message for kind, message, _ in collector.events if kind == EventKind.GPU_DCGM]
    assert said == (f"dcgm-exporter {exporter.url}: 1 GPU(s), none of them this replica's (none is labelled "
                    "pod='gpu-3'; name its GPUs with --replica gpu-3=URL,GPU_UUID)")
