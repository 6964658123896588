"""Where a CPU vLLM and soak run, so that neither starves the other (docs/vllm.md, "vLLM on CPU").

vLLM's CPU engine binds one OpenMP thread per core it is given and keeps them spinning; by default
(VLLM_CPU_OMP_THREADS_BIND=auto) it takes every core but one, which it leaves to "everything else". A soak
process the kernel places on an engine core waits behind a spinning thread, and its arrival clock stalls for
tenths of a second. So, for a CPU build and when the user set neither variable, soak

- gives the engine every usable core but the last (VLLM_CPU_OMP_THREADS_BIND=0-N-2), or but the last 1 + W
  with W local load workers (`--workers W`; the engine keeps at least one core),
- pins itself (every thread, and so every process it starts later) to those reserved cores, and
- sizes the KV cache (VLLM_CPU_KVCACHE_SPACE, GiB) instead of leaving vLLM to take its default.

- starts the whole vLLM tree (API server, EngineCore, its worker) on the engine's cores only. Left on every core,
  the API server and the EngineCore's busy loop ran on the reserved core beside soak, and soak's event loop lagged
  25-35 ms at its 99th percentile under a load of 1 request/s; on the engine's cores they share time with the
  engine's threads instead, which costs the server a little latency and leaves soak's clock alone.

A variable the user set is passed through unchanged; soak then pins itself to the cores that bind leaves free,
if it can tell which, and leaves the vLLM tree on every usable core. With a single usable core there is nothing to
reserve: soak says so before the load.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"
DEFAULT_KV_SPACE_GIB = 1  # enough for small models at modest concurrency; set the variable for real ones
TOO_SMALL = ("this machine gives soak {count} usable CPU core(s): a CPU vLLM binds its engine to the core and "
             "keeps it busy, so soak's client and the server's API process compete with it and the client's "
             "figures may be late (client.saturation INCONCLUSIVE or INVALID); use a machine with 2 or more cores")


@dataclass(frozen=True)
class Placement:
    """The cores and variables soak chose for a CPU vLLM and for itself."""

    usable_cpus: tuple[int, ...]
    server_cpus: tuple[int, ...]
    soak_cpus: tuple[int, ...] | None  # None: soak is not pinned
    env: dict[str, str] = field(default_factory=dict)  # what soak sets in the server's environment
    chosen_by: dict[str, str] = field(default_factory=dict)  # variable -> "soak" or "user"
    warning: str | None = None

    def record(self) -> dict[str, Any]:
        """The placement as the run's environment record shows it."""
        return {"usable_cpus": format_cpus(self.usable_cpus), "server_cpus": format_cpus(self.server_cpus),
                "soak_cpus": format_cpus(self.soak_cpus) if self.soak_cpus else None,
                "variables": {name: f"{value} (set by {self.chosen_by.get(name, 'user')})"
                              for name, value in self._variables().items()},
                "warning": self.warning}

    def _variables(self) -> dict[str, str]:
        return {name: self.env.get(name) or os.environ.get(name, "") for name in (BIND_ENV, KV_SPACE_ENV)
                if name in self.env or name in os.environ}


def format_cpus(cpus: tuple[int, ...] | list[int]) -> str:
    """CPU numbers as a list with ranges, the way taskset and vLLM write them: `0-2,5`."""
    parts: list[str] = []
    ordered = sorted(cpus)
    start = previous = ordered[0] if ordered else None
    for cpu in ordered[1:] + [None]:
        if cpu is not None and cpu == previous + 1:
            previous = cpu
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(parts)


def parse_cpus(text: str) -> set[int] | None:
    """The CPUs a bind list names (`0-2,5`, ranks split by `|`); None for `auto`, `nobind` or anything else."""
    cpus: set[int] = set()
    for part in re.split(r"[,|]", text.strip()):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if match is None:
            return None
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        cpus.update(range(first, last + 1))
    return cpus or None


def plan_placement(usable: set[int], environ: dict[str, str] | os._Environ, reserve: int = 1) -> Placement:
    """The placement for a CPU vLLM on these usable cores, honouring variables the user set; `reserve`: how
    many cores soak asks for itself (one, plus one per local load worker), the engine keeping at least one."""
    cpus = tuple(sorted(usable))
    env, chosen = {}, {}
    for name in (BIND_ENV, KV_SPACE_ENV):
        if name in environ:
            chosen[name] = "user"
    if KV_SPACE_ENV not in environ:
        env[KV_SPACE_ENV], chosen[KV_SPACE_ENV] = str(DEFAULT_KV_SPACE_GIB), "soak"
    if len(cpus) < 2:
        return Placement(cpus, cpus, None, env, chosen, TOO_SMALL.format(count=len(cpus)))
    if BIND_ENV in environ:
        engine = parse_cpus(environ[BIND_ENV])
        free = tuple(cpu for cpu in cpus if engine is not None and cpu not in engine)
        return Placement(cpus, cpus, free or None, env, chosen)
    kept = min(max(reserve, 1), len(cpus) - 1)
    env[BIND_ENV], chosen[BIND_ENV] = format_cpus(cpus[:-kept]), "soak"
    return Placement(cpus, cpus[:-kept], cpus[-kept:], env, chosen)


def usable_cpus() -> set[int]:
    """The cores this process may run on (its affinity mask)."""
    return set(os.sched_getaffinity(0))


def pin_process(cpus: set[int] | tuple[int, ...], pid: int = 0) -> None:
    """Set the affinity of every thread of process `pid` (0: this one); threads and children started later
    inherit it. Threads that end meanwhile are skipped."""
    task_dir = f"/proc/{pid or os.getpid()}/task"
    for tid in os.listdir(task_dir):
        try:
            os.sched_setaffinity(int(tid), set(cpus))
        except (ProcessLookupError, PermissionError, OSError):
            continue
