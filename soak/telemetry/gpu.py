"""NVML readings per GPU (those CUDA_VISIBLE_DEVICES picks) and VRAM per process of the server tree.

NVML may be missing (no driver, no GPU): `GpuSampler.available` is then False and the reason is kept for one
clean "no_gpu" event. Each NVML query is guarded on its own, so one failing call never kills a sample: a reading
NVML refuses (not supported, GPU lost, …) is None. XID errors arrive as NVML events, not as a counter: each GPU
gets an event set, drained without waiting at every sample, and `xid_errors` counts what was seen since start.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from soak.samples import GpuProcessReading, GpuReading

log = logging.getLogger(__name__)

MAX_XID_EVENTS_PER_SAMPLE = 64  # bound the drain, so a storm of events cannot stall a sample
KEPT_XID_EVENTS = 1000


def _guarded(call: Callable[[], Any]) -> Any:
    """The call's result, or None when NVML refuses it (not supported, lost GPU, …) or this pynvml lacks it."""
    try:
        return call()
    except Exception:  # pynvml raises NVMLError subclasses and ctypes errors alike
        return None


def _succeeds(call: Callable[[], Any]) -> bool:
    """Whether a call that returns nothing on success went through."""
    try:
        call()
    except Exception:  # see _guarded
        return False
    return True


