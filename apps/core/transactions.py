"""Transactions: side effects after commit (`on_commit_task`), row locks (`lock`, `locked`),
steps of a use case that run in its transaction (`in_transaction`), and rows a use case writes
together when it leaves (`written_on_leaving`)."""

import functools
import logging
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import connection, transaction
from kombu.exceptions import OperationalError

log = logging.getLogger(__name__)


def on_commit_task(task, *args, **kwargs):
    """Schedule `task.delay(*args)` after commit. Pass primary keys, never model objects: the task
    reloads the row and re-checks its state, because it may run late or twice."""
    transaction.on_commit(lambda: _dispatch(task, args, kwargs))


def _dispatch(task, args, kwargs) -> None:
    """Send the job; a broker that cannot be reached does not fail the request that committed
    the work: each app's reconciliation sweep finds the rows left waiting and sends it again."""
    try:
        task.delay(*args, **kwargs)
    except OperationalError:
        log.exception("could not send %s%r to the broker; the sweep will", task.name, args)


# The order in which a transaction locks rows of these models (app_label.ModelName): a use
# case that needs two takes the earlier first, and rows of one model in id order, so two
# transactions never each hold what the other waits for. A host's or a task's own rows come
# first (a use case about one host starts from it); the organization's, park's and wallet's
# after, and shared capacity (nodes) last, held for the shortest time. tests/lock_order.py
# checks every lock the PostgreSQL suite takes against it.
LOCK_ORDER = (
    "orders.SecurityGroup",
    "orders.Instance",
    "orchestration.Task",
    "orders.Order",
    "storage.Volume",
    "tenants.Organization",
    "tenants.Park",
    "quotas.QuotaLimit",
    "sharedfs.SharedFileSystem",
    "billing.Payment",
    "billing.BankTransfer",
    "billing.VatInvoiceRequest",
    "billing.Wallet",
    "billing.Invoice",
    "billing.Hold",
    "catalog.Image",
    "billing.Meter",
    "partners.Partner",
    "partners.Settlement",
    "partners.PoolTerms",
    "agents.JoinToken",
    "agents.AgentServer",
    "agents.AgentHost",
    "agents.SavedImage",
    "agents.SavedImageCopy",
    "orchestration.Backend",
    "orchestration.Pool",
    "orchestration.Node",
)


def lock(model, pk) -> None:
    """Lock exactly one row until the transaction ends: SELECT ... FOR NO KEY UPDATE OF it.

    Two rules keep concurrent orders from deadlocking on PostgreSQL (the concurrency tests
    found both): lock only the row itself (a query that joins, as a default ordering through
    a foreign key does, locks the joined rows too), and take FOR NO KEY UPDATE, which excludes
    other lockers but not the FOR KEY SHARE locks that foreign-key checks take at COMMIT.
    Every select_for_update in the project uses no_key=True for the same reason.
    """
    lock_all(model, [pk])


def locked(model, pk, *, related=()):
    """The row, locked (`lock`), then read with its `related` rows (select_related).

    Not one statement: when a concurrent transaction changes a foreign key the join follows (a
    resize changes the flavor, a host moves security group) and commits, PostgreSQL re-checks
    the locked row's new version against the joined rows it had already read, finds the join
    no longer holds and drops the row (the query would answer DoesNotExist)."""
    lock(model, pk)
    return model._default_manager.select_related(*related).get(pk=pk)


def locked_update_or_create(model, *, defaults: dict, **lookup):
    """`update_or_create` under FOR NO KEY UPDATE (see `lock`): Django's takes a plain FOR
    UPDATE whatever the queryset asked for. Returns (the row, created)."""
    with transaction.atomic():
        row, created = model._default_manager.select_for_update(no_key=True).get_or_create(
            defaults=defaults, **lookup
        )
        changed = [name for name, value in defaults.items() if getattr(row, name) != value]
        if changed and not created:
            for name in changed:
                setattr(row, name, defaults[name])
            row.save(update_fields=changed + _auto_now_fields(model))
    return row, created


