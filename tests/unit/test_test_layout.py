"""The test tree itself: pytest imports test files by basename (rootdir-relative, no packages), so two test
files with one name in different folders stop the whole collection with "import file mismatch"."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]


def test_every_test_file_has_a_unique_basename() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS_DIR.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS_DIR)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test files sharing a basename: {clashes}"
