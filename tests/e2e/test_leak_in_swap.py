"""A leak that leaves RSS: the reference server pages each planted leak out to swap as it writes it, so its RSS
stays flat while the memory it holds grows. `leak.rss` judges resident + swapped memory and must FAIL, saying so,
where the same run judged on RSS alone does not (two minutes are too short for RSS alone to rule the threshold out,
so it is INCONCLUSIVE or PASS, never FAIL or SUSPECT). Needs swap on the machine (CI creates a swap file); skips
without.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from soak.analysis.gates import Gates
from soak.analysis.loader import load_run_data
from soak.analysis.memory import check_rss
from soak.store import Store

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

MiB = 2**20
# At 4 req/s about 5 GiB/h, and some 150 MiB over the judged span: past the least growth that can FAIL (64 MiB).
LEAK = "384KiB"
SWAP_NEEDED = 512 * MiB
RUN = ["start", "--duration", "135s", "--warmup", "20s", "--window", "5s", "--sample-every", "1s", "--rate", "4",
       "--scenario", "chat_short", "--no-idle-probes", "--time-scale", "60", "--canary-every", "0",
       "--reference-fault", f"rss-leak-swapped={LEAK}", "--json"]


def _swap_missing() -> str | None:
    """Why this machine cannot run the test, or None."""
    if not Path("/proc/swaps").exists():
        return "needs Linux (MADV_PAGEOUT, /proc/PID/status VmSwap)"
    free = psutil.swap_memory().free
    if free < SWAP_NEEDED:
        return (f"needs swap on the machine ({free / MiB:.0f} MiB of swap free, {SWAP_NEEDED / MiB:.0f} MiB needed): "
                "without it MADV_PAGEOUT leaves the leak resident; as root: fallocate -l 2G /swapfile && "
                "chmod 600 /swapfile && mkswap /swapfile && swapon /swapfile")
    return None


@pytest.mark.skipif(_swap_missing() is not None, reason=_swap_missing() or "")
def test_a_leak_pushed_out_to_swap_fails_leak_rss_where_rss_alone_does_not(tmp_path, soak_cli):
    result = soak_cli(*RUN, "--out", str(tmp_path), timeout_s=400)
    assert result.returncode in (1, 3), result.stderr[-3000:]
    summary = json.loads(result.stdout)
    finding = next(f for f in summary["findings"] if f["check"] == "leak.rss")
    assert finding["verdict"] == "FAIL", finding
    assert finding["evidence"].startswith("resident + swapped memory of "), finding["evidence"]
    assert finding["per_request"]["value"] > 64 * 1024, finding["per_request"]

    store = Store.open(f"sqlite:///{tmp_path / 'soak.db'}")
    run = load_run_data(store, store.get_run(summary["run_id"]), stopped_early=False)
    server = max(run.processes, key=lambda p: float(p.swap_bytes.max()) if p.swap_bytes is not None else 0.0)
    measured = server.t_s >= run.warmup_s
    swap_grown = server.swap_bytes[measured][-1] - server.swap_bytes[measured][0]
    rss_grown = server.rss_bytes[measured][-1] - server.rss_bytes[measured][0]
    assert swap_grown >= 64 * MiB and rss_grown < swap_grown / 4, (swap_grown / MiB, rss_grown / MiB)

    rss_alone = replace(run, processes=tuple(replace(p, swap_bytes=None) for p in run.processes))
    judged_on_rss = check_rss(rss_alone, Gates())
    assert judged_on_rss.verdict in ("PASS", "INCONCLUSIVE"), judged_on_rss.evidence
    assert judged_on_rss.evidence.startswith("RSS of ") and judged_on_rss.value < finding["value"] / 10
