"""Written-out reads, for the few hot paths where building the ORM's statement took several
times the CPU of running it (an order counts nodes' rooms on every request:
bench/order_profile.py measures it). Plain SQL that PostgreSQL and SQLite both run; and
`EpochSeconds`, an expression both spell differently."""

from collections.abc import Sequence
from decimal import Decimal

from django.core.exceptions import EmptyResultSet
from django.db import connections, router
from django.db.models import BigIntegerField, Func, QuerySet


def fetch_all(model, sql: str, params: Sequence = ()) -> list[tuple]:
    """The rows of `sql` on the database `model` is read from."""
    with connections[router.db_for_read(model)].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def placeholders(values: Sequence) -> str:
    """`%s, %s, …`, one for each of `values` (an IN list); `NULL` for none, which `IN`
    matches nothing with (an empty list is not SQL)."""
    return ", ".join(["%s"] * len(values)) or "NULL"


def members(values) -> tuple[str, list]:
    """What goes inside `IN (…)` for `values`, with its parameters: a placeholder for each id
    (or row) of a list, or a queryset's primary keys as a subquery."""
    if isinstance(values, QuerySet):
        try:
            subquery, params = values.values("pk").query.sql_with_params()
        except EmptyResultSet:  # .none(), or a filter nothing can match
            return placeholders([]), []
        return subquery, list(params)
    ids = [getattr(value, "pk", value) for value in values]
    return placeholders(ids), ids


def decimal(value) -> Decimal:
    """A numeric column's value as a Decimal (SQLite answers an int or a float)."""
    return value if isinstance(value, Decimal) else Decimal(str(value))


class EpochSeconds(Func):
    """A datetime column as whole seconds since the Unix epoch (UTC), for grouping rows into
    fixed buckets in the database: `EpochSeconds("at") / 60` is the minute."""

    arity = 1
    output_field = BigIntegerField()

    def as_postgresql(self, compiler, connection, **extra):
        template = "CAST(FLOOR(EXTRACT(EPOCH FROM %(expressions)s)) AS BIGINT)"
        return self.as_sql(compiler, connection, template=template)

    def as_sqlite(self, compiler, connection, **extra):
        # Django keeps an aware datetime as UTC text ("2026-12-05 10:00:00.123456"). The
        # template's "%%%%s" is "%%s" in the statement, which the backend's placeholder
        # conversion turns into strftime's "%s".
        return self.as_sql(
            compiler, connection, template="CAST(strftime('%%%%s', %(expressions)s) AS INTEGER)"
        )
