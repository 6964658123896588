"""GPU health from dcgm-exporter: the page read per GPU (a real HTTP fake exporter), XIDs as changes of the
last-XID gauge, the gpu.xid and gpu.ecc checks, and leak.vram judged on DCGM's framebuffer when NVML saw nothing."""

from __future__ import annotations

import numpy as np

from soak.analysis.findings import FAIL, PASS, SKIPPED
from soak.analysis.gates import Gates
from soak.analysis.gpu_health import check_ecc, check_xid, rise
from soak.analysis.inputs import Event, GpuSeries
from soak.analysis.memory import check_vram
from soak.telemetry.dcgm import XidChanges, read_gpus
from soak.telemetry.dialects import DIALECTS
from soak.telemetry.prometheus import scrape
from support.fake_dcgm import FakeDcgmExporter, FakeGpu, dcgm_page
from support.synthetic import MIB, bare_run

UUID_A = "GPU-3f2a9c1e-0000-4000-8000-000000000001"
UUID_B = "GPU-77b1d2e4-0000-4000-8000-000000000002"
RUN_S = 2 * 3600.0


# -- reading the page ------------------------------------------------------------------------------------
def test_a_dcgm_page_becomes_one_row_per_gpu_keyed_by_uuid():
    gpus = [FakeGpu(0, UUID_A, fb_used_mib=1024, fb_free_mib=3072, temp_c=61, power_w=312.5, throttle=0x4, xid=0),
            FakeGpu(1, UUID_B, pod="vllm-0", ecc_dbe=2, rows_uncorrectable=1, xid=79)]
    rows = {row["uuid"]: row for row in read_gpus(dcgm_page(gpus, 0.0))}
    assert set(rows) == {UUID_A, UUID_B}
    first = rows[UUID_A]
    assert first["gpu_index"] == 0 and first["name"] == "NVIDIA H100 80GB HBM3"
    assert first["mem_used_bytes"] == 1024 * MIB and first["mem_total_bytes"] == 4096 * MIB
    assert (first["temp_c"], first["power_w"], first["throttle_reasons"], first["last_xid"]) == (61, 312.5, 4, 0)
    assert (rows[UUID_B]["ecc_errors"], rows[UUID_B]["remapped_rows_uncorrectable"], rows[UUID_B]["last_xid"]) == (2, 1, 79)


def test_a_gpu_without_a_uuid_is_named_by_its_index_and_other_pages_give_no_gpus():
    page = 'DCGM_FI_DEV_FB_USED{gpu="3"} 10\nDCGM_FI_DEV_GPU_TEMP{gpu="3"} 40\n'
    assert [(row["uuid"], row["gpu_index"], row["mem_used_bytes"]) for row in read_gpus(page)] == [("gpu3", 3, 10 * MIB)]
    assert read_gpus("vllm:num_requests_running 1\n") == []


def test_the_fake_exporter_is_read_at_every_scrape_even_when_other_series_are_skipped():
    with FakeDcgmExporter([FakeGpu(0, UUID_A, fb_used_mib=lambda t: 1000 + t)]) as exporter:
        full = scrape(exporter.url)
        lean = scrape(exporter.url, with_extra=False, dialect=DIALECTS["vllm"])
    assert full.ok and lean.ok and exporter.scrapes == 2
    assert [row["uuid"] for row in lean.gpus] == [UUID_A]
    assert lean.gpus[0]["mem_used_bytes"] >= 1000 * MIB
    assert scrape("http://127.0.0.1:9/metrics").gpus == []


# -- XIDs from the last-XID gauge --------------------------------------------------------------------------
def _rows(code):
    return [{"uuid": UUID_A, "gpu_index": 0, "last_xid": code}]


