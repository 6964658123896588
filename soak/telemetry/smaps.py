"""Where a non-Python server's memory grew, by mapping: /proc/PID/smaps read at the start and at the end of a
forensics window, and the growth of resident plus swapped bytes classified by kind of mapping.

memray finds the stack behind a Python leak; a C++ or Rust server (llama.cpp's llama-server, TGI's router) has
no such hook, but the kind of mapping that grew still tells an allocator's arenas from the heap, a thread's
stack, a shared-memory segment or a file mapped in. Each mapping counts its Rss plus its Swap: a leak written
once and never read again is swapped out on a host with swap, and Rss alone then looks flat.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from soak.units import format_bytes

MIB = 2**20
SMALL_ANON_BYTES = MIB  # below: a malloc'd block or a small arena's piece
LARGE_ANON_BYTES = 64 * MIB  # from here: glibc's default arena size and up, or one huge buffer
KINDS = ("heap", "stack", "anon-small", "anon-medium", "anon-large", "anon-named", "file", "shm", "memfd", "other")
KIND_LABELS = {
    "heap": "[heap]", "stack": "stacks", "anon-small": "anonymous mappings under 1 MiB",
    "anon-medium": "anonymous mappings of 1–64 MiB", "anon-large": "anonymous mappings of 64 MiB or more",
    "anon-named": "named anonymous mappings", "file": "file-backed mappings", "shm": "shared memory",
    "memfd": "memfd mappings", "other": "kernel mappings",
}
_ANON_NAMES = {"anon-small": "anonymous < 1 MiB", "anon-medium": "anonymous 1–64 MiB", "anon-large": "anonymous ≥ 64 MiB"}
# The sentence names kinds from this share of what grew; below it a kind is noise, and with none above it the
# growth is called spread.
NOTABLE_SHARE = 0.25
NOISE_SHARE = 0.05
MOST_KINDS_NAMED = 3

_HEADER = re.compile(r"([0-9a-f]+)-([0-9a-f]+) ([r-][w-][x-][sp]) [0-9a-f]+ [0-9a-f]+:[0-9a-f]+ \d+ ?(.*)")
_FIELD = re.compile(r"(\w+):\s*(.*)")
_DELETED = " (deleted)"


@dataclass(frozen=True)
class MappingRegion:
    """One mapping of /proc/PID/smaps: its address range, permissions, path ('' for anonymous memory) and the
    bytes of it resident and swapped out."""

    start: int
    end: int
    perms: str
    path: str
    rss_bytes: int
    swap_bytes: int

    @property
    def size_bytes(self) -> int:
        """The mapping's own size (virtual), which the anonymous size classes use."""
        return self.end - self.start

    @property
    def held_bytes(self) -> int:
        """What the mapping holds of the process's memory: resident plus swapped out."""
        return self.rss_bytes + self.swap_bytes

    @property
    def kind(self) -> str:
        """One of KINDS."""
        return _kind(self.path, self.perms, self.size_bytes)

    @property
    def name(self) -> str:
        """What a report shows for the mapping; anonymous ones are grouped by size class."""
        kind = self.kind
        if kind in _ANON_NAMES:
            return _ANON_NAMES[kind]
        if kind == "stack":
            return "[stack]"  # a thread's stack, [stack:TID] on old kernels, is counted with the main one
        if kind == "memfd":
            return self.path.removesuffix(_DELETED).removeprefix("/")
        if kind == "shm":
            return _shm_name(self.path)
        return self.path


def _kind(path: str, perms: str, size_bytes: int) -> str:
    """The kind of a mapping from its path, its permissions and (anonymous memory) its size."""
    if path == "[heap]":
        return "heap"
    if path == "[stack]" or path.startswith("[stack:"):
        return "stack"
    if path.startswith("/memfd:"):
        return "memfd"
    if _is_shm(path, perms):
        return "shm"
    if path.startswith("[anon:"):
        return "anon-named"
    if not path:
        return _anon_kind(size_bytes)
    if path.startswith("/"):
        return "file"
    return "other"  # [vdso], [vvar], [vsyscall], [uprobes], anon_inode:… of a driver


def _anon_kind(size_bytes: int) -> str:
    """An anonymous mapping's size class: a malloc'd block or piece of arena, a buffer, or a whole arena and up."""
    if size_bytes < SMALL_ANON_BYTES:
        return "anon-small"
    return "anon-medium" if size_bytes < LARGE_ANON_BYTES else "anon-large"


