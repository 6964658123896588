"""The sampler reads each process's swap (VmSwap) beside its RSS, from a real process that pushed memory out."""

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from soak.telemetry.process import ProcessTreeSampler, SelfSampler, swap_bytes

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmSwap is read from Linux /proc")]
MiB = 2**20

# Writes 32 MiB of private anonymous memory, asks the kernel to page it out (MADV_PAGEOUT, 21 on Linux), says how
# far it got, then waits for a line on stdin.
PAGED_OUT = """
import mmap, sys
size = 32 << 20
region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
region.write(b"\\xa5" * size)
try:
    region.madvise(getattr(mmap, "MADV_PAGEOUT", 21))
    print("paged", flush=True)
except OSError:
    print("refused", flush=True)
sys.stdin.readline()
"""


def _swap_on() -> bool:
    return len(Path("/proc/swaps").read_text().splitlines()) > 1


@pytest.fixture()
def paged_out():
    process = subprocess.Popen([sys.executable, "-c", PAGED_OUT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    try:
        yield process, process.stdout.readline().strip()
    finally:
        process.kill()
        process.wait(10)


def test_the_sampler_reads_the_swap_of_a_process_that_paged_its_memory_out(paged_out):
    process, outcome = paged_out
    row = next(row for row in ProcessTreeSampler([process.pid]).sample() if row.pid == process.pid)
    if _swap_on() and outcome == "paged":
        assert row.swap_bytes >= 30 * MiB, row
        assert row.rss_bytes < 32 * MiB, row  # the 32 MiB left RSS for swap
    else:  # no swap on this machine (or a kernel before 5.4): the pages stay resident and VmSwap reads 0
        assert row.swap_bytes == 0 and row.rss_bytes >= 32 * MiB, row


def test_swap_is_none_where_it_cannot_be_read_and_soak_reads_its_own():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)
    if not psutil.pid_exists(gone.pid):  # not yet reused
        assert swap_bytes(gone.pid) is None
    kernel_thread = 2  # kthreadd: no memory of its own, so no VmSwap line
    if psutil.pid_exists(kernel_thread) and psutil.Process(kernel_thread).name() == "kthreadd":
        assert swap_bytes(kernel_thread) is None
    assert isinstance(SelfSampler().sample().swap_bytes, int)
