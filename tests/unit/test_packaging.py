"""An installed wheel holds every package of soak: pyproject.toml names each one, since setuptools is told the list
(the shipped folders make automatic discovery impossible)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_in_the_wheel():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "soak").rglob("__init__.py")}
    assert packages <= listed, f"packages missing from pyproject.toml's [tool.setuptools] packages: {packages - listed}"
