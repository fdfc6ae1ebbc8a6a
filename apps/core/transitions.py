"""State transitions as data (django-oscar's pipeline): each state enum has a table of the states
it may move to, and `transition()` is the only code that changes a state field."""

from collections.abc import Callable, Mapping, Sequence

from django.db import models
from django.utils.translation import gettext as _

from apps.core import sql
from apps.core.audit import record_event
from apps.core.errors import InvalidTransition


def check_transition(
    table: Mapping[str, frozenset], current: str, target: str, *, label: str, names: Mapping
):
    """Refuse a move the table does not allow; `names` maps state values to their labels."""
    if target not in table.get(current, frozenset()):
        raise InvalidTransition(
            _("%(object)s cannot go from “%(current)s” to “%(target)s”.")
            % {
                "object": label,
                "current": names.get(current, current),
                "target": names.get(target, target),
            }
        )


def transition(
    obj: models.Model,
    target: str,
    *,
    table: Mapping[str, frozenset],
    actor=None,
    field: str = "state",
    changes: Mapping | Callable[[models.Model], Mapping] | None = None,
    audit_data: Mapping | None = None,
    held: bool = False,
    action: str | None = None,
    write: bool = True,
) -> models.Model:
    """Move `obj` to `target` under a row lock and record an audit event.

    Must run inside a transaction (the caller's service owns it). The row is re-read with
    SELECT ... FOR UPDATE so a concurrent transition sees the state this one left behind.
    `changes` are other fields saved in the same UPDATE (an error message, a timestamp), or a
    function of the locked row returning them, for changes that depend on its current values.
    `held`: this transaction created `obj`, or `obj` is what a transition of it in this
    transaction returned, so it is current and no one else can change it: it is not read again.
    The same holds for a row this transaction read after taking its row lock.
    `action`: the audit event's action, where the app names it (`bank_transfer.credited`);
    by default "<model>.<target>".
    `write=False`: the move is made on the returned row and recorded, but its UPDATE is left to
    that row's next move (`held`) or `write_moved` in this transaction, which writes both in
    one: for a row that goes on to another change before anything reads it again (an order
    goes through two states at once).
    """
    if held:
        locked = obj
    elif getattr(obj, _UNWRITTEN, None):
        raise RuntimeError(f"{obj!r} was moved without being written: write_moved() it first")
    else:
        locked = type(obj)._default_manager.select_for_update(no_key=True).get(pk=obj.pk)
        _keep_loaded_relations(obj, locked)
    current = getattr(locked, field)
    names = dict(locked._meta.get_field(field).flatchoices)
    check_transition(table, current, target, label=str(locked), names=names)
    if callable(changes):
        changes = changes(locked)
    changes = changes or {}
    setattr(locked, field, target)
    for name, value in changes.items():
        setattr(locked, name, value)
    unwritten = {*getattr(locked, _UNWRITTEN, ()), field, *changes}
    setattr(locked, _UNWRITTEN, unwritten)
    if write:
        write_moved(locked)
    record_event(
        actor=actor,
        action=action or f"{locked._meta.model_name}.{target}",
        target=locked,
        data={"from": current, "to": target, **(audit_data or {})},
    )
    return locked


# The fields of a row that moves made with write=False changed, not yet written.
_UNWRITTEN = "_moved_unwritten"


def write_moved(obj: models.Model, *fields: str, along: Sequence[models.Model] = ()) -> None:
    """Write what `transition(..., write=False)` left unwritten on `obj`, with its other
    `fields`, in one UPDATE; and what it left unwritten on the rows `along` with it, in the
    same statement on PostgreSQL (`sql.update_together`)."""
    rows = [(obj, fields), *((row, ()) for row in along)]
    sql.update_together(
        *(
            (row, [*getattr(row, _UNWRITTEN, set()), *names, *_auto_now_fields(row)])
            for row, names in rows
        )
    )
    for row, _names in rows:
        setattr(row, _UNWRITTEN, set())


def _keep_loaded_relations(obj, locked) -> None:
    """Give the re-read row the related objects `obj` had loaded (its organization, flavor…)
    where it still points at them, so the audit event and what follows read no row again."""
    for field in locked._meta.concrete_fields:
        if field.is_relation and field.is_cached(obj):
            related = field.get_cached_value(obj)
            if getattr(related, "pk", None) == getattr(locked, field.attname):
                field.set_cached_value(locked, related)


def _auto_now_fields(obj):
    return [f.name for f in obj._meta.concrete_fields if getattr(f, "auto_now", False)]