def _is_shm(path: str, perms: str) -> bool:
    """POSIX (/dev/shm) and System V segments, named shared anonymous memory, and shared memory with no file
    behind it (MAP_SHARED|MAP_ANONYMOUS shows as '/dev/zero (deleted)')."""
    if path.startswith(("/dev/shm/", "/SYSV", "[anon_shmem:")):
        return True
    return perms.endswith("s") and (not path or path.startswith("/dev/zero"))


def _shm_name(path: str) -> str:
    """A shared segment's name without ' (deleted)'; 'shared anonymous' for one with no name of its own."""
    if not path or path.startswith("/dev/zero"):
        return "shared anonymous"
    return path.removesuffix(_DELETED)


def read_mappings(pid: int) -> tuple[MappingRegion, ...]:
    """The mappings of process `pid` now. ProcessLookupError when it is gone, PermissionError when its smaps may
    not be read (another user's process without CAP_SYS_PTRACE)."""
    try:
        text = Path(f"/proc/{pid}/smaps").read_text(errors="replace")
    except FileNotFoundError as gone:
        raise ProcessLookupError(f"process {pid} is gone: no /proc/{pid}/smaps") from gone
    except ProcessLookupError:  # ESRCH: the process exited while its file was read
        raise ProcessLookupError(f"process {pid} exited while its smaps were read") from None
    return parse_smaps(text)


def parse_smaps(text: str) -> tuple[MappingRegion, ...]:
    """The mappings of a /proc/PID/smaps text; ValueError naming the first line that is neither a mapping's
    header nor one of its 'Key: value' fields."""
    regions: list[MappingRegion] = []
    header: re.Match[str] | None = None
    fields: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _HEADER.fullmatch(line)
        if match:
            if header:
                regions.append(_region(header, fields))
            header, fields = match, {}
            continue
        field = _FIELD.fullmatch(line)
        if field is None or header is None:
            where = "before any mapping's header" if field else "not a mapping header nor a 'Key: value' field"
            raise ValueError(f"smaps line {number} is {where}: {line[:200]!r}")
        fields[field[1]] = field[2]
    if header:
        regions.append(_region(header, fields))
    return tuple(regions)


def _region(header: re.Match[str], fields: Mapping[str, str]) -> MappingRegion:
    """One mapping from its header and fields; Rss and Swap are written in kB, and 0 where absent."""
    return MappingRegion(start=int(header[1], 16), end=int(header[2], 16), perms=header[3], path=header[4].strip(),
                         rss_bytes=_kib(fields, "Rss", header) * 1024, swap_bytes=_kib(fields, "Swap", header) * 1024)


def _kib(fields: Mapping[str, str], key: str, header: re.Match[str]) -> int:
    """A '123 kB' field as a number of KiB."""
    value = fields.get(key, "0 kB").split()
    if not value or not value[0].isdigit():
        raise ValueError(f"smaps field {key} of mapping {header[0][:120]!r} is not a size in kB: {fields[key]!r}")
    return int(value[0])


@dataclass(frozen=True)
class MappingGrowth:
    """One row of the classification: a kind (or one named group of a kind) before and after the window."""

    kind: str
    name: str
    before_bytes: int
    after_bytes: int
    regions_before: int
    regions_after: int

    @property
    def growth_bytes(self) -> int:
        """Bytes gained over the window (negative when released)."""
        return self.after_bytes - self.before_bytes

    @property
    def new_regions(self) -> int:
        """Mappings gained over the window (negative when unmapped)."""
        return self.regions_after - self.regions_before


@dataclass(frozen=True)
class SmapsGrowth:
    """A process's growth over a forensics window, classified by kind of mapping and by named group.

    `before_bytes` and `after_bytes` are the process's resident plus swapped bytes summed over its mappings;
    `by_kind` has one row for each kind present at either end, the largest growth first, and adds up to the
    whole; `by_name` the named groups that changed most.
    """

    pid: int
    before_bytes: int
    after_bytes: int
    by_kind: tuple[MappingGrowth, ...]
    by_name: tuple[MappingGrowth, ...]

    @property
    def growth_bytes(self) -> int:
        """Bytes gained over the window by the whole process (negative when released)."""
        return self.after_bytes - self.before_bytes

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields, as an event's data stores them; each row carries its growth too, for readers that
        do not rebuild the rows."""
        return {"pid": self.pid, "before_bytes": self.before_bytes, "after_bytes": self.after_bytes,
                "growth_bytes": self.growth_bytes, "by_kind": [_row_dict(row) for row in self.by_kind],
                "by_name": [_row_dict(row) for row in self.by_name]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SmapsGrowth:
        """The growth `as_dict` wrote (the derived growths are recomputed, not read)."""
        return cls(pid=int(data["pid"]), before_bytes=int(data["before_bytes"]), after_bytes=int(data["after_bytes"]),
                   by_kind=tuple(_row_from_dict(row) for row in data["by_kind"]),
                   by_name=tuple(_row_from_dict(row) for row in data["by_name"]))

    def sentence(self) -> str:
        """One line on where the growth went, for a finding's evidence."""
        return growth_sentence(self.by_kind)


