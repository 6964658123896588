"""Whole `soak start` runs on the reference server with `--metrics-url` at a fake dcgm-exporter (a real HTTP server
on 127.0.0.1, tests/support/fake_dcgm.py): an XID 79 the exporter raises mid-run FAILs `gpu.xid` naming the code and
the GPU, and framebuffer growth on the exporter alone FAILs `leak.vram` (this host has no NVML to read)."""

from __future__ import annotations

import json

import pytest

from soak.store import Store
from soak.store.models import GpuSample
from support.fake_dcgm import FakeDcgmExporter, FakeGpu

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

UUID = "GPU-3f2a9c1e-5b7d-4e21-9a0c-1d2e3f405162"
SHORT_RUN = ["--warmup", "2s", "--window", "2s", "--sample-every", "1s", "--rate", "4", "--idle-probe-every", "0",
             "--canary-every", "0", "--json"]
# A trend needs 20 judged windows (min_windows): 1 s windows, sampled twice each.
LEAK_RUN = ["--warmup", "3s", "--window", "1s", "--sample-every", "0.5s", "--rate", "4", "--idle-probe-every", "0",
            "--canary-every", "0", "--json"]


def test_an_xid_raised_mid_run_fails_gpu_xid_naming_the_code_and_the_gpu(soak_cli, tmp_path):
    gpus = [FakeGpu(0, UUID, xid=lambda t: 79 if t >= 4 else 0), FakeGpu(1, UUID.replace("3f2a", "0b11"))]
    with FakeDcgmExporter(gpus) as exporter:
        result = soak_cli("start", "--duration", "9s", *SHORT_RUN, "--metrics-url", exporter.url,
                          "--out", str(tmp_path), timeout_s=90)
    assert result.returncode == 1, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    finding = next(f for f in summary["findings"] if f["check"] == "gpu.xid")
    assert finding["verdict"] == "FAIL" and finding["value"] == 1, finding
    assert finding["evidence"].startswith(f"GPU {UUID} raised XID 79 (fallen off the bus) at "), finding["evidence"]
    assert next(f for f in summary["findings"] if f["check"] == "gpu.ecc")["verdict"] == "PASS"

    store = Store.open(f"sqlite:///{tmp_path / 'soak.db'}", read_only=True)
    rows = store.read_rows(GpuSample, summary["run_id"])
    assert {row.uuid for row in rows} == {UUID, UUID.replace("3f2a", "0b11")}
    assert {row.source for row in rows} == {exporter.url}
    assert [e.data["xid"] for e in store.read_events(summary["run_id"]) if e.kind == "gpu_xid"] == [79]
    report = (tmp_path / summary["run_id"] / "report.html").read_text(encoding="utf-8")
    assert "GPU temperature and power" in report and "GPU clock-throttle reasons" in report
    assert "GPU XID" in report  # the XID's marker on every chart


@pytest.mark.slow
def test_framebuffer_growth_on_dcgm_alone_fails_leak_vram(soak_cli, tmp_path):
    growing = FakeGpu(0, UUID, fb_used_mib=lambda t: 2000 + 150 * t, fb_free_mib=lambda t: 78000 - 150 * t)
    with FakeDcgmExporter([growing, FakeGpu(1, UUID.replace("3f2a", "0b11"))]) as exporter:
        result = soak_cli("start", "--duration", "25s", *LEAK_RUN, "--metrics-url", exporter.url,
                          "--out", str(tmp_path), timeout_s=90)
    assert result.returncode == 1, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    finding = next(f for f in summary["findings"] if f["check"] == "leak.vram")
    assert finding["verdict"] == "FAIL", finding
    assert f"GPU {UUID}" in finding["evidence"], finding["evidence"]
    assert {row["gpu"]: row["verdict"] for row in finding["details"]["per_gpu"]}[f"GPU {UUID}"] == "FAIL"