def _text(value: Any) -> Any:
    """NVML strings arrive as bytes from older pynvml builds."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def visible_gpu_indices(count: int, environ: Mapping[str, str] | None = None,
                        uuids: Mapping[str, int] | None = None) -> list[int]:
    """NVML indices of the GPUs CUDA_VISIBLE_DEVICES names; all of them when it is unset.

    Entries are indices or (prefixes of) GPU/MIG UUIDs, mapped to NVML indices by `uuids`. As CUDA does, parsing
    stops at the first entry that names no device, and an empty value hides every GPU.
    """
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    picked: list[int] = []
    for part in visible.split(","):
        index = _device_index(part.strip(), count, uuids or {})
        if index is None:
            break
        if index not in picked:
            picked.append(index)
    return picked


def _device_index(entry: str, count: int, uuids: Mapping[str, int]) -> int | None:
    """The NVML index one CUDA_VISIBLE_DEVICES entry names, or None."""
    if entry.isdigit():
        return int(entry) if int(entry) < count else None
    wanted = entry.lower()
    if not wanted:
        return None
    matches = {index for uuid, index in uuids.items()
               if uuid.lower().startswith(wanted) or uuid.lower().startswith("gpu-" + wanted)}
    return matches.pop() if len(matches) == 1 else None


class XidWatch:
    """XID (critical error) events of one GPU, read from an NVML event set without waiting."""

    def __init__(self, nvml: Any, handle: Any):
        self._nvml = nvml
        self._set = _guarded(lambda: nvml.nvmlEventSetCreate())
        registered = self._set is not None and _succeeds(
            lambda: nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._set))
        self.count: int | None = 0 if registered else None  # None: this GPU/driver cannot report XIDs
        if not registered:
            self.close()

    def poll(self) -> list[int]:
        """The XID numbers that arrived since the last poll (a 0 ms wait; NVML's timeout ends the drain)."""
        if self.count is None:
            return []
        wait = getattr(self._nvml, "nvmlEventSetWait_v2", None) or getattr(self._nvml, "nvmlEventSetWait", None)
        if wait is None:
            return []
        xids = []
        for _ in range(MAX_XID_EVENTS_PER_SAMPLE):
            event = _guarded(lambda: wait(self._set, 0))
            if event is None:
                break
            xids.append(int(event.eventData))
        self.count += len(xids)
        return xids

    def close(self) -> None:
        """Free the event set."""
        if self._set is not None:
            _guarded(lambda: self._nvml.nvmlEventSetFree(self._set))
            self._set = None


@dataclass(frozen=True)
class GpuFacts:
    """What does not change about one GPU during a run (the environment record and `soak doctor` keep it)."""

    index: int
    name: str | None
    uuid: str | None
    memory_total_bytes: int | None
    driver: str | None
    cuda_driver_version: int | None  # as NVML gives it: 12080 is CUDA 12.8

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class XidEvent:
    """One XID error a GPU reported (the run records it as a `gpu_xid` event)."""

    gpu_index: int
    xid: int
    at_epoch_s: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class GpuSampler:
    """Reads per-GPU state, XID events and per-process VRAM through pynvml (or a module-like stand-in)."""

    def __init__(self, nvml: Any = None, environ: Mapping[str, str] | None = None) -> None:
        self.available = False
        self.reason = ""
        self.device_count = 0
        self.xid_events: list[XidEvent] = []  # oldest first
        self._nvml: Any = None
        self._handles: list[tuple[int, Any]] = []
        self._xids: dict[int, XidWatch] = {}
        self._open(nvml, os.environ if environ is None else environ)

    def _open(self, nvml: Any, environ: Mapping[str, str]) -> None:
        try:
            if nvml is None:
                import pynvml as nvml
            nvml.nvmlInit()
        except Exception as exc:  # any failure to load NVML means "no GPU"
            self.reason = f"NVML not available: {exc}"
            return
        self._nvml = nvml
        self.device_count = _guarded(lambda: nvml.nvmlDeviceGetCount()) or 0
        indices = visible_gpu_indices(self.device_count, environ, self._uuid_map())
        handles = [(i, _guarded(lambda i=i: nvml.nvmlDeviceGetHandleByIndex(i))) for i in indices]
        self._handles = [(i, handle) for i, handle in handles if handle is not None]
        self._xids = {i: XidWatch(nvml, handle) for i, handle in self._handles}
        self.available = bool(self._handles)
        if not self.available:
            self.reason = (f"NVML sees {self.device_count} GPU(s), none picked by CUDA_VISIBLE_DEVICES="
                           f"{environ.get('CUDA_VISIBLE_DEVICES')!r}" if self.device_count else "NVML sees no GPU")

    def _uuid_map(self) -> dict[str, int]:
        """UUID of every GPU and of its MIG instances → the GPU's NVML index (for UUID-form CUDA_VISIBLE_DEVICES)."""
        nv, found = self._nvml, {}
        for index in range(self.device_count):
            handle = _guarded(lambda i=index: nv.nvmlDeviceGetHandleByIndex(i))
            uuid = _text(_guarded(lambda h=handle: nv.nvmlDeviceGetUUID(h))) if handle is not None else None
            if uuid:
                found[uuid] = index
                found.update({mig: index for mig in self._mig_uuids(handle)})
        return found

    def _mig_uuids(self, handle: Any) -> list[str]:
        nv = self._nvml
        mode = _guarded(lambda: nv.nvmlDeviceGetMigMode(handle))
        if not mode or mode[0] != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
            return []
        slots = _guarded(lambda: nv.nvmlDeviceGetMaxMigDeviceCount(handle)) or 0
        migs = [_guarded(lambda j=j: nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)) for j in range(slots)]
        return [_text(uuid) for mig in migs if mig is not None
                if (uuid := _guarded(lambda m=mig: nv.nvmlDeviceGetUUID(m)))]

    def describe(self) -> list[GpuFacts]:
        """Static facts per GPU for the environment record: name, UUID, memory, driver, CUDA version."""
        nv = self._nvml
        if not self.available:
            return []
        driver = _text(_guarded(lambda: nv.nvmlSystemGetDriverVersion()))
        cuda = _guarded(lambda: nv.nvmlSystemGetCudaDriverVersion_v2())
        return [
            GpuFacts(index=index, name=_text(_guarded(lambda h=handle: nv.nvmlDeviceGetName(h))),
                     uuid=_text(_guarded(lambda h=handle: nv.nvmlDeviceGetUUID(h))),
                     memory_total_bytes=_guarded(lambda h=handle: nv.nvmlDeviceGetMemoryInfo(h).total),
                     driver=driver, cuda_driver_version=cuda)
            for index, handle in self._handles
        ]

    def sample(self, pids: list[int]) -> tuple[list[GpuReading], list[GpuProcessReading]]:
        """(one reading per GPU, one per tree process holding VRAM on a GPU)."""
        if not self.available:
            return [], []
        gpus, processes = [], []
        wanted = set(pids)
        for index, handle in self._handles:
            gpus.append(self._gpu_reading(index, handle))
            processes.extend(self._process_readings(index, handle, wanted))
        return gpus, processes

    def _gpu_reading(self, index: int, handle: Any) -> GpuReading:
        nv = self._nvml
        memory = _guarded(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
        utilization = _guarded(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
        power_mw = _guarded(lambda: nv.nvmlDeviceGetPowerUsage(handle))
        return GpuReading(
            gpu_index=index,
            name=_text(_guarded(lambda: nv.nvmlDeviceGetName(handle))),
            mem_used_bytes=_guarded(lambda: memory.used),
            mem_total_bytes=_guarded(lambda: memory.total),
            util_pct=_guarded(lambda: utilization.gpu),
            temp_c=_guarded(lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)),
            power_w=power_mw / 1000.0 if isinstance(power_mw, (int, float)) else None,
            sm_clock_mhz=_guarded(lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
            throttle_reasons=self._throttle_reasons(handle),
            ecc_errors=_guarded(lambda: nv.nvmlDeviceGetTotalEccErrors(
                handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)),
            xid_errors=self._poll_xids(index),
        )

    def _throttle_reasons(self, handle: Any) -> int | None:
        """The clock-event (throttle) bitmask; drivers before 535 only know the older name."""
        nv = self._nvml
        reasons = _guarded(lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(handle))
        if reasons is None:
            reasons = _guarded(lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
        return reasons

    def _poll_xids(self, index: int) -> int | None:
        """XIDs seen on this GPU since start (None when it cannot report them); new ones join `xid_events`."""
        watch = self._xids.get(index)
        if watch is None:
            return None
        now_s = time.time()
        for xid in watch.poll():
            log.warning("GPU %d reported XID %d", index, xid)
            self.xid_events.append(XidEvent(gpu_index=index, xid=xid, at_epoch_s=now_s))
        del self.xid_events[:-KEPT_XID_EVENTS]
        return watch.count

    def drain_xid_events(self) -> list[XidEvent]:
        """XID events gathered by samples since the last drain (for the caller to record as run events)."""
        events, self.xid_events = self.xid_events, []
        return events

    def _process_readings(self, index: int, handle: Any, wanted: set[int]) -> list[GpuProcessReading]:
        """VRAM per tree process: compute contexts first, graphics ones only for PIDs not already seen."""
        nv, used_by_pid = self._nvml, {}
        for query in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            processes = _guarded(lambda q=query: getattr(nv, q)(handle)) or []
            for process in processes:
                pid = _guarded(lambda p=process: int(p.pid))
                if pid in wanted and pid not in used_by_pid:
                    used_by_pid[pid] = _guarded(lambda p=process: p.usedGpuMemory)
        return [GpuProcessReading(gpu_index=index, pid=pid, used_bytes=used) for pid, used in used_by_pid.items()]

    def holding(self, pids: list[int]) -> dict[int, int | None]:
        """The PIDs among `pids` that NVML lists on a picked GPU now → their VRAM bytes (None: NVML won't say)."""
        if not self.available:
            return {}
        wanted, held = set(pids), {}
        for index, handle in self._handles:
            for reading in self._process_readings(index, handle, wanted):
                pid, used_bytes = reading.pid, reading.used_bytes
                held[pid] = held.get(pid) if used_bytes is None else (held.get(pid) or 0) + used_bytes
        return held

    def close(self) -> None:
        """Free the event sets and release NVML."""
        if self._nvml is None:
            return
        for watch in self._xids.values():
            watch.close()
        self._xids = {}
        nvml = self._nvml
        _guarded(lambda: nvml.nvmlShutdown())
        self._nvml = None
        self.available = False