def test_a_change_to_a_non_zero_xid_is_a_new_xid_and_one_showing_at_start_is_not():
    changes = XidChanges()
    assert changes.first_seen("u", _rows(13))["xid_before_run"] == {UUID_A: 13}
    assert changes.observe("u", _rows(13)) == [] and changes.first_seen("u", _rows(13)) is None
    assert changes.observe("u", _rows(13)) == []
    found = changes.observe("u", rows := _rows(79))
    assert [(x["uuid"], x["xid"], x["previous_xid"]) for x in found] == [(UUID_A, 79, 13)]
    assert rows[0]["xid_errors"] == 1
    assert changes.observe("u", _rows(0)) == []
    rows = _rows(79)
    assert [x["xid"] for x in changes.observe("u", rows)] == [79] and rows[0]["xid_errors"] == 2


# -- gpu.xid and gpu.ecc -----------------------------------------------------------------------------------
def _gpu(source="http://dcgm/metrics", uuid=UUID_A, **arrays):
    t_s = np.arange(0.0, RUN_S, 60.0)
    arrays.setdefault("xid_errors", np.zeros(t_s.size))
    return GpuSeries(source=source, gpu_index=0, uuid=uuid, t_s=t_s,
                     **{k: (v(t_s) if callable(v) else v) for k, v in arrays.items()})


def test_gpu_xid_fails_naming_the_code_its_meaning_and_the_gpu():
    xid = Event(11_520.0, "gpu_xid", "XID 79", {"uuid": UUID_A, "gpu_index": 0, "xid": 79})
    finding = check_xid(bare_run(RUN_S, gpus=(_gpu(),), events=(xid,)), Gates())
    assert finding.verdict == FAIL and finding.value == 1
    assert finding.evidence == f"GPU {UUID_A} raised XID 79 (fallen off the bus) at 3h12m."


def test_gpu_xid_passes_when_xids_were_read_and_is_skipped_without_a_source():
    finding = check_xid(bare_run(RUN_S, gpus=(_gpu(),)), Gates())
    assert finding.verdict == PASS and "read from dcgm-exporter" in finding.evidence
    seen = Event(0.5, "gpu_dcgm", "", {"xid_before_run": {UUID_A: 48}})
    finding = check_xid(bare_run(RUN_S, gpus=(_gpu(),), events=(seen,)), Gates())
    assert finding.verdict == PASS
    assert finding.evidence.endswith(f"; GPU {UUID_A} showed XID 48 (double-bit ECC error) before the run (not judged).")
    assert check_xid(bare_run(RUN_S), Gates()).verdict == SKIPPED


def test_gpu_ecc_fails_on_a_rise_of_uncorrectable_errors_only():
    steady = _gpu(ecc_dbe=np.full(120, 3.0), remapped_rows_uncorrectable=np.zeros(120))
    assert check_ecc(bare_run(RUN_S, gpus=(steady,)), Gates()).verdict == PASS
    rising = _gpu(uuid=UUID_B, ecc_dbe=lambda t: (t > 3600).astype(float) * 2)
    finding = check_ecc(bare_run(RUN_S, gpus=(steady, rising)), Gates())
    assert finding.verdict == FAIL and f"GPU {UUID_B}: +2 double-bit ECC errors" in finding.evidence
    assert check_ecc(bare_run(RUN_S), Gates()).verdict == SKIPPED


def test_a_counter_reset_is_no_rise_but_what_it_counts_after_is():
    assert rise(np.array([5.0, 5.0, 0.0, 0.0, 1.0, np.nan, 2.0])) == 2.0


# -- leak.vram on DCGM's framebuffer -----------------------------------------------------------------------
def test_leak_vram_judges_each_gpu_framebuffer_when_nvml_saw_no_process():
    noise = np.random.default_rng(0).normal(0, MIB, 120)
    flat = _gpu(mem_used_bytes=lambda t: 40_000 * MIB + noise)
    leaking = _gpu(uuid=UUID_B, mem_used_bytes=lambda t: 40_000 * MIB + 400 * MIB * t / 3600 + noise)
    finding = check_vram(bare_run(RUN_S, gpu_seen=True, gpus=(flat, leaking)), Gates())
    assert finding.verdict == FAIL, finding.evidence
    assert f"GPU {UUID_B}" in finding.evidence and "pid" not in finding.evidence
