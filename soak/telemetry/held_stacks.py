"""What a memray capture of a forensics window still held at its end, grouped by the server's own line.

A capture taken with `memray attach --aggregate` keeps, for every stack, the allocations made while it tracked
that were not freed before it stopped: the memory a leak adds during the window. This module reads it with
memray's own reader and reduces it to the stacks worth showing. It runs as a child process
(`python -m soak.telemetry.held_stacks CAPTURE`, printing one JSON object): a day-long server's capture can hold
hundreds of thousands of stacks, and reading them on soak's own process would hold its arrival clock.

Which frame names a stack: the innermost frame of the server's own code, not the allocator's or the Python
standard library's (`json.loads` holds nothing a server did not ask it to), and the frame that called it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TOP_STACKS = 20  # rows kept per capture: the report shows fewer, the rest is in the flame graph
FRAMES_KEPT = 12  # frames of each row's largest stack, innermost first
# The Python standard library, frozen modules and memray itself are never "the server's own code".
_NOT_OWN = re.compile(r"(/lib/python\d+\.\d+/(?!.*(site|dist)-packages/))|(^<)|(/memray/)")
NO_FRAME = ("<native code, no Python frame>", "", 0)

Frame = tuple[str, str, int]  # (function, file, line), as memray gives them


@dataclass
class HeldStack:
    """The allocations still held that one line of the server's own code made, from one caller."""

    function: str
    file: str
    line: int
    caller_function: str | None
    caller_file: str | None
    caller_line: int | None
    bytes: int = 0
    allocations: int = 0
    stacks: int = 0  # distinct full stacks merged into this row
    frames: list[Frame] = field(default_factory=list)  # the largest of them, innermost first
    _largest: int = 0

    def add(self, size: int, allocations: int, frames: list[Frame]) -> None:
        self.bytes += size
        self.allocations += allocations
        self.stacks += 1
        if size > self._largest:
            self._largest, self.frames = size, frames[:FRAMES_KEPT]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("_largest")
        out["frames"] = [list(frame) for frame in self.frames]
        return out


def is_own(frame: Frame) -> bool:
    """Whether a frame is the server's code (or a library it called), not the standard library or memray."""
    return not _NOT_OWN.search(frame[1] or "<")


def own_frames(frames: list[Frame]) -> tuple[Frame, Frame | None]:
    """The innermost frame of the server's own code and the one that called it (the innermost frame at all when
    no frame is the server's own; `NO_FRAME` for an allocation made with no Python frame on the stack)."""
    if not frames:
        return NO_FRAME, None
    own = [i for i, frame in enumerate(frames) if is_own(frame)]
    at = own[0] if own else 0
    return frames[at], frames[at + 1] if at + 1 < len(frames) else None


def group_records(records: Any) -> dict[tuple, HeldStack]:
    """memray's leaked-allocation records grouped by (own frame, caller)."""
    groups: dict[tuple, HeldStack] = {}
    for record in records:
        frames = [(str(f), str(path), int(line)) for f, path, line in record.stack_trace()]
        own, caller = own_frames(frames)
        key = (own, caller)
        if key not in groups:
            groups[key] = HeldStack(*own, *(caller or (None, None, None)))
        groups[key].add(int(record.size), int(record.n_allocations), frames)
    return groups


def summarise_capture(path: Path, top: int = TOP_STACKS) -> dict[str, Any]:
    """The capture's held totals and its `top` rows by bytes held; ValueError when memray cannot read it."""
    from memray import FileReader

    try:
        reader = FileReader(str(path))
    except (OSError, RuntimeError, ValueError) as exc:
        raise ValueError(f"memray could not read {path.name}: {exc}") from None
    groups = group_records(reader.get_leaked_allocation_records(merge_threads=True))
    rows = sorted(groups.values(), key=lambda row: row.bytes, reverse=True)
    meta = reader.metadata
    return {
        "held_bytes": sum(row.bytes for row in rows), "held_allocations": sum(row.allocations for row in rows),
        "stacks": sum(row.stacks for row in rows), "sites": len(rows), "peak_bytes": int(meta.peak_memory),
        "tracked_s": (meta.end_time - meta.start_time).total_seconds(), "command": meta.command_line,
        "top": [row.as_dict() for row in rows[:top]],
    }


def write_flamegraph(capture: Path, out: Path) -> str | None:
    """memray's own flame graph of what was still held (`--leaks`); the reason when it could not be written."""
    done = subprocess.run([sys.executable, "-m", "memray", "flamegraph", "--leaks", "-f", "-o", str(out),
                           str(capture)], capture_output=True, text=True, timeout=600)
    if done.returncode == 0 and out.exists():
        return None
    return (done.stderr or done.stdout).strip().splitlines()[-1] if (done.stderr or done.stdout).strip() \
        else f"memray flamegraph exited with code {done.returncode}"


def main(argv: list[str] | None = None) -> int:
    """The child: summarise one capture (and write its flame graph) and print the JSON summary."""
    parser = argparse.ArgumentParser(prog="python -m soak.telemetry.held_stacks", description=main.__doc__)
    parser.add_argument("capture", type=Path)
    parser.add_argument("--flamegraph", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        answer = summarise_capture(args.capture)
        if args.flamegraph is not None:
            answer["flamegraph_error"] = write_flamegraph(args.capture, args.flamegraph)
    except Exception as exc:  # the parent records it as the window's refusal and goes on
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