def _auto_now_fields(model) -> list[str]:
    return [
        field.name for field in model._meta.concrete_fields if getattr(field, "auto_now", False)
    ]


def share_key(model, pk) -> bool:
    """Whether the row exists, and on PostgreSQL keep it so until the transaction ends: SELECT
    ... FOR KEY SHARE, what a foreign-key check takes, but now rather than at COMMIT (Django's
    foreign keys are deferred). It blocks a delete, not another `lock` of the row."""
    rows = model._default_manager.filter(pk=pk).order_by().values("pk")
    if connection.vendor != "postgresql":
        return rows.exists()
    sql, params = rows.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} FOR KEY SHARE", params)
        return cursor.fetchone() is not None


def lock_all(model, pks) -> None:
    """`lock` for several rows in one statement, taken in id order (two transactions locking
    overlapping sets then wait for each other instead of deadlocking). Written out on
    PostgreSQL, one statement text whatever the number of rows (prepared once): every order
    takes one, where the ORM took several times the statement's CPU to build it."""
    ids = [getattr(pk, "pk", pk) for pk in pks]
    if not ids:
        return
    if connection.vendor != "postgresql":  # no row locks to take: the ORM's no-op
        list(
            model._default_manager.select_for_update(no_key=True, of=("self",))
            .filter(pk__in=ids)
            .values_list("pk", flat=True)
        )
        return
    if not connection.in_atomic_block:
        raise transaction.TransactionManagementError(
            "select_for_update cannot be used outside of a transaction."
        )
    quote = connection.ops.quote_name
    table, pk = quote(model._meta.db_table), quote(model._meta.pk.column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {table}.{pk} FROM {table} WHERE {table}.{pk} = ANY(%s) "
            f"ORDER BY 1 FOR NO KEY UPDATE OF {table}",
            [ids],
        )


def locked_where(model, column: str, value):
    """The row of `model` whose `column` (unique) is `value`, under FOR NO KEY UPDATE (see
    `lock`), or None. Written out on PostgreSQL: every order locks its wallet so, where the
    ORM took several times the statement's CPU to build it."""
    rows = model._default_manager.select_for_update(no_key=True, of=("self",))
    if connection.vendor != "postgresql":
        return rows.filter(**{column: value}).first()
    if not connection.in_atomic_block:
        raise transaction.TransactionManagementError(
            "select_for_update cannot be used outside of a transaction."
        )
    fields = model._meta.concrete_fields
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    columns = ", ".join(f"{table}.{quote(field.column)}" for field in fields)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM {table} WHERE {table}.{quote(column)} = %s "
            f"FOR NO KEY UPDATE OF {table}",
            [value],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    # psycopg gives every column its Python type but JSON's (Django decodes that itself).
    values = [
        field.from_db_value(value, None, connection) if hasattr(field, "from_db_value") else value
        for field, value in zip(fields, row, strict=True)
    ]
    return model.from_db(connection.alias, [field.attname for field in fields], values)


def in_transaction(step):
    """A step of larger use cases (a state move, a webhook event, a meter reconciled): it runs
    in its caller's transaction, or in one of its own when called outside any.

    Unlike a nested `transaction.atomic` it sets no savepoint (two round trips each, seven
    pairs an order): a step that fails fails its caller's transaction. Its refusals (a move the
    table does not allow) come before it writes, so a caller that catches one and goes on has
    nothing half-written to undo; a caller that must undo a step's writes sets its own
    savepoint around it.
    """

    @functools.wraps(step)
    def run(*args, **kwargs):
        if transaction.get_connection().in_atomic_block:
            return step(*args, **kwargs)
        with transaction.atomic():
            return step(*args, **kwargs)

    return run


@contextmanager
def written_on_leaving(pending: ContextVar, write):
    """Inside, `pending` holds a list that the code run there adds rows to, instead of writing
    each; on leaving, `write(the list)` writes them all (one INSERT, say). Leaving by an
    exception writes nothing: the transaction it runs in is rolled back."""
    rows = []
    token = pending.set(rows)
    try:
        yield
    finally:
        pending.reset(token)
    write(rows)
