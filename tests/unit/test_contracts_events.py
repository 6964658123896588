"""Run-event kinds, read from the source: every declared kind is emitted, and nothing else is emitted or awaited."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from soak.contracts import EventKind

SOAK_DIR = Path(__file__).resolve().parents[2] / "soak"
ANALYSIS_DIR = SOAK_DIR / "analysis"


def _trees(root: Path) -> Iterator[tuple[str, ast.AST]]:
    for path in sorted(root.rglob("*.py")):
        yield str(path.relative_to(SOAK_DIR.parent)), ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _kind(node: ast.expr) -> str | None:
    """The kind a literal names: "crash" or EventKind.CRASH; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "EventKind":
        return EventKind[node.attr].value if node.attr in EventKind.__members__ else f"EventKind.{node.attr}"
    return None


def emitted_kinds() -> dict[str, list[str]]:
    """Kind → places, from the first argument of every `….event(kind, …)` call (recorder and load hooks)."""
    found: dict[str, list[str]] = {}
    for where, tree in _trees(SOAK_DIR):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "event":
                kind = _kind(node.args[0]) if node.args else None
                found.setdefault(kind or f"<not a literal kind at {where}:{node.lineno}>", []).append(where)
    return found


def _kind_literals(node: ast.AST) -> Iterator[str]:
    for child in ast.walk(node):
        kind = _kind(child) if isinstance(child, ast.expr) else None
        if kind is not None:
            yield kind


def _is_event_kind(node: ast.expr) -> bool:
    """`e.kind` or `event["kind"]` (not numpy's `dtype.kind`)."""
    text = ast.unparse(node)
    return (text.endswith(".kind") and not text.endswith("dtype.kind")) or text.endswith("['kind']")


def awaited_kinds() -> set[str]:
    """Kinds the analysis compares events against, or lists in its *_EVENTS / *_KINDS constants."""
    found: set[str] = set()
    for _, tree in _trees(ANALYSIS_DIR):
        for node in ast.walk(tree):
            sides = [node.left, *node.comparators] if isinstance(node, ast.Compare) else []
            if any(_is_event_kind(side) for side in sides):
                for side in sides:
                    found.update(() if _is_event_kind(side) else _kind_literals(side))
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith(("_EVENTS", "_KINDS"))
                                                      for t in node.targets):
                # INTERVAL_KINDS maps a name of its own to (start kind, end kind): only the values are kinds.
                values = node.value.values if isinstance(node.value, ast.Dict) else [node.value]
                for value in values:
                    found.update(_kind_literals(value))
    return found


def test_every_declared_kind_is_emitted_and_every_emitted_kind_declared():
    emitted = emitted_kinds()
    declared = {kind.value for kind in EventKind}
    assert declared - set(emitted) == set(), "declared but never emitted"
    assert {kind: where for kind, where in emitted.items() if kind not in declared} == {}, "emitted, not declared"


def test_the_analysis_waits_only_for_kinds_that_are_emitted():
    awaited = awaited_kinds()
    assert {"crash", "restart", "probe_drain_timeout"} <= awaited  # the walk does see the checks' kinds
    assert awaited - set(emitted_kinds()) == set()
