"""The floors of the code (docs/architecture.md): apps import only apps below them, so the
import graph between apps has no cycle, and no app but orchestration names a backend driver."""

import ast
from pathlib import Path

APPS = Path(__file__).resolve().parent.parent / "apps"


def _imported_modules(path: Path):
    """Every `apps.…` module the file imports, at the top or inside a function."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _sources():
    for path in APPS.rglob("*.py"):
        if "migrations" not in path.relative_to(APPS).parts:
            yield path


def app_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in _sources():
        app = path.relative_to(APPS).parts[0]
        for module in _imported_modules(path):
            parts = module.split(".")
            if parts[0] == "apps" and len(parts) > 1 and parts[1] != app:
                graph.setdefault(app, set()).add(parts[1])
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one app (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(app):
        index[app] = low[app] = len(index)
        stack.append(app)
        on_stack.add(app)
        for other in sorted(graph.get(app, ())):
            if other not in index:
                visit(other)
                low[app] = min(low[app], low[other])
            elif other in on_stack:
                low[app] = min(low[app], index[other])
        if low[app] == index[app]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == app:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for app in sorted(graph):
        if app not in index:
            visit(app)
    return found


def test_cycles_finds_a_cycle_between_two_and_three_apps():
    assert cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}}) == []


def test_no_import_cycle_between_apps():
    graph = app_graph()
    assert graph, "no imports found: is APPS right?"
    assert cycles(graph) == []


def test_only_orchestration_names_a_backend_driver():
    outside = []
    for path in _sources():
        if path.relative_to(APPS).parts[0] == "orchestration":
            continue
        for module in _imported_modules(path):
            parts = module.split(".")
            # apps.orchestration.backends.<driver module>: base and registry are the protocol.
            driver_module = parts[:3] == ["apps", "orchestration", "backends"] and len(parts) > 3
            if driver_module and parts[3] not in ("base", "registry"):
                outside.append(f"{path.relative_to(APPS)}: {module}")
    assert outside == []
