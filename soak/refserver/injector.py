"""Runtime effects of the active faults: the hooks the API and the engine call.

Everything random draws from generators seeded by `--seed` and the fault's name, so a run with
the same flags and the same request order misbehaves the same way.
"""

import os
import random
import sys
import threading

from soak.refserver.clock import SECONDS_PER_HOUR, EventSchedule, ModelClock, ramp
from soak.refserver.faults import EventFault, FaultSet, KVLeak
from soak.refserver.memnoise import MemoryNoise
from soak.refserver.swapped import SwappedLeak, swap_enabled

CRASH_EXIT_CODE = 70  # EX_SOFTWARE: what an engine death looks like to the supervisor
STALL_LENGTH_RANGE_S = (1.0, 3.0)
ENGINE_DEAD_TRACEBACK = """ERROR soak refserver: EngineCore encountered a fatal error.
Traceback (most recent call last):
  File "soak/refserver/engine.py", line 1, in _loop
    raise EngineDeadError("injected fault")
soak.refserver.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause."""
SCHEDULE_SHOWN = 20  # events listed by describe()


def _say(message: str) -> None:
    print(f"soak refserver: {message}", file=sys.stderr, flush=True)


class FaultInjector:
    """Applies a FaultSet against a model clock."""

    def __init__(self, faults: FaultSet, clock: ModelClock, seed: int, horizon_s: float,
                 device: str = "cpu") -> None:
        self.faults = faults
        self.clock = clock
        self.horizon_s = horizon_s
        self._device = device
        self._error_rng = random.Random(f"{seed}/error-rise")
        self._bursts = self._schedule(faults.error_bursts, f"{seed}/error-bursts")
        self._stalls = self._schedule(faults.stalls, f"{seed}/stalls")
        self._stalls_taken = 0
        self._noise = MemoryNoise(clock, faults.warmup_ratchet, faults.gc_sawtooth, faults.rss_steps)
        self._retained: list[bytearray] = []
        self._images_kept: dict[str, bytearray] = {}  # image-leak: per distinct picture, never evicted
        self._adapters_kept: list[bytearray] = []  # lora-leak: per adapter load, never freed by its unload
        self._swapped = SwappedLeak(faults.rss_leak_swapped_bytes) if faults.rss_leak_swapped_bytes else None
        self._leaked_fds: list[int] = []
        self._vram: list[object] = []
        self._hang_reported = False
        self._timers: list[threading.Timer] = []
        self._finished = 0

    def _schedule(self, fault: EventFault | None, seed: str) -> EventSchedule | None:
        if fault is None:
            return None
        fixed = fault.length_s

        def length_s(rng: random.Random) -> float:
            return fixed if fixed is not None else rng.uniform(*STALL_LENGTH_RANGE_S)

        return EventSchedule(fault.rate_per_hour, self.clock, random.Random(seed), length_s)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the time-driven faults; call once the model clock has started."""
        self._noise.start()
        if self._swapped is not None and not swap_enabled():
            _say("fault rss-leak-swapped: this machine has no swap, so the leak cannot be paged out and stays "
                 "resident")
        if self.faults.crash_after_s is not None:
            self._at_model_time(self.faults.crash_after_s, self._crash)
        if self.faults.log_engine_dead_after_s is not None:
            self._at_model_time(self.faults.log_engine_dead_after_s, self._log_engine_dead)

    def _at_model_time(self, model_s: float, action) -> None:
        timer = threading.Timer(max(0.0, self.clock.wall_of_model(model_s) - self.clock.wall_s()), action)
        timer.daemon = True
        timer.start()
        self._timers.append(timer)

    def stop(self) -> None:
        self._noise.stop()
        for timer in self._timers:
            timer.cancel()

    def _crash(self) -> None:
        _say(f"fault crash-after={self.faults.crash_after_s:g}s (model time): simulated engine death, "
             f"exit {CRASH_EXIT_CODE}")
        os._exit(CRASH_EXIT_CODE)

    def _log_engine_dead(self) -> None:
        """Write what a dying vLLM engine writes (a traceback ending in EngineDeadError), and keep serving."""
        _say(f"fault log-engine-dead-after={self.faults.log_engine_dead_after_s:g}s (model time): a planted fatal "
             "log line; the server keeps serving")
        print(ENGINE_DEAD_TRACEBACK, file=sys.stderr, flush=True)

    # -- API hooks -------------------------------------------------------------------------------

    def request_error(self) -> str | None:
        """Why this new request must fail with HTTP 500, or None to serve it."""
        if self._bursts is not None and self._bursts.active(self.clock.wall_s()):
            return "injected fault error-bursts: the server is in an error burst"
        if self.faults.error_rise is not None and self._error_rng.random() < self.error_probability():
            return "injected fault error-rise: random internal error"
        return None

    def error_probability(self) -> float:
        """The error-rise probability now (0 without that fault)."""
        if self.faults.error_rise is None:
            return 0.0
        return ramp(*self.faults.error_rise, self.clock.model_s(), self.horizon_s)

    # -- engine hooks ----------------------------------------------------------------------------

    @property
    def kv_leak_on_abort(self) -> KVLeak | None:
        return self.faults.kv_leak_on_abort

    def hang_reached(self) -> bool:
        """True once hang-after has passed."""
        return self.faults.hang_after_s is not None and self.clock.model_s() >= self.faults.hang_after_s

    def invalid_output(self) -> bool:
        """invalid-output-after: whether structured answers (JSON, tool calls) are to be broken by now."""
        after_s = self.faults.invalid_output_after_s
        return after_s is not None and self.clock.model_s() >= after_s

    def engine_hung(self) -> bool:
        """True once hang-after has passed: the engine must stop producing tokens for good."""
        hung = self.hang_reached()
        if hung and not self._hang_reported:
            self._hang_reported = True
            _say(f"fault hang-after={self.faults.hang_after_s:g}s (model time): engine loop stopped")
        return hung

    def stall_due_s(self) -> float:
        """Wall seconds the engine must pause now (0 if no stall has started since the last call)."""
        if self._stalls is None:
            return 0.0
        now_s = self.clock.wall_s()
        windows = self._stalls.windows_until(now_s)
        pending, self._stalls_taken = windows[self._stalls_taken:], len(windows)
        # A stall that began while the engine was busy is served for what is left of it.
        return max((window.end_s - now_s for window in pending), default=0.0)

    def step_delay_s(self, compute_s: float) -> float:
        """Extra seconds a step of `compute_s` must take under latency-creep."""
        model_hours = self.clock.model_s() / SECONDS_PER_HOUR
        return compute_s * self.faults.latency_creep_pct / 100.0 * model_hours

    def corrupt_token(self, token: int) -> int:
        """The token to emit: under corrupt-after=N, once N requests finished, every byte token has its lowest bit
        flipped (a numerics bug: the server answers, fluently wrong); otherwise `token` itself."""
        if self.faults.corrupt_after is None or self._finished < self.faults.corrupt_after or token > 255:
            return token
        return token ^ 1

    def on_request_finished(self, reason: str, prompt_tokens: int) -> None:
        """Plant the per-request leaks (host memory, fds, device memory) of a request that ended with finish
        `reason` ("stop", "length" or "abort") after a prompt of `prompt_tokens` tokens, and count it."""
        self._finished += 1
        if self.faults.rss_leak_bytes:
            self._retain(self.faults.rss_leak_bytes)
        if self._swapped is not None:
            self._swapped.leak()
        kind_leak = self.faults.rss_leak_on
        if kind_leak is not None and kind_leak.leaks(reason, prompt_tokens):
            self._retain(kind_leak.size_bytes)
        for _ in range(self.faults.fd_leak):
            self._leaked_fds.append(os.open(os.devnull, os.O_RDONLY))
        if self.faults.vram_leak_bytes:
            self._vram.append(_device_bytes(self.faults.vram_leak_bytes, self._device))

    def on_images(self, digests: list[str]) -> None:
        """image-leak: a multimodal cache that never evicts — each picture not seen before (by digest) keeps
        its bytes for good; a picture sent again adds nothing."""
        if not self.faults.image_leak_bytes:
            return
        for digest in digests:
            if digest not in self._images_kept:
                self._images_kept[digest] = bytearray(b"\xa5") * self.faults.image_leak_bytes

    def on_adapter_load(self, name: str) -> None:
        """lora-leak: every load of a LoRA adapter keeps its bytes for good (what its unload should have freed)."""
        if self.faults.lora_leak_bytes:
            self._adapters_kept.append(bytearray(b"\xa5") * self.faults.lora_leak_bytes)

    def _retain(self, size_bytes: int) -> None:
        self._retained.append(bytearray(b"\xa5") * size_bytes)  # written, so resident

    # -- introspection ---------------------------------------------------------------------------

    def describe(self) -> dict:
        """The active faults and their live state, for /debug/faults."""
        now_s = self.clock.wall_s()
        return {
            "faults": list(self.faults.texts),
            "time_scale": self.clock.time_scale,
            "fault_horizon_s": self.horizon_s,
            "uptime_s": now_s,
            "model_time_s": now_s * self.clock.time_scale,
            "hung": self.hang_reached(),
            "error_probability": self.error_probability(),
            "error_bursts": _windows(self._bursts, now_s),
            "stalls": _windows(self._stalls, now_s),
            "stalls_taken": self._stalls_taken,
            "retained_bytes": sum(len(buffer) for buffer in self._retained),
            "image_leak_bytes": sum(len(buffer) for buffer in self._images_kept.values()),
            "images_kept": len(self._images_kept),
            "lora_leak_bytes": sum(len(buffer) for buffer in self._adapters_kept),
            "swapped_leak_bytes": 0 if self._swapped is None else self._swapped.leaked_bytes,
            "leaked_fds": len(self._leaked_fds),
            "finished_requests": self._finished,
            "corrupting": self.faults.corrupt_after is not None and self._finished >= self.faults.corrupt_after,
            "invalid_output": self.invalid_output(),
            "vram_leaked_bytes": self.faults.vram_leak_bytes * len(self._vram),
            "ratchet_bytes": self._noise.ratchet_bytes,
            "sawtooth_bytes": self._noise.sawtooth_bytes,
            "step_bytes": self._noise.step_bytes,
        }


def _windows(schedule: EventSchedule | None, now_s: float) -> list[list[float]]:
    """Recent and upcoming events as [start, end] wall seconds of uptime."""
    if schedule is None:
        return []
    recent = schedule.windows_until(now_s)[-SCHEDULE_SHOWN:]
    return [[w.start_s, w.end_s] for w in recent + schedule.upcoming(now_s, SCHEDULE_SHOWN)]


def _device_bytes(size_bytes: int, device: str):
    import torch  # only the vram-leak fault needs it here

    return torch.full((size_bytes,), 0xA5, dtype=torch.uint8, device=device)
