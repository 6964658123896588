"""Memory shapes driven by model time: the healthy noise a leak detector must *not* flag (a warm-up
ratchet, a GC sawtooth) and the staircase leak it must (`rss-steps`: lasting steps at set times).

All use anonymous mmap regions written through page by page, so RSS really moves; closing a region
unmaps it and the OS gets the memory back at once (a freed bytearray may stay in the malloc heap).
"""

import mmap
import threading

from soak.refserver.clock import ModelClock
from soak.refserver.faults import MemoryShape, MemorySteps

RATCHET_STEPS = 5
SAWTOOTH_CHUNKS = 16
TICK_S = 0.02
_PAGE_PATTERN = b"\xa5" * mmap.PAGESIZE


def touched_region(size_bytes: int) -> mmap.mmap:
    """An anonymous mapping of `size_bytes` with every page written, so it counts in RSS."""
    region = mmap.mmap(-1, size_bytes)
    for offset in range(0, size_bytes, mmap.PAGESIZE):
        end = min(offset + mmap.PAGESIZE, size_bytes)
        region[offset:end] = _PAGE_PATTERN[:end - offset]
    return region


class MemoryNoise:
    """Drives the ratchet and the sawtooth from model time, on a background thread."""

    def __init__(self, clock: ModelClock, ratchet: MemoryShape | None, sawtooth: MemoryShape | None,
                 steps: MemorySteps | None = None) -> None:
        self._clock = clock
        self._ratchet_shape = ratchet
        self._sawtooth_shape = sawtooth
        self._steps_shape = steps
        self._steps: list[mmap.mmap] = []
        self._ratchet: list[mmap.mmap] = []
        self._sawtooth: list[mmap.mmap] = []
        self._cycle = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="refserver-memory-noise", daemon=True)

    @property
    def ratchet_bytes(self) -> int:
        return sum(len(region) for region in self._ratchet)

    @property
    def sawtooth_bytes(self) -> int:
        return sum(len(region) for region in self._sawtooth)

    @property
    def step_bytes(self) -> int:
        return sum(len(region) for region in self._steps)

    def start(self) -> None:
        if self._ratchet_shape or self._sawtooth_shape or self._steps_shape:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def tick(self, model_s: float) -> None:
        """Bring both patterns to where they should be at `model_s`."""
        if self._ratchet_shape:
            self._tick_ratchet(self._ratchet_shape, model_s)
        if self._sawtooth_shape:
            self._tick_sawtooth(self._sawtooth_shape, model_s)
        if self._steps_shape:
            self._tick_steps(self._steps_shape, model_s)

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            self.tick(self._clock.model_s())

    def _tick_ratchet(self, shape: MemoryShape, model_s: float) -> None:
        # One step every span/RATCHET_STEPS model seconds; the last lands at `span`, then flat.
        steps = min(RATCHET_STEPS, int(model_s / (shape.span_s / RATCHET_STEPS)))
        while len(self._ratchet) < steps:
            self._ratchet.append(touched_region(shape.size_bytes))

    def _tick_steps(self, steps: MemorySteps, model_s: float) -> None:
        # One region per step time passed; none is ever released.
        due = sum(1 for at_s in steps.at_s if model_s >= at_s)
        while len(self._steps) < due:
            self._steps.append(touched_region(steps.size_bytes))

    def _tick_sawtooth(self, shape: MemoryShape, model_s: float) -> None:
        # Grows linearly to the peak over one period, then everything is released at once.
        cycle, phase_s = divmod(model_s, shape.span_s)
        if cycle != self._cycle:
            self._cycle = cycle
            self._release(self._sawtooth)
        wanted = int(phase_s / shape.span_s * SAWTOOTH_CHUNKS)
        while len(self._sawtooth) < wanted:
            self._sawtooth.append(touched_region(shape.size_bytes // SAWTOOTH_CHUNKS))

    @staticmethod
    def _release(regions: list[mmap.mmap]) -> None:
        while regions:
            regions.pop().close()
