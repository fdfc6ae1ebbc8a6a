"""Written-out reads, for the few hot paths where building the ORM's statement took several
times the CPU of running it (an order counts nodes' rooms on every request:
bench/order_profile.py measures it). Plain SQL that PostgreSQL and SQLite both run; and
`EpochSeconds`, an expression both spell differently."""

import json
from collections.abc import Sequence
from decimal import Decimal

from django.core.exceptions import EmptyResultSet
from django.db import DatabaseError, connections, router
from django.db.models import BigIntegerField, Func, QuerySet


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
    the other. Like bulk_create it sends no signals; it sets each object's primary key."""
    connection = connections[router.db_for_write(type(objects[0]))]
    if connection.vendor != "postgresql":
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
    in one statement (a WITH of UPDATEs for several), elsewhere one save each. Raises
    DatabaseError where a row is gone, as save does. Sends no signals."""
    rows = [(obj, fields) for obj, fields in rows if fields]  # nothing to save: no statement
    if not rows:
        return
    connection = connections[router.db_for_write(type(rows[0][0]))]
    if connection.vendor != "postgresql" or any(
        hasattr(getattr(obj, obj._meta.get_field(name).attname), "resolve_expression")
        for obj, fields in rows
        for name in fields
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
