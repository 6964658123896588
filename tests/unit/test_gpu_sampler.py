"""GpuSampler against a stand-in for the pynvml module (NVML is a C library; the sampler's logic stays real)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from soak.samples import GpuProcessReading, GpuReading
from soak.telemetry.gpu import MAX_XID_EVENTS_PER_SAMPLE, GpuSampler, visible_gpu_indices

# What NVML reads of a GPU (the other fields of a GpuReading are a dcgm-exporter page's).
NVML_FIELDS = ("gpu_index", "name", "mem_used_bytes", "mem_total_bytes", "util_pct", "temp_c", "power_w",
               "sm_clock_mhz", "throttle_reasons", "ecc_errors", "xid_errors")


def nvml_readings(reading: GpuReading) -> dict:
    return {name: getattr(reading, name) for name in NVML_FIELDS}


class FakeNVMLError(Exception):
    """What pynvml raises (NVMLError subclasses)."""


@dataclass
class FakeGpu:
    uuid: str
    name: str | bytes = "NVIDIA H200"
    used_bytes: int = 60 << 30
    total_bytes: int = 140 << 30
    compute: list[tuple[int, int | None]] = field(default_factory=list)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    xids: deque = field(default_factory=deque)
    migs: list[str] = field(default_factory=list)


class FakeNvml:
    """The few pynvml functions GpuSampler calls; any name in `failing` raises, any in `missing` is absent."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_DEVICE_MIG_ENABLE = 1
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, gpus: list[FakeGpu], failing: set[str] = frozenset(), init_error: bool = False,
                 missing: set[str] = frozenset()):
        self.gpus = gpus
        self.failing = set(failing)
        self.missing = set(missing)
        self.init_error = init_error
        self.shutdowns = 0
        self.freed_sets: list[int] = []
        self._sets: dict[int, list[int]] = {}

    def __getattribute__(self, name: str):
        if name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        if name.startswith("nvml") and name in object.__getattribute__(self, "failing"):
            def refuse(*_args):
                raise FakeNVMLError(f"{name}: Not Supported")
            return refuse
        return object.__getattribute__(self, name)

    # -- system
    def nvmlInit(self):
        if self.init_error:
            raise FakeNVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlSystemGetDriverVersion(self):
        return b"570.86.15"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 12080

    # -- device (a handle is the GPU's index)
    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUUID(self, handle):
        return self.gpus[handle].uuid if isinstance(handle, int) else handle[1]

    def nvmlDeviceGetName(self, handle):
        return self.gpus[handle].name

    def nvmlDeviceGetMemoryInfo(self, handle):
        gpu = self.gpus[handle]
        return SimpleNamespace(used=gpu.used_bytes, total=gpu.total_bytes, free=gpu.total_bytes - gpu.used_bytes)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 61

    def nvmlDeviceGetPowerUsage(self, handle):
        return 412_500

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0x4

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return 0x20

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter):
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.gpus[handle].compute]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.gpus[handle].graphics]

    def nvmlDeviceGetMigMode(self, handle):
        return [1 if self.gpus[handle].migs else 0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        migs = self.gpus[handle].migs
        if index >= len(migs):
            raise FakeNVMLError("Not Found")
        return ("mig", migs[index])

    # -- events (a set remembers the GPUs registered on it)
    def nvmlEventSetCreate(self):
        handle = len(self._sets) + 100
        self._sets[handle] = []
        return handle

    def nvmlDeviceRegisterEvents(self, handle, event_types, event_set):
        assert event_types == self.nvmlEventTypeXidCriticalError
        self._sets[event_set].append(handle)

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        assert timeout_ms == 0  # a sample must never block on events
        for handle in self._sets[event_set]:
            if self.gpus[handle].xids:
                return SimpleNamespace(device=handle, eventType=8, eventData=self.gpus[handle].xids.popleft())
        raise FakeNVMLError("Timeout")

    def nvmlEventSetFree(self, event_set):
        self.freed_sets.append(event_set)


def two_gpus() -> FakeNvml:
    return FakeNvml([FakeGpu("GPU-aaaa1111-0000"), FakeGpu("GPU-bbbb2222-0000", migs=["MIG-cccc3333"])])


def test_no_nvml_means_unavailable_with_a_reason():
    sampler = GpuSampler(nvml=FakeNvml([], init_error=True), environ={})
    assert not sampler.available and "NVML not available" in sampler.reason
    assert sampler.sample([1]) == ([], []) and sampler.describe() == [] and sampler.holding([1]) == {}
    sampler.close()


def test_a_gpu_row_holds_every_reading():
    nvml = FakeNvml([FakeGpu("GPU-aaaa", name=b"NVIDIA H200")])
    gpu_rows, _ = GpuSampler(nvml=nvml, environ={}).sample([])
    assert gpu_rows == [GpuReading(
        gpu_index=0, name="NVIDIA H200", mem_used_bytes=60 << 30, mem_total_bytes=140 << 30,
        util_pct=87, temp_c=61, power_w=412.5, sm_clock_mhz=1980, throttle_reasons=0x4,
        ecc_errors=0, xid_errors=0,
    )]


@pytest.mark.parametrize(("call", "column"), [
    ("nvmlDeviceGetMemoryInfo", "mem_used_bytes"), ("nvmlDeviceGetUtilizationRates", "util_pct"),
    ("nvmlDeviceGetTemperature", "temp_c"), ("nvmlDeviceGetPowerUsage", "power_w"),
    ("nvmlDeviceGetClockInfo", "sm_clock_mhz"), ("nvmlDeviceGetTotalEccErrors", "ecc_errors"),
    ("nvmlDeviceGetName", "name"),
])
def test_one_refused_call_blanks_one_reading_only(call, column):
    sampler = GpuSampler(nvml=FakeNvml([FakeGpu("GPU-aaaa")], failing={call}), environ={})
    (row,), _ = sampler.sample([])
    assert getattr(row, column) is None
    others = {k: v for k, v in nvml_readings(row).items()
              if k != column and not (call.endswith("MemoryInfo") and k.startswith("mem_"))}
    assert all(value is not None for value in others.values())


def test_a_lost_gpu_gives_empty_readings_not_an_exception():
    every_device_call = {name for name in dir(FakeNvml) if name.startswith("nvmlDeviceGet") and
                         name not in ("nvmlDeviceGetHandleByIndex", "nvmlDeviceGetCount")}
    nvml = FakeNvml([FakeGpu("GPU-aaaa", compute=[(10, 1)])])
    sampler = GpuSampler(nvml=nvml, environ={})
    nvml.failing |= every_device_call | {"nvmlEventSetWait_v2"}
    (row,), processes = sampler.sample([10])
    assert row.gpu_index == 0 and processes == []
    assert all(value is None for k, value in nvml_readings(row).items() if k not in ("gpu_index", "xid_errors"))


def test_an_older_pynvml_without_some_functions_still_samples():
    missing = {"nvmlEventSetCreate", "nvmlEventSetWait_v2", "nvmlDeviceGetCurrentClocksEventReasons",
               "nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetMigMode", "nvmlSystemGetCudaDriverVersion_v2"}
    nvml = FakeNvml([FakeGpu("GPU-aaaa", compute=[(10, 5)])], missing=missing)
    sampler = GpuSampler(nvml=nvml, environ={"CUDA_VISIBLE_DEVICES": "GPU-aaaa"})
    (row,), processes = sampler.sample([10])
    assert row.xid_errors is None and row.throttle_reasons == 0x20 and row.mem_used_bytes == 60 << 30
    assert processes == [GpuProcessReading(gpu_index=0, pid=10, used_bytes=5)]
    assert sampler.describe()[0].cuda_driver_version is None
    sampler.close()


def test_older_drivers_report_throttle_reasons_under_the_old_name():
    nvml = FakeNvml([FakeGpu("GPU-aaaa")], failing={"nvmlDeviceGetCurrentClocksEventReasons"})
    (row,), _ = GpuSampler(nvml=nvml, environ={}).sample([])
    assert row.throttle_reasons == 0x20


def test_vram_per_process_only_for_the_tree():
    nvml = FakeNvml([FakeGpu("GPU-aaaa", compute=[(10, 3 << 30), (99, 5 << 30), (11, None)],
                             graphics=[(10, 7), (12, 1 << 20)])])
    sampler = GpuSampler(nvml=nvml, environ={})
    _, processes = sampler.sample([10, 11, 12, 13])
    assert processes == [GpuProcessReading(gpu_index=0, pid=10, used_bytes=3 << 30),
                         GpuProcessReading(gpu_index=0, pid=11, used_bytes=None),
                         GpuProcessReading(gpu_index=0, pid=12, used_bytes=1 << 20)]
    assert sampler.holding([10, 11, 13]) == {10: 3 << 30, 11: None}  # 11 is listed: it still holds memory
    assert sampler.holding([10, 11, 12]) == {10: 3 << 30, 11: None, 12: 1 << 20}


def test_vram_of_one_process_on_two_gpus_adds_up():
    nvml = FakeNvml([FakeGpu("GPU-a", compute=[(10, 100)]), FakeGpu("GPU-b", compute=[(10, 50)])])
    assert GpuSampler(nvml=nvml, environ={}).holding([10]) == {10: 150}


@pytest.mark.parametrize(("visible", "indices"), [
    (None, [0, 1]), ("1", [1]), ("1,0", [1, 0]), ("GPU-bbbb2222-0000", [1]), ("GPU-bbbb", [1]),
    ("bbbb2222", [1]), ("MIG-cccc3333", [1]), ("0,7,1", [0]), ("", []), ("GPU-", []), ("0,0", [0]),
])
def test_cuda_visible_devices_picks_gpus_as_cuda_does(visible, indices):
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    sampler = GpuSampler(nvml=two_gpus(), environ=environ)
    assert [row.index for row in sampler.describe()] == indices
    assert sampler.available is bool(indices)
    if not indices:
        assert "CUDA_VISIBLE_DEVICES" in sampler.reason


def test_visible_gpu_indices_without_uuids_takes_numbers_only():
    assert visible_gpu_indices(4, {"CUDA_VISIBLE_DEVICES": "3, 1"}) == [3, 1]
    assert visible_gpu_indices(4, {"CUDA_VISIBLE_DEVICES": "GPU-1,2"}) == []
    assert visible_gpu_indices(2, {}) == [0, 1]


def test_describe_names_gpus_and_driver():
    (first, second) = GpuSampler(nvml=two_gpus(), environ={}).describe()
    assert first.to_dict() == {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-aaaa1111-0000",
                               "memory_total_bytes": 140 << 30, "driver": "570.86.15", "cuda_driver_version": 12080}
    assert second.uuid == "GPU-bbbb2222-0000"


def test_xid_events_are_counted_and_kept():
    nvml = two_gpus()
    sampler = GpuSampler(nvml=nvml, environ={})
    nvml.gpus[1].xids.extend([79, 48])
    rows, _ = sampler.sample([])
    assert [row.xid_errors for row in rows] == [0, 2]
    assert [(e.gpu_index, e.xid) for e in sampler.drain_xid_events()] == [(1, 79), (1, 48)]
    assert sampler.drain_xid_events() == []
    nvml.gpus[1].xids.append(13)
    rows, _ = sampler.sample([])
    assert rows[1].xid_errors == 3  # counts since the sampler started


def test_an_xid_storm_is_drained_in_bounded_steps():
    nvml = FakeNvml([FakeGpu("GPU-a", xids=deque([31] * (MAX_XID_EVENTS_PER_SAMPLE + 5)))])
    sampler = GpuSampler(nvml=nvml, environ={})
    assert sampler.sample([])[0][0].xid_errors == MAX_XID_EVENTS_PER_SAMPLE
    assert sampler.sample([])[0][0].xid_errors == MAX_XID_EVENTS_PER_SAMPLE + 5


@pytest.mark.parametrize("refused", ["nvmlEventSetCreate", "nvmlDeviceRegisterEvents"])
def test_xids_read_unknown_when_events_are_not_supported(refused):
    nvml = FakeNvml([FakeGpu("GPU-a", xids=deque([79]))], failing={refused})
    (row,), _ = GpuSampler(nvml=nvml, environ={}).sample([])
    assert row.xid_errors is None  # unknown, not zero


def test_close_frees_event_sets_and_nvml_once():
    nvml = two_gpus()
    sampler = GpuSampler(nvml=nvml, environ={})
    sampler.close()
    sampler.close()
    assert nvml.shutdowns == 1 and len(nvml.freed_sets) == 2
    assert not sampler.available and sampler.sample([1]) == ([], [])
