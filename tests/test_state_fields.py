"""State fields change only through `apps.core.transitions.transition()` (README): every model
in apps/ with a `state` field, and each state field named otherwise in OTHER_STATE_FIELDS, has a
table of its allowed moves (a module-level `<NAME>_TRANSITIONS` in its app's models, keyed by
the field's choices), and no module writes such a field any other way: no `.state =`, no
`.update(state=...)`, no `update_or_create` that sets it, no `save`/`bulk_update` of it. The one
allowed exception is a write in a function that checks each move with `check_transition` first
(apps.orchestration.scheduling places a pass's tasks that way; a probe writes its nodes' health
in one UPDATE). A write through a computed name (`setattr(obj, name, value)` over a dict) is
beyond a source scan, and so is the model a write is to: the scan goes by the field's name.
Organization.verification_state is not walked yet."""

import ast
import importlib
from collections.abc import Mapping
from pathlib import Path

import pytest
from django.apps import apps
from django.core.exceptions import FieldDoesNotExist
from django.db import models

APPS = Path(__file__).resolve().parent.parent / "apps"
FIELD = "state"
# (model, field) of the state fields named otherwise.
OTHER_STATE_FIELDS = [("orchestration.Node", "health")]
# Each field name the scan looks for -> the functions ("path:name", path under apps/) that write
# a field of that name on a model where it is no state: an agent reports its cards' health.
SCANNED_FIELDS = {
    FIELD: set(),
    "health": {"agents/services.py:_sync_cards"},
}
TRANSITIONS_MODULE = APPS / "core" / "transitions.py"
BULK_WRITES = {"bulk_update", "update_rows"}


# --- every state field has its table ------------------------------------------------------------


def transition_tables() -> dict[type, tuple[str, Mapping]]:
    """The choices class each `*_TRANSITIONS` table of apps.<app>.models is keyed by -> (its
    name, the table)."""
    tables = {}
    for config in apps.get_app_configs():
        if not config.name.startswith("apps."):
            continue
        try:
            module = importlib.import_module(f"{config.name}.models")
        except ModuleNotFoundError:
            continue
        for name, value in vars(module).items():
            if name.endswith("_TRANSITIONS") and isinstance(value, Mapping) and value:
                (states,) = {type(state) for state in value}
                tables[states] = (f"{config.name}.models.{name}", value)
    return tables


def state_fields() -> list[models.Field]:
    fields = []
    for model in apps.get_models():
        if not model.__module__.startswith("apps.") or model._meta.proxy:
            continue
        try:
            fields.append(model._meta.get_field(FIELD))
        except FieldDoesNotExist:
            continue
    return fields + [
        apps.get_model(label)._meta.get_field(name) for label, name in OTHER_STATE_FIELDS
    ]


def _named(field) -> str:
    return f"{field.model._meta.label}.{field.name}"


def test_the_walk_finds_the_state_fields_and_tables():
    walked = {_named(field) for field in state_fields()}
    assert {
        "orders.Instance.state",
        "billing.BankTransfer.state",
        "agents.AgentHost.state",
        "orchestration.Node.health",
    } <= walked
    assert {
        "apps.orders.models.INSTANCE_TRANSITIONS",
        "apps.orchestration.models.NODE_HEALTH_TRANSITIONS",
    } <= {name for name, _table in transition_tables().values()}


def test_each_field_walked_by_another_name_is_scanned():
    assert {name for _label, name in OTHER_STATE_FIELDS} <= set(SCANNED_FIELDS)


@pytest.mark.parametrize("field", state_fields(), ids=_named)
def test_every_state_field_has_a_table_of_its_moves(field):
    tables = transition_tables()
    found = [
        (name, table) for states, (name, table) in tables.items() if field.choices == states.choices
    ]
    assert found, f"{_named(field)} has no *_TRANSITIONS table in apps"
    ((name, table),) = found
    values = {value for value, _label in field.choices}
    assert set(table) == values, f"{name} needs a row for every state, and only those"
    for current, targets in table.items():
        assert set(targets) <= values, f"{name}[{current!r}] moves to an unknown state"


# --- nothing writes a state field but transition() ----------------------------------------------


def _constants(nodes) -> set:
    return {node.value for node in nodes if isinstance(node, ast.Constant)}


