"""The volumes a run writes to — the SQLite database's and the run folder's — and whether one is full.

A full volume is a storage outage (docs/robustness.md): the writer stops committing to a database whose volume has
no room left and holds the rows, rather than let the database fail part way through a commit, and a message names
the mount point a user has to free.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Below this many bytes free a volume counts as full: a batch commit needs a few pages of the WAL, a log line a block.
FULL_BELOW_BYTES = 1 << 20
CHECK_EVERY_S = 1.0  # statvfs is cheap, but the writer asks before every commit


def _existing(path: Path) -> Path:
    """`path`, or the nearest folder above it that exists (a run folder may not be made yet)."""
    current = Path(os.path.abspath(path))
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding `path`."""
    current = _existing(path)
    while not os.path.ismount(current) and current != current.parent:
        current = current.parent
    return current


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the volume of `path`; None when it cannot be asked."""
    try:
        stats = os.statvfs(_existing(path))
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def is_disk_full(exc: BaseException) -> bool:
    """Whether an error says the disk is full: OSError ENOSPC/EDQUOT, or SQLite's "database or disk is full"."""
    original = getattr(exc, "orig", None) or exc
    if isinstance(original, OSError) and original.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "disk is full" in str(original) or "No space left" in str(original)


@dataclass(frozen=True)
class Volume:
    """A folder soak writes to, what it holds ("the database", "the run's files"), and its mount point."""

    folder: Path
    holds: str
    mount: Path

    @classmethod
    def of(cls, folder: Path, holds: str) -> Volume:
        return cls(Path(folder), holds, mount_point(Path(folder)))

    def full_text(self, free: int | None = None) -> str:
        """The one line naming this volume as full."""
        room = f" ({free} bytes free)" if free is not None else ""
        where = "" if self.folder == self.mount else f", {self.folder}"
        return f"the volume mounted at {self.mount} (holding {self.holds}{where}) is full{room}"


class VolumeWatch:
    """Asks, at most once a second, whether any watched volume is full; the first full one, or None."""

    def __init__(self, volumes: list[Volume], free: Callable[[Path], int | None] = free_bytes):
        self.volumes = volumes
        self._free = free
        self._checked_at = float("-inf")
        self._full: tuple[Volume, int] | None = None

    def full(self) -> tuple[Volume, int] | None:
        """(volume, bytes free) of the first full watched volume, or None."""
        now = time.monotonic()
        if now - self._checked_at >= CHECK_EVERY_S:
            self._checked_at = now
            self._full = self._first_full()
        return self._full

    def volume_of(self, holds: str) -> Volume | None:
        """The watched volume holding `holds`, if any."""
        return next((volume for volume in self.volumes if volume.holds == holds), None)

    def _first_full(self) -> tuple[Volume, int] | None:
        for volume in self.volumes:
            free = self._free(volume.folder)
            if free is not None and free < FULL_BELOW_BYTES:
                return volume, free
        return None
