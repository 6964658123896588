"""The `rss-leak-swapped` fault: a leak that leaves RSS.

Memory written once and never read again is what the kernel swaps out first on a host with swap; RSS then
looks flat, or falls, while the process holds more and more. This leak writes its bytes and at once asks the
kernel to page them out (`madvise(MADV_PAGEOUT)`, Linux 5.4 or later), so it lands in swap on any run, not
only under memory pressure. Without swap the kernel has nowhere to put anonymous pages and the request is a
no-op: the leak then stays resident, like `rss-leak`.

The bytes go into large anonymous mappings filled one leak after the other (page-aligned), not one mapping per
request: a process may hold only so many mappings (`vm.max_map_count`, 65530 by default), which a leak per
request would use up within a day.
"""

import mmap
from pathlib import Path

MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21)  # the Linux value; Python builds on older headers lack the name
ARENA_BYTES = 256 * 2**20
_PAGE_PATTERN = b"\xa5" * mmap.PAGESIZE


def swap_enabled() -> bool:
    """Whether this machine has swap switched on (a device or file listed in /proc/swaps)."""
    try:
        return len(Path("/proc/swaps").read_text().splitlines()) > 1  # a header line, then one per swap area
    except OSError:
        return False


def _page_aligned(size_bytes: int) -> int:
    return -(-size_bytes // mmap.PAGESIZE) * mmap.PAGESIZE


class SwappedLeak:
    """Leaks `size_bytes` per call, written and then paged out."""

    def __init__(self, size_bytes: int) -> None:
        self.size_bytes = size_bytes
        self._slot = _page_aligned(size_bytes)
        self._arenas: list[mmap.mmap] = []
        self._used = 0  # bytes of the last arena already leaked
        self.leaked_bytes = 0
        self.paged_out_refused = False  # the kernel lacks MADV_PAGEOUT (before Linux 5.4)

    def leak(self) -> None:
        """Write `size_bytes` more and ask the kernel to swap them out."""
        arena = self._room()
        start = self._used
        for offset in range(start, start + self._slot, mmap.PAGESIZE):
            arena[offset:offset + mmap.PAGESIZE] = _PAGE_PATTERN
        self._used += self._slot
        self.leaked_bytes += self.size_bytes
        self._page_out(arena, start)

    def _room(self) -> mmap.mmap:
        """The arena with room for one more leak (a new one when the last is full)."""
        if not self._arenas or self._used + self._slot > len(self._arenas[-1]):
            # Private: the pages are the process's own anonymous memory, which VmSwap counts once paged out
            # (a shared mapping would be shmem, swapped and counted apart).
            size = max(ARENA_BYTES, self._slot)
            self._arenas.append(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
            self._used = 0
        return self._arenas[-1]

    def _page_out(self, arena: mmap.mmap, start: int) -> None:
        if self.paged_out_refused:
            return
        try:
            arena.madvise(MADV_PAGEOUT, start, self._slot)
        except OSError:  # EINVAL: a kernel without MADV_PAGEOUT; the leak stays resident
            self.paged_out_refused = True
