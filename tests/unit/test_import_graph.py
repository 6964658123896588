"""The `soak` package's import graph, read from the source: no cycles, and nothing below the CLI imports it.

Every import statement counts, wherever it stands (module level, inside a function, under TYPE_CHECKING):
a deferred import hides a cycle from the interpreter, not from the design. Importing `a.b.c` is an edge to
`a.b.c` alone, not to the packages above it, so a package `__init__` that imports its own submodules is no
cycle; a submodule that imports a name back from its package's `__init__` is one.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOAK_DIR = Path(__file__).resolve().parents[2] / "soak"
CLI_PACKAGE = "soak.cli"
# `python -m soak` is the program's entry point, above the CLI by nature.
CLI_CALLERS = {"soak.__main__"}


def module_files(root: Path = SOAK_DIR) -> dict[str, Path]:
    """Dotted module name → source file, for every .py file of the package."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module an ImportFrom names, with a relative one resolved against `module`."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `module` imports: `from p import m` means p.m when that is a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, module, path.name == "__init__.py")
            found.update(f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                         for alias in node.names)
    return {name for name in found if name in known and name != module}


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle path (first node repeated at the end) per strongly connected component that has one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the graph has a few hundred nodes
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = {stack.pop()}
            while node not in component:
                component.add(stack.pop())
            components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(graph, component) for component in components if len(component) > 1]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first node (breadth-first, inside the component)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if target not in parents:
                    parents[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle found in {sorted(component)}")


def test_find_cycles_reports_the_path() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_relative_and_from_imports_resolve(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .a import thing\n")
    (package / "a.py").write_text("def f():\n    from pkg import b\n    from . import c\nthing = 1\n")
    (package / "b.py").write_text("from pkg.a import thing\n")
    (package / "c.py").write_text("import pkg.b\n")
    modules = module_files(package)
    graph = {name: imported_modules(name, path, set(modules)) for name, path in modules.items()}
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b", "pkg.c"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.b"}}


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_only_the_cli_imports_the_cli() -> None:
    offenders = sorted(f"{module} imports {target}" for module, targets in import_graph().items()
                       if not _in_cli(module) and module not in CLI_CALLERS for target in targets if _in_cli(target))
    assert not offenders, "modules outside soak/cli/ import it:\n" + "\n".join(offenders)


def _in_cli(module: str) -> bool:
    return module == CLI_PACKAGE or module.startswith(CLI_PACKAGE + ".")


# The packages (and top-level modules) of soak, top to bottom (docs/architecture.md, "Layers"). An import may
# point down, or sideways inside a layer; never up. The root package `soak` holds the version alone.
LAYERS: list[set[str]] = [
    {"__main__", "cli"},
    {"schedule"},
    {"web"},
    {"run"},
    {"target", "load", "telemetry", "report", "metrics"},
    {"analysis"},
    {"store"},
    # vllm_plugin runs inside vLLM's processes, so it leans on nothing above; config reads its fault specs.
    {"soak", "config", "settings", "locations", "contracts", "samples", "errors", "units", "address", "slo",
     "vllm_plugin"},
]
# Separate programs that share only the wire with the rest: they import nothing else of soak.
ISLANDS = {"refserver"}


def package_of(module: str) -> str:
    """`soak.run.conductor` → `run`; `soak.config` → `config`; `soak` → `soak`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """Package → imported package → the module edges behind it (a package's imports of itself left out)."""
    packages: dict[str, dict[str, list[str]]] = {}
    for module, targets in graph.items():
        edges = packages.setdefault(package_of(module), {})
        for target in targets:
            if package_of(target) != package_of(module):
                edges.setdefault(package_of(target), []).append(f"{module} -> {target}")
    return packages


def layer_of(package: str) -> int:
    return next(index for index, layer in enumerate(LAYERS) if package in layer)


def test_every_package_has_a_layer() -> None:
    unplaced = sorted(set(package_graph(import_graph())) - set().union(*LAYERS) - ISLANDS)
    assert not unplaced, f"packages in no layer of LAYERS (place them): {unplaced}"


def test_no_package_level_cycles() -> None:
    packages = package_graph(import_graph())
    cycles = find_cycles({package: set(edges) for package, edges in packages.items()})
    assert not cycles, "package cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_imports_point_down_the_layers() -> None:
    upward = [edge for package, edges in package_graph(import_graph()).items() if package not in ISLANDS
              for target, lines in edges.items() if target not in ISLANDS and layer_of(target) < layer_of(package)
              for edge in lines]
    assert not upward, "imports pointing up the layers:\n" + "\n".join(sorted(upward))


def test_islands_import_nothing_else_of_soak() -> None:
    packages = package_graph(import_graph())
    leaks = sorted(edge for island in ISLANDS for lines in packages.get(island, {}).values() for edge in lines)
    assert not leaks, "a separate program imports soak:\n" + "\n".join(leaks)


def test_a_cycle_between_packages_is_found() -> None:
    graph = {"soak.a.x": {"soak.b.y"}, "soak.b.y": {"soak.a.z"}, "soak.a.z": set()}
    packages = package_graph(graph)
    assert packages == {"a": {"b": ["soak.a.x -> soak.b.y"]}, "b": {"a": ["soak.b.y -> soak.a.z"]}}
    assert find_cycles({package: set(edges) for package, edges in packages.items()}) == [["a", "b", "a"]]
