"""Written-out reads, for the few hot paths where building the ORM's statement took several
times the CPU of running it (an order counts nodes' rooms on every request:
bench/order_profile.py measures it). Plain SQL that PostgreSQL and SQLite both run; and
`EpochSeconds`, an expression both spell differently."""

import functools
import json
from collections.abc import Sequence
from decimal import Decimal

from django.core.exceptions import EmptyResultSet
from django.db import DatabaseError, connections, router
from django.db.models import BigIntegerField, Func, QuerySet
from django.db.models.signals import post_save, pre_save


def fetch_all(model, sql: str, params: Sequence = ()) -> list[tuple]:
    """The rows of `sql` on the database `model` is read from."""
    with connections[router.db_for_read(model)].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def fetch_each(model, statements: Sequence[tuple[str, Sequence]]) -> list[list[tuple]]:
    """The rows of each of `statements` ((sql, params): reads), in one statement on
    PostgreSQL, elsewhere one after the other, on the database `model` is read from: for reads
    made together on every request, each a round trip of its own otherwise. On PostgreSQL each
    read's rows come back as one JSON array, so its columns must be numbers, text, booleans
    or NULL (a numeric comes back a Decimal, as psycopg gives it)."""
    connection = connections[router.db_for_read(model)]
    if connection.vendor != "postgresql" or len(statements) < 2:
        return [fetch_all(model, statement, params) for statement, params in statements]
    reads = ", ".join(
        # As text: decoded here, two columns may share a name and numerics stay Decimals.
        f"(SELECT json_agg(each_row)::text FROM ({statement}) each_row)"
        for statement, _ in statements
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {reads}", [param for _statement, params in statements for param in params]
        )
        arrays = cursor.fetchone()
    return [_json_rows(array) for array in arrays]


def _json_rows(array) -> list[tuple]:
    """json_agg's rows as tuples, their columns in order (two may share a name: `sum`)."""
    if array is None:  # no rows
        return []
    return json.loads(
        array, parse_float=Decimal, object_pairs_hook=lambda pairs: tuple(v for _k, v in pairs)
    )


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


def insert_together(*objects, along: Sequence[tuple[str, Sequence]] = ()) -> None:
    """Insert `objects` (unsaved rows, of any models, in an order where each one's foreign keys
    point only at rows saved already or at those before it in `objects`) and run the `along`
    statements ((sql, params): UPDATEs that go with them, where `{0}`, `{1}`, … stand for the
    ids `objects` are given) on the database they are written to: on PostgreSQL one statement
    for them all, each a step of one WITH (a use case that writes several rows every time
    pays a round trip and the ORM's preparation of each row otherwise); elsewhere one after
    the other, as where a model's saves are listened for (each then sends its signals, as
    save does). It sets each object's primary key."""
    connection = connections[router.db_for_write(type(objects[0]))]
    if connection.vendor != "postgresql" or _listened(objects):
        for obj in objects:
            obj.save(force_insert=True, using=connection.alias)
        with connection.cursor() as cursor:
            for statement, params in along:
                cursor.execute(statement.format(*(int(obj.pk) for obj in objects)), params)
        return
    steps, params = [], []
    ids = [f"(SELECT id FROM inserted_{n})" for n in range(len(objects))]
    for n, obj in enumerate(objects):
        statement, values = _insert_step(connection, obj, objects[:n], ids)
        steps.append(f"inserted_{n} AS ({statement})")
        params += values
    for n, (statement, values) in enumerate(along):
        steps.append(f"along_{n} AS ({statement.format(*ids)})")
        params += values
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {', '.join(steps)} SELECT {', '.join(ids)}", params)
        saved = cursor.fetchone()
    for obj, pk in zip(objects, saved, strict=True):
        obj.pk = pk
        obj._state.adding, obj._state.db = False, connection.alias
    for obj in objects:
        for field in obj._meta.concrete_fields:
            if field.is_relation and field.is_cached(obj):
                related = field.get_cached_value(obj)
                if related is not None and getattr(obj, field.attname) is None:
                    setattr(obj, field.name, related)  # its id, the row kept loaded


def _insert_step(connection, obj, earlier, ids) -> tuple[str, list]:
    """The INSERT … RETURNING id of `obj` as a step of insert_together's WITH, its values as
    Django's own INSERT prepares them; a foreign key to one of the `earlier` objects reads the
    id its step returns."""
    quote = connection.ops.quote_name
    meta = obj._meta
    columns, values, params = [], [], []
    for field in meta.local_concrete_fields:
        if field.primary_key and getattr(obj, field.attname) is None:
            continue  # the database's
        columns.append(quote(field.column))
        related = field.get_cached_value(obj, None) if field.is_relation else None
        position = next((n for n, row in enumerate(earlier) if row is related), None)
        if position is not None and related is not None:
            values.append(ids[position])
            continue
        values.append("%s")
        params.append(field.get_db_prep_save(field.pre_save(obj, True), connection))
    statement = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(columns)}) "
        f"VALUES ({', '.join(values)}) RETURNING {quote(meta.pk.column)} AS id"
    )
    return statement, params


def update_together(*rows: tuple) -> None:
    """Save the `fields` of each of `rows` ((object, fields): saved rows, of any models) as
    `save(update_fields=fields)` does, `auto_now` fields included where named: on PostgreSQL
    in one statement (a WITH of UPDATEs for several), elsewhere one save each, as where a
    model's saves are listened for (each then sends its signals, as save does). Raises
    DatabaseError where a row is gone, as save does."""
    rows = [(obj, fields) for obj, fields in rows if fields]  # nothing to save: no statement
    if not rows:
        return
    connection = connections[router.db_for_write(type(rows[0][0]))]
    if (
        connection.vendor != "postgresql"
        or _listened(obj for obj, _fields in rows)
        or any(
            hasattr(getattr(obj, obj._meta.get_field(name).attname), "resolve_expression")
            for obj, fields in rows
            for name in fields
        )
    ):
        for obj, fields in rows:
            obj.save(update_fields=fields, using=connection.alias)
        return
    quote = connection.ops.quote_name
    updates = []
    for obj, fields in rows:
        meta, assignments, params = obj._meta, [], []
        for field in {meta.get_field(name): None for name in fields}:
            assignments.append(f"{quote(field.column)} = %s")
            params.append(field.get_db_prep_save(field.pre_save(obj, False), connection))
        statement = (
            f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} "
            f"WHERE {quote(meta.pk.column)} = %s"
        )
        updates.append((statement, [*params, obj.pk]))
    with connection.cursor() as cursor:
        if len(updates) == 1:
            cursor.execute(*updates[0])
            updated = [cursor.rowcount]
        else:
            steps = ", ".join(
                f"updated_{n} AS ({statement} RETURNING 1)"
                for n, (statement, _params) in enumerate(updates)
            )
            counts = ", ".join(f"(SELECT COUNT(*) FROM updated_{n})" for n in range(len(updates)))
            cursor.execute(
                f"WITH {steps} SELECT {counts}", [p for _sql, params in updates for p in params]
            )
            updated = cursor.fetchone()
    for (obj, _fields), count in zip(rows, updated, strict=True):
        if not count:
            raise DatabaseError(f"{obj!r} is gone: nothing to update")


def _listened(objects) -> bool:
    """Whether a receiver listens for the saves of any of `objects`' models: those are saved
    one by one, so that it hears of them on every database."""
    return any(
        pre_save.has_listeners(type(obj)) or post_save.has_listeners(type(obj)) for obj in objects
    )