def _strings(node) -> set[str]:
    """The constants of a literal list, tuple or set (a `fields` argument)."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return _constants(node.elts)
    return set()


def _targets(node):
    if isinstance(node, ast.Tuple | ast.List):
        for element in node.elts:
            yield from _targets(element)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)
    else:
        yield node


def _sets_field(keywords, field: str) -> bool:
    """`defaults={"state": ...}` or `defaults=dict(state=...)` among `keywords`."""
    for keyword in keywords:
        if keyword.arg not in ("defaults", "create_defaults"):
            continue
        value = keyword.value
        if isinstance(value, ast.Dict) and field in _constants(value.keys):
            return True
        if isinstance(value, ast.Call) and any(k.arg == field for k in value.keywords):
            return True
    return False


def _writes(node, field: str) -> tuple[str, bool] | None:
    """(what `node` does to `field`, whether a bulk write checked by check_transition may do
    it), or None where it writes none."""
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in (t for outer in targets for t in _targets(outer)):
            if isinstance(target, ast.Attribute) and target.attr == field:
                return f".{field} =", True
        return None
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    keywords = {keyword.arg for keyword in node.keywords}
    if name == "setattr" and field in _constants(node.args[1:2]):
        return f'setattr(..., "{field}", ...)', True
    if name == "update" and field in keywords:
        return f".update({field}=...)", False
    if name == "update_or_create" and _sets_field(node.keywords, field):
        return f"update_or_create(defaults={{'{field}': ...}})", False
    if name == "save" and any(
        k.arg == "update_fields" and field in _strings(k.value) for k in node.keywords
    ):
        return f'.save(update_fields=[..., "{field}"])', True
    arguments = [*node.args, *(k.value for k in node.keywords)]
    if name in BULK_WRITES and any(field in _strings(arg) for arg in arguments):
        return f'{name}(..., [..., "{field}"])', True
    return None


def _calls_check_transition(function) -> bool:
    return any(
        isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "check_transition"
        for node in ast.walk(function)
    )


def state_writes(source: str, field: str = FIELD, *, not_a_state=frozenset()) -> list[str]:
    """Every write of `field` in `source` that is not transition()'s, leaving alone the
    functions named in `not_a_state`: "line: what"."""
    found = []
    tree = ast.parse(source)
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    checked = {
        id(node)
        for function in functions
        if _calls_check_transition(function)
        for node in ast.walk(function)
    }
    elsewhere = {
        id(node)
        for function in functions
        if function.name in not_a_state
        for node in ast.walk(function)
    }
    for node in ast.walk(tree):
        write = _writes(node, field)
        if write is None or id(node) in elsewhere:
            continue
        what, bulk_may = write
        if bulk_may and id(node) in checked:
            continue
        found.append(f"{node.lineno}: {what}")
    return found


def _sources():
    for path in sorted(APPS.rglob("*.py")):
        if "migrations" in path.relative_to(APPS).parts or path == TRANSITIONS_MODULE:
            continue
        yield path


@pytest.mark.parametrize("field", sorted(SCANNED_FIELDS))
def test_no_module_writes_a_state_field_but_through_transition(field):
    found = []
    for path in _sources():
        where = path.relative_to(APPS).as_posix()
        not_a_state = {
            spot.partition(":")[2]
            for spot in SCANNED_FIELDS[field]
            if spot.partition(":")[0] == where
        }
        source = path.read_text(encoding="utf-8")
        found += [
            f"{path.relative_to(APPS.parent)}:{write}"
            for write in state_writes(source, field, not_a_state=not_a_state)
        ]
    assert found == []


def test_each_function_left_alone_writes_a_field_of_that_name():
    for field, spots in SCANNED_FIELDS.items():
        for spot in spots:
            where, _colon, function = spot.partition(":")
            source = (APPS / where).read_text(encoding="utf-8")
            everything = state_writes(source, field)
            assert state_writes(source, field, not_a_state={function}) != everything, spot


@pytest.mark.parametrize(
    "source",
    [
        "transfer.state = 'credited'",
        "host.state, host.card_uuids = 'removed', []",
        "setattr(host, 'state', 'removed')",
        "Host.objects.filter(pk=1).update(state='removed', generation=2)",
        "Node.objects.update_or_create(pk=1, defaults={'state': 'up'})",
        "host.save(update_fields=['state', 'generation'])",
        "Host.objects.bulk_update(hosts, ['generation', 'state'])",
        "update_rows(Task, tasks, fields=['node', 'state'])",
        "def f(hosts):\n    check_transition(T, 'a', 'b', label='', names={})\n"
        "    Host.objects.filter(pk=1).update(state='b')",
    ],
)
def test_the_scan_finds_each_way_of_writing_a_state(source):
    assert len(state_writes(source)) == 1


@pytest.mark.parametrize(
    "source",
    [
        "node.health = 'down'",
        "Node.objects.filter(pk=1).update(health='down')",
        "node.save(update_fields=['health'])",
        "Node.objects.bulk_update(nodes, ['telemetry', 'health'])",
    ],
)
def test_the_scan_finds_writes_of_a_field_named_otherwise(source):
    assert len(state_writes(source, "health")) == 1
    assert state_writes(source) == []


@pytest.mark.parametrize(
    "source",
    [
        "transition(host, 'removed', table=T, changes={'generation': 2})",
        "Host.objects.create(state='running')",
        "Host.objects.filter(state='running').exclude(state='removed')",
        "row = {'state': host.state}",
        "def place(tasks):\n    for task in tasks:\n"
        "        check_transition(T, task.state, 'placed', label='', names={})\n"
        "        task.state = 'placed'\n    update_rows(Task, tasks, ['state'])",
    ],
)
def test_the_scan_leaves_reads_creations_and_checked_bulk_writes_alone(source):
    assert state_writes(source) == []


def test_the_scan_leaves_a_function_that_writes_another_models_field_alone():
    source = (
        "def _sync_cards(cards):\n    for card in cards:\n        card.health = 'ok'\n"
        "    AgentCard.objects.bulk_update(cards, ['health'])"
    )
    assert len(state_writes(source, "health")) == 2
    assert state_writes(source, "health", not_a_state={"_sync_cards"}) == []
