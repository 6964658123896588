"""NVML readings per GPU (those CUDA_VISIBLE_DEVICES picks) and VRAM per process of the server tree.

NVML may be missing (no driver, no GPU): `GpuSampler.available` is then False and the reason is kept for one
clean "no_gpu" event. Each NVML query is guarded on its own, so one failing call never kills a sample.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def _guarded(call: Callable[[], Any]) -> Any:
    """The call's result, or None when NVML refuses it (not supported, lost GPU, …)."""
    try:
        return call()
    except Exception:  # noqa: BLE001 - pynvml raises NVMLError subclasses and ctypes errors alike
        return None


def visible_gpu_indices(count: int, environ: dict[str, str] | None = None) -> list[int]:
    """NVML indices of the GPUs named by CUDA_VISIBLE_DEVICES (numeric form); all when it is unset."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    picked = []
    for part in visible.split(","):
        part = part.strip()
        if part.isdigit() and int(part) < count:
            picked.append(int(part))
    return picked


class GpuSampler:
    """Reads per-GPU state and per-process VRAM through pynvml."""

    def __init__(self) -> None:
        self.available = False
        self.reason = ""
        self._nvml: Any = None
        self._handles: list[tuple[int, Any]] = []
        self._open()

    def _open(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            indices = visible_gpu_indices(pynvml.nvmlDeviceGetCount())
            self._handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
            self._nvml = pynvml
            self.available = bool(self._handles)
            self.reason = "" if self.available else "NVML sees no GPU picked by CUDA_VISIBLE_DEVICES"
        except Exception as exc:  # noqa: BLE001 - any failure to load NVML means "no GPU"
            self.reason = f"NVML not available: {exc}"

    def describe(self) -> list[dict[str, Any]]:
        """Static facts per GPU for the environment record: name, memory, driver, CUDA version."""
        nv = self._nvml
        if not self.available:
            return []
        driver = _guarded(nv.nvmlSystemGetDriverVersion)
        cuda = _guarded(nv.nvmlSystemGetCudaDriverVersion_v2)
        return [
            {"index": index, "name": _guarded(lambda h=handle: nv.nvmlDeviceGetName(h)),
             "memory_total_bytes": _guarded(lambda h=handle: nv.nvmlDeviceGetMemoryInfo(h).total),
             "driver": driver, "cuda_driver_version": cuda}
            for index, handle in self._handles
        ]

    def sample(self, pids: list[int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(one row per GPU, one row per tree process holding VRAM on a GPU)."""
        if not self.available:
            return [], []
        gpu_rows, process_rows = [], []
        wanted = set(pids)
        for index, handle in self._handles:
            gpu_rows.append(self._gpu_row(index, handle))
            process_rows.extend(self._process_rows(index, handle, wanted))
        return gpu_rows, process_rows

    def _gpu_row(self, index: int, handle: Any) -> dict[str, Any]:
        nv = self._nvml
        memory = _guarded(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
        utilization = _guarded(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
        power_mw = _guarded(lambda: nv.nvmlDeviceGetPowerUsage(handle))
        return {
            "gpu_index": index,
            "name": _guarded(lambda: nv.nvmlDeviceGetName(handle)),
            "mem_used_bytes": memory.used if memory else None,
            "mem_total_bytes": memory.total if memory else None,
            "util_pct": utilization.gpu if utilization else None,
            "temp_c": _guarded(lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)),
            "power_w": power_mw / 1000.0 if power_mw is not None else None,
            "sm_clock_mhz": _guarded(lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
            "throttle_reasons": _guarded(lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(handle)),
            "ecc_errors": _guarded(lambda: nv.nvmlDeviceGetTotalEccErrors(
                handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)),
            "xid_errors": None,  # XIDs arrive as NVML events, not a counter; see docs/telemetry.md
        }

    def _process_rows(self, index: int, handle: Any, wanted: set[int]) -> list[dict[str, Any]]:
        processes = _guarded(lambda: self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []
        return [
            {"gpu_index": index, "pid": process.pid, "used_bytes": process.usedGpuMemory}
            for process in processes
            if process.pid in wanted
        ]

    def used_by(self, pids: list[int]) -> int:
        """VRAM bytes held now by any of `pids` (to check it was released after a stop)."""
        _, rows = self.sample(pids)
        return sum(row["used_bytes"] or 0 for row in rows)

    def close(self) -> None:
        """Release NVML."""
        if self.available:
            _guarded(self._nvml.nvmlShutdown)
            self.available = False
