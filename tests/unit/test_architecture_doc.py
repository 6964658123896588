"""The map stays a map: docs/architecture.md fits on a page and, with the README's Layout, names every package."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(path.parent.name for path in (ROOT / "soak").glob("*/__init__.py"))


def test_the_architecture_page_is_one_page():
    words = len(re.findall(r"\S+", (ROOT / "docs" / "architecture.md").read_text()))
    assert words <= 1200, f"docs/architecture.md has {words} words; move detail to docs/internals.md"


def test_the_map_and_the_readme_layout_name_every_package():
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    layout = (ROOT / "README.md").read_text().split("## Layout", 1)[1]
    for package in PACKAGES:
        assert f"soak/{package}/" in architecture or f"`{package}`" in architecture, package
        assert f"soak/{package}/" in layout, package
