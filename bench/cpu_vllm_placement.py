"""soak's schedule lag beside a busy CPU vLLM: soak's placement against vLLM's default one.

Runs `soak start --model tiny` (the real CPU vLLM, the built-in tiny model) in pairs:

- `placed`: soak as shipped: the engine's OpenMP thread(s) on every usable core but the last, soak pinned to
  that last, reserved core (docs/vllm.md, "vLLM on CPU").
- `default`: with VLLM_CPU_OMP_THREADS_BIND=auto set, as a user may: vLLM places its engine itself and soak
  then leaves its own affinity alone — how soak ran before it placed anything.

Each run prints the client's schedule-lag P99, event-loop lag P99 and max, TTFT P99, the client.saturation
verdict, and the largest sleep overshoot a separate probe process saw meanwhile (its 10 ms sleeps, unpinned: the
machine's own stalls, which soak cannot fix). The pairs alternate so that whatever else the machine does falls on
both alike.

    python bench/cpu_vllm_placement.py [--pairs 2] [--duration 3m] [--rate 2]

`--sampler` measures instead what soak's process sampler costs the gevent loop beside a CPU vLLM: it starts the
tiny model (as `soak start --model tiny` would), then, in a gevent-patched child, a greenlet waking every 10 ms
records how late it wakes while another samples the vLLM tree with PSS every second — inline on the loop (how
soak sampled before) and through `off_loop` (a real thread, as now) — in alternating 20 s halves.

    python bench/cpu_vllm_placement.py --sampler [--pairs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = """
import sys, time
overshoots = []
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    before = time.monotonic()
    time.sleep(0.01)
    overshoots.append((time.monotonic() - before - 0.01) * 1000)
overshoots.sort()
print(overshoots[-1], overshoots[int(len(overshoots) * 0.999)])
"""


def run_soak(out: Path, duration: str, rate: float, env: dict[str, str]) -> dict:
    """One `soak start --model tiny` run; its summary."""
    cmd = [sys.executable, "-m", "soak", "start", "--model", "tiny", "--duration", duration, "--warmup", "30s",
           "--rate", str(rate), "--scenario", "chat_short", "--json", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"soak start failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def figures(summary: dict) -> dict:
    """The client's lateness and TTFT from a summary."""
    saturation = next(f for f in summary["findings"] if f["check"] == "client.saturation")
    details = saturation.get("details", {})
    ttft = (summary.get("latency_ms") or {}).get("ttft", {})
    return {"verdict": saturation["verdict"], "lag_p99_ms": details.get("lag_p99_ms"),
            "loop_p99_ms": details.get("loop_lag_p99_ms"), "loop_max_ms": details.get("loop_lag_max_ms"),
            "ttft_p99_ms": ttft.get("p99") if isinstance(ttft, dict) else None}


def one(label: str, duration: str, rate: float, seconds: float) -> dict:
    """A run in configuration `label` with the stall probe beside it."""
    env = dict(os.environ)
    env.pop("VLLM_CPU_OMP_THREADS_BIND", None)
    if label == "default":
        env["VLLM_CPU_OMP_THREADS_BIND"] = "auto"
    probe = subprocess.Popen([sys.executable, "-c", PROBE, str(seconds)], stdout=subprocess.PIPE, text=True)
    with tempfile.TemporaryDirectory(prefix="soak-bench-") as out:
        started = time.monotonic()
        result = figures(run_soak(Path(out), duration, rate, env))
    probe_max, probe_p999 = (float(x) for x in probe.communicate()[0].split())
    result |= {"probe_max_ms": probe_max, "probe_p999_ms": probe_p999, "wall_s": time.monotonic() - started}
    return result


LOOP_PROBE = """
from gevent import monkey; monkey.patch_all()
import json, sys, time
import gevent
from soak.telemetry.process import ProcessTreeSampler, off_loop
sampler = ProcessTreeSampler([int(pid) for pid in sys.argv[2].split(",")], pss_every_s=0)
late = []
def ticker():
    while True:
        before = time.monotonic()
        gevent.sleep(0.01)
        late.append((time.monotonic() - before - 0.01) * 1000)
def sampling():
    while True:
        off_loop(sampler.sample) if sys.argv[1] == "off_loop" else sampler.sample()
        gevent.sleep(1)
gevent.spawn(ticker)
gevent.spawn(sampling)
gevent.sleep(20)
late.sort()
print(json.dumps({"p99_ms": late[int(len(late) * 0.99)], "max_ms": late[-1], "ticks": len(late)}))
"""


def sampler_bench(pairs: int) -> None:
    """Loop lateness with the vLLM tree sampled inline and off the loop, on a tiny vLLM soak started."""
    from soak.config import resolve_config
    from soak.target.vllm import VllmTarget

    with tempfile.TemporaryDirectory(prefix="soak-bench-") as out:
        target = VllmTarget(resolve_config({"model": "tiny", "out": out, "duration": "1m"}, environ={}), Path(out))
        try:
            target.start()
            roots = ",".join(str(pid) for pid in target.root_pids())
            for pair in range(pairs):
                for mode in ("inline", "off_loop") if pair % 2 == 0 else ("off_loop", "inline"):
                    done = subprocess.run([sys.executable, "-c", LOOP_PROBE, mode, roots], capture_output=True,
                                          text=True, timeout=300, check=True)
                    found = json.loads(done.stdout)
                    print(f"{mode:8} loop lateness P99 {found['p99_ms']:7.1f} ms  max {found['max_ms']:7.1f} ms  "
                          f"({found['ticks']} ticks in 20 s)", flush=True)
        finally:
            target.stop()


def show(label: str, result: dict) -> None:
    def number(key: str) -> str:
        value = result.get(key)
        return f"{value:7.1f}" if isinstance(value, (int, float)) else "      —"

    print(f"{label:8} {result['verdict']:13} lag P99 {number('lag_p99_ms')} ms  loop P99 {number('loop_p99_ms')} "
          f"max {number('loop_max_ms')} ms  TTFT P99 {number('ttft_p99_ms')} ms  probe max {number('probe_max_ms')} "
          f"p99.9 {number('probe_p999_ms')} ms  ({result['wall_s']:.0f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--duration", default="3m")
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--sampler", action="store_true", help="measure the process sampler's cost to the loop")
    args = parser.parse_args()
    if args.sampler:
        sampler_bench(args.pairs)
        return
    seconds = float(args.duration.rstrip("m")) * 60 if args.duration.endswith("m") else float(args.duration.rstrip("s"))
    for pair in range(args.pairs):
        for label in ("placed", "default") if pair % 2 == 0 else ("default", "placed"):
            show(label, one(label, args.duration, args.rate, seconds + 60))


if __name__ == "__main__":
    main()
