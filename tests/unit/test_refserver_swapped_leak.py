"""The rss-leak-swapped fault: parsed like rss-leak, and a leak written then paged out of RSS in this very process."""

from __future__ import annotations

import os

import pytest

from soak.refserver import swapped
from soak.refserver.faults import FaultSpecError, parse_faults
from soak.refserver.swapped import SwappedLeak, swap_enabled
from soak.telemetry.process import swap_bytes

MiB = 2**20


def test_the_fault_takes_a_byte_size_per_request():
    assert parse_faults(["rss-leak-swapped=2MiB"]).rss_leak_swapped_bytes == 2 * MiB
    assert parse_faults([]).rss_leak_swapped_bytes == 0
    for text, why in (("rss-leak-swapped", "needs a value"), ("rss-leak-swapped=0", "> 0"),
                      ("rss-leak-swapped=lots", "malformed byte size")):
        with pytest.raises(FaultSpecError, match=why):
            parse_faults([text])


def _rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_each_leak_is_written_and_then_in_swap_where_the_machine_has_swap(monkeypatch):
    monkeypatch.setattr(swapped, "ARENA_BYTES", 8 * MiB)  # small arenas, so three leaks of 3 MiB need two
    leak = SwappedLeak(3 * MiB)
    swap_before, rss_before = swap_bytes(os.getpid()), _rss_bytes()
    for _ in range(3):
        leak.leak()
    assert leak.leaked_bytes == 9 * MiB and len(leak._arenas) == 2
    swap_grown, rss_grown = swap_bytes(os.getpid()) - swap_before, _rss_bytes() - rss_before
    if swap_enabled() and not leak.paged_out_refused:
        assert swap_grown >= 8 * MiB and rss_grown < 4 * MiB, (swap_grown / MiB, rss_grown / MiB)
    else:  # nowhere to page anonymous memory out to: the leak stays resident
        assert swap_grown == 0 and rss_grown >= 8 * MiB, (swap_grown / MiB, rss_grown / MiB)