def _row_dict(row: MappingGrowth) -> dict[str, Any]:
    """A row's fields and its growth."""
    return asdict(row) | {"growth_bytes": row.growth_bytes}


def _row_from_dict(data: Mapping[str, Any]) -> MappingGrowth:
    """A row from its stored fields, derived ones left out."""
    return MappingGrowth(**{name: data[name] for name in MappingGrowth.__dataclass_fields__})


def classify_growth(before: Iterable[MappingRegion], after: Iterable[MappingRegion], pid: int,
                    top: int = 10) -> SmapsGrowth:
    """Compare two readings of one process's mappings: rows by kind (all of them) and by name (the `top` that
    changed most, growth first)."""
    before, after = tuple(before), tuple(after)
    by_name = _rows(before, after, lambda region: (region.kind, region.name))
    by_kind = _rows(before, after, lambda region: (region.kind, KIND_LABELS[region.kind]))
    changed = [row for row in by_name if row.growth_bytes or row.new_regions]
    return SmapsGrowth(pid=pid, before_bytes=sum(region.held_bytes for region in before),
                       after_bytes=sum(region.held_bytes for region in after),
                       by_kind=tuple(by_kind), by_name=tuple(changed[:top]))


def _rows(before: tuple[MappingRegion, ...], after: tuple[MappingRegion, ...], key) -> list[MappingGrowth]:
    """Regions grouped by `key` (kind, name), before and after, the largest growth first (ties in KINDS order)."""
    held: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for end, regions in enumerate((before, after)):
        for region in regions:
            totals = held[key(region)]
            totals[end] += region.held_bytes
            totals[2 + end] += 1
    rows = [MappingGrowth(kind, name, *totals) for (kind, name), totals in held.items()]
    return sorted(rows, key=lambda row: (-row.growth_bytes, KINDS.index(row.kind), row.name))


def growth_sentence(by_kind: Iterable[MappingGrowth]) -> str:
    """'92 % of the 41.0 MiB growth is in anonymous mappings of 1–64 MiB (12 new), 6 % in [heap]': shares of
    what grew, the kinds that hold more than noise; a spread growth is said to be spread."""
    rows = sorted(by_kind, key=lambda row: -row.growth_bytes)
    grown = sum(row.growth_bytes for row in rows if row.growth_bytes > 0)
    released = -sum(row.growth_bytes for row in rows if row.growth_bytes < 0)
    if grown <= 0:
        return f"no kind of mapping grew ({format_bytes(released)} released)" if released else "no kind of mapping grew"
    shares = [(row, row.growth_bytes / grown) for row in rows if row.growth_bytes > 0]
    if shares[0][1] < NOTABLE_SHARE:
        text = (f"the {format_bytes(grown)} growth is spread over {len(shares)} kinds of mapping, "
                f"none above {_percent(shares[0][1])}")
    else:
        named = [(row, share) for row, share in shares[:MOST_KINDS_NAMED] if share >= NOISE_SHARE]
        text = ", ".join(_share_text(row, share, f" of the {format_bytes(grown)} growth is" if at == 0 else "")
                         for at, (row, share) in enumerate(named))
    return text + (f"; {format_bytes(released)} was released elsewhere" if released > NOISE_SHARE * grown else "")


def _share_text(row: MappingGrowth, share: float, of: str = "") -> str:
    """'92 %`of` in anonymous mappings of 1–64 MiB (12 new)'."""
    new = f" ({row.new_regions} new)" if row.new_regions > 0 else ""
    return f"{_percent(share)}{of} in {row.name}{new}"


def _percent(share: float) -> str:
    """A share as a whole percent, '92 %'."""
    return f"{100 * share:.0f} %"
