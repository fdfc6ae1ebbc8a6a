"""docs/architecture.md stays true: apps import only apps on the floors below them (the doc's
table), so the import graph between apps has no cycle; no app imports `portal` and no app but
orchestration names a backend driver; the extension points and the driver protocols are the
ones the doc lists; every module, function or file the doc names exists; and every test file
is named after a module of the tree it tests."""

import ast
import re
from importlib import import_module
from pathlib import Path

from django.apps import apps as django_apps
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "apps"
DOC = ROOT / "docs" / "architecture.md"


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


# --- what docs/architecture.md says ----------------------------------------------------------

FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _section(heading: str) -> str:
    """The doc's text under `heading` (a whole line, e.g. "## Backend drivers"), up to the next
    heading of the same or a higher level."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    level = heading.split(" ")[0]
    following = re.search(rf"^#{{1,{len(level)}}} ", text[start:], re.MULTILINE)
    return text[start : start + following.start()] if following else text[start:]


def _table(section: str) -> list[list[str]]:
    """The cells of each body row of the first table in `section`."""
    lines = section[section.index("\n|") + 1 :].splitlines()
    rows = []
    for line in lines[2:]:  # past the header and its |---| line
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def floors() -> dict[str, int]:
    rows = _table(_section("## The apps and their floors"))
    return {app: int(floor) for floor, apps, _owns in rows for app in _names(apps)}


def test_the_floors_table_lists_every_app():
    on_disk = {path.name for path in APPS.iterdir() if (path / "__init__.py").exists()}
    assert sorted(floors()) == sorted(on_disk)


def test_every_app_imports_only_apps_on_lower_floors():
    floor, graph = floors(), app_graph()
    assert set(graph).union(*graph.values()) <= set(floor)  # each app has a floor
    upward = [
        f"{app} (floor {floor[app]}) imports {other} (floor {floor[other]})"
        for app, others in sorted(graph.items())
        for other in sorted(others)
        if floor[other] >= floor[app]
    ]
    assert upward == []


def foreign_keys() -> list[tuple[str, str, str]]:
    """(model, field, the model it points at) of every relation a model of `apps/` declares
    (its own foreign keys, one-to-ones and many-to-manys, not their reverse sides)."""
    return [
        (model._meta.label, field.name, field.related_model._meta.label)
        for model in django_apps.get_models()
        if model.__module__.startswith("apps.")
        for field in model._meta.get_fields()
        if field.is_relation
        and not field.auto_created
        and field.related_model is not None
        and field.related_model.__module__.startswith("apps.")
    ]


def test_no_foreign_key_points_up_a_floor():
    """The schema follows the floors as the imports do: a table refers only to tables of apps
    on lower floors (or its own app's), so a lower app's migrations never need a higher's."""
    floor = floors()

    def app(label):
        return django_apps.get_model(label)._meta.app_config.name.split(".")[1]

    relations = foreign_keys()
    assert ("billing.Meter", "workload", "workloads.Workload") in relations  # it reads them
    upward = {
        f"{model}.{field} -> {target}"
        for model, field, target in relations
        if app(model) != app(target) and floor[app(target)] >= floor[app(model)]
    }
    assert not upward


def test_no_app_imports_portal():
    found = [
        f"{path.relative_to(APPS)}: {module}"
        for path in _sources()
        for module in _imported_modules(path)
        if module.split(".")[0] == "portal"
    ]
    assert found == []


def _call_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def declared_extension_points() -> set[tuple[str, str]]:
    """(name, module relative to apps) of every `ExtensionPoint(...)` made in apps/; one not
    assigned to a plain name is named "?", so that it cannot go unlisted."""
    found = set()
    for path in _sources():
        module = ".".join(path.relative_to(APPS).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assigned = {
            id(node.value): target.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node.func) == "ExtensionPoint":
                found.add((assigned.get(id(node), "?"), module))
    return found


def documented_extension_points() -> dict[tuple[str, str], set[str]]:
    """{(point, declaring module): its providers} from the doc's table, one point a row."""
    rows = _table(_section("### When a lower app needs something from above: extension points"))
    documented = {}
    for point, declared_in, provided_by, _why in rows:
        ((name,), (module,)) = _names(point), _names(declared_in)
        documented[name, module] = set(_names(provided_by))
    return documented


def test_the_doc_lists_every_extension_point_where_it_is_declared():
    assert sorted(documented_extension_points()) == sorted(declared_extension_points())


def test_each_extension_point_has_the_providers_the_doc_names():
    """Plugged in by the apps' ready(), which ran when pytest-django set Django up."""

    def dotted(provider) -> str:
        return f"{provider.__module__}.{provider.__qualname__}".removeprefix("apps.")

    plugged = {
        (name, module): {
            dotted(provider)
            for provider in getattr(import_module(f"apps.{module}"), name).providers()
        }
        for name, module in documented_extension_points()
    }
    assert plugged == documented_extension_points()


def test_the_driver_table_lists_each_capability_and_its_protocols_methods():
    from apps.orchestration.backends import base

    documented, actual = {}, {}
    for capability, protocol, methods in _table(_section("## Backend drivers")):
        (capability,), (protocol,) = _names(capability), _names(protocol)
        # `provision`, `telemetry(hosts)`, `set_network(…) -> HostPorts`; not `HostNetwork.group`
        calls = [re.fullmatch(r"(\w+)(\(.*)?", name) for name in _names(methods)]
        documented[capability] = protocol, sorted(call[1] for call in calls if call)
        own = [name for name, value in vars(getattr(base, protocol)).items() if callable(value)]
        actual[capability] = protocol, sorted(name for name in own if not name.startswith("_"))
    assert sorted(documented) == sorted(capability.name for capability in base.Capability)
    assert documented == actual


def _dotted_names_in_doc() -> set[str]:
    """The names the doc gives relative to apps/ (`orders.services.submit_create`) or settings:
    a whole backticked name, or one anywhere in a fenced block (the walk-through)."""
    text = DOC.read_text(encoding="utf-8")
    apps = "|".join(floors())
    named = {
        match[1]
        for token in _names(FENCED.sub("", text))
        if (match := re.fullmatch(rf"((?:apps\.)?(?:{apps}|settings)(?:\.\w+)+)(?:\(\))?", token))
    }
    for block in FENCED.findall(text):
        named.update(re.findall(rf"\b(?:{apps})(?:\.\w+)+", block))
    return named


def _resolves(dotted: str) -> bool:
    if dotted.startswith("settings."):
        return hasattr(settings, dotted.removeprefix("settings."))
    parts = ["apps", *dotted.removeprefix("apps.").split(".")]
    for length in range(len(parts), 1, -1):
        try:
            found = import_module(".".join(parts[:length]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[length:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_every_dotted_name_in_the_doc_exists():
    named = _dotted_names_in_doc()
    assert "orders.services.submit_create" in named  # the walk-through is read
    assert sorted(name for name in named if not _resolves(name)) == []


def test_every_file_the_doc_names_exists():
    prose = FENCED.sub("", DOC.read_text(encoding="utf-8"))
    paths = [
        token
        for token in _names(prose)
        if "/" in token
        and re.fullmatch(r"[\w.-]+(/[\w.-]+)*/?", token)
        and not token.startswith(("..", "/"))
    ]
    assert "apps/orchestration/backends/base.py" in paths
    assert [path for path in paths if not (ROOT / path).exists()] == []


# --- Test files are named after the module they test -----------------------------------------

TESTS = ROOT / "tests"
# tests/<folder>/ tests apps/<folder>/, except these, which test another source tree.
TESTED_TREES = {"agent": ROOT / "agent" / "loam_agent", "portal": ROOT / "portal"}
# Browser journeys through the whole portal, named after the journey, not after a module.
JOURNEYS = {"e2e"}


def module_names(tree: Path) -> set[str]:
    """Every module (file stem) and package (folder) of a source tree, its migrations aside."""
    names = set()
    for path in tree.rglob("*"):
        parts = path.relative_to(tree).parts
        if "migrations" in parts or "__pycache__" in parts:
            continue
        if path.is_dir() and (path / "__init__.py").exists():
            names.add(path.name)
        elif path.suffix == ".py" and path.name != "__init__.py":
            names.add(path.stem)
    return names


def misnamed_test_files() -> list[str]:
    """Each test file directly in tests/<folder>/ whose name is not `test_<module>.py` or
    `test_<module>_<topic>.py` for a module or package of the tree that folder tests. Files at
    the top of tests/ check the whole project (architecture, isolation, translations...)."""
    misnamed = []
    for folder in sorted(path for path in TESTS.iterdir() if path.is_dir()):
        if folder.name in JOURNEYS or not (folder / "__init__.py").exists():
            continue
        tree = TESTED_TREES.get(folder.name, APPS / folder.name)
        modules = module_names(tree) if tree.is_dir() else set()
        for test_file in sorted(folder.glob("test_*.py")):
            name = test_file.stem.removeprefix("test_")
            if not any(name == module or name.startswith(f"{module}_") for module in modules):
                misnamed.append(str(test_file.relative_to(ROOT)))
    return misnamed


def test_every_test_file_is_named_after_a_module_it_tests():
    """tests/ mirrors the source: tests/<app>/test_<module>[_<topic>].py tests <module> of
    apps/<app>/ (tests/agent/ agent/loam_agent/, tests/portal/ portal/). A test of the project as
    a whole goes at the top of tests/; a browser journey in tests/e2e/."""
    assert "services" in module_names(APPS / "orders")  # the walk reads the tree
    misnamed = misnamed_test_files()
    assert misnamed == [], "name each after a module it tests, test_<module>_<topic>.py:\n" + (
        "\n".join(misnamed)
    )
