"""Written-out reads, for the few hot paths where building the ORM's statement took several
times the CPU of running it (an order counts nodes' rooms on every request:
bench/order_profile.py measures it). Plain SQL that PostgreSQL and SQLite both run; and
`EpochSeconds`, an expression both spell differently."""

import functools
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


class ModelColumns:
    """The columns of some models' rows, each model's table under an alias, as a written-out
    SELECT lists them, and the model instances a row of them holds: each value converted as the
    ORM converts it (JSON; dates, decimals and booleans on SQLite), each instance as the ORM
    loads it (`Model.from_db`). What `select_related` gives, for the hot paths where building
    the ORM's statement cost several times running it."""

    def __init__(self, *tables: tuple[type, str]):
        self.tables = tables  # ((model, its table's alias in the statement), …)

    def sql(self, connection) -> str:
        """`alias."column", …` of every model in turn, for the statement's SELECT list."""
        return self._columns(connection)[0]

    def load(self, connection, row: Sequence) -> list:
        """The instance of each model in `row` (its first columns), in order; None for one whose
        primary key is NULL (a LEFT JOIN that found no row)."""
        loaded, start = [], 0
        for model, names, columns, key in self._columns(connection)[1]:
            values = row[start : start + len(columns)]
            start += len(columns)
            if values[key] is None:
                loaded.append(None)
                continue
            converted = []
            for (column, converters), value in zip(columns, values, strict=True):
                for convert in converters:
                    value = convert(value, column, connection)
                converted.append(value)
            loaded.append(model.from_db(connection.alias, names, converted))
        return loaded

    def fetch(self, rest: str, params: Sequence = ()) -> list[list]:
        """The instances of each row of `SELECT <these columns> <rest>` (`load`'s), on the
        database the first model is read from."""
        connection = connections[router.db_for_read(self.tables[0][0])]
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {self.sql(connection)} {rest}", params)
            return [self.load(connection, row) for row in cursor.fetchall()]

    @property
    def width(self) -> int:
        """How many columns `sql` lists."""
        return sum(len(model._meta.concrete_fields) for model, _alias in self.tables)

    def _columns(self, connection) -> tuple[str, list]:
        return _model_columns(connection.alias, self.tables)


@functools.cache
def _model_columns(alias: str, tables: tuple) -> tuple[str, list]:
    """(the SELECT list, [(model, its attribute names, [(column, its converters), …], where its
    primary key is among them), …]), the fields in the order `Model.from_db` takes them."""
    connection = connections[alias]
    quote = connection.ops.quote_name
    selected, models = [], []
    for model, table in tables:
        fields = model._meta.concrete_fields
        columns = [field.get_col(table) for field in fields]
        converters = [
            connection.ops.get_db_converters(column) + column.get_db_converters(connection)
            for column in columns
        ]
        names = [field.attname for field in fields]
        models.append(
            (
                model,
                names,
                list(zip(columns, converters, strict=True)),
                names.index(model._meta.pk.attname),
            )
        )
        selected += [f"{table}.{quote(field.column)}" for field in fields]
    return ", ".join(selected), models


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
