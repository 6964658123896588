"""A staircase leak on the reference server: a few large steps late in the run that never come back FAIL leak.rss
with the steps named, where one step alone, or a line through them, would say less. Slow: about two minutes."""

from __future__ import annotations

import json
import re

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

# 135 s at x600 is 22.5 model hours: steps at model hours 12 and 18 land at 72 s and 108 s of wall time, each
# followed by at least five 5-second windows.
RUN = ["start", "--duration", "135s", "--warmup", "20s", "--window", "5s", "--sample-every", "1s",
       "--rate", "2", "--scenario", "chat_short", "--no-idle-probes", "--canary-every", "0", "--time-scale", "600",
       "--json"]


def test_late_steps_that_never_return_fail_leak_rss_with_the_steps_named(tmp_path, soak_cli):
    result = soak_cli(*RUN, "--out", str(tmp_path), "--reference-fault", "rss-steps=100MiB@12h,18h",
                      "--reference-fault", "gc-sawtooth=16MiB:10m", timeout_s=280)
    assert result.returncode in (1, 3), result.stderr[-3000:]
    findings = {f["check"]: f for f in json.loads(result.stdout)["findings"]}
    rss = findings["leak.rss"]
    assert rss["verdict"] == "FAIL", rss
    net = rss["details"]["net_growth"]
    assert net["is_staircase"] and len(net["stairs"]) == 2, net
    assert 150 * 2**20 <= net["stepped"] <= 260 * 2**20, net
    # "RSS of … grew +200.0 MiB in 2 steps (1m12s, 1m48s), none returned (…)"
    assert re.search(r"grew \+\d+(\.\d)? MiB in 2 steps \([^)]+, [^)]+\), none returned", rss["evidence"]), rss
    for stair, planted_s in zip(net["stairs"], (72.0, 108.0)):
        assert abs(stair["t_s"] - planted_s) <= 12.0, net  # within two windows of where it was planted
