"""Updating thousands of rows in a few statements.

On PostgreSQL the values travel as one typed array per column that `unnest` turns back into
rows: a statement per call, whose cost is the rows' and not Django's preparation of each value,
which takes several times longer (bench/metering.py measures it). On the embedded SQLite, an
`UPDATE … FROM (VALUES …)` per batch of rows: Django's bulk_update builds a `CASE WHEN pk = …`
expression per row and field, which took longer than all the rest of a metering pass.

Only plain columns go this way: numbers, text, dates and times, foreign keys; their values are
what the column holds, in Python's types (int, str, Decimal, aware datetime, None), which
PostgreSQL's driver takes as they are.
"""

from collections.abc import Sequence

from django.db import connections, router

PLAIN_COLUMNS = frozenset(
    {
        "AutoField",
        "BigAutoField",
        "BigIntegerField",
        "BooleanField",
        "CharField",
        "DateField",
        "DateTimeField",
        "DecimalField",
        "ForeignKey",
        "IntegerField",
        "PositiveBigIntegerField",
        "PositiveIntegerField",
        "PositiveSmallIntegerField",
        "SmallIntegerField",
        "TextField",
    }
)


def update_rows(model, objects: Sequence, fields: Sequence[str]) -> int:
    """Save `fields` of `objects` (rows of `model` with their primary key: instances, or any
    objects with the same attribute names) in one `UPDATE … FROM unnest(…)` (on SQLite, one
    per batch of rows); returns the rows updated. Like bulk_update, it sends no signals and
    sets no `auto_now` field: name it in `fields`, its value set."""
    if not objects:
        return 0
    connection, columns = _plain_columns(model, fields)
    columns = [model._meta.pk, *columns]
    if connection.vendor != "postgresql":
        return _update_from_values(connection, model, objects, columns)
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    names = [quote(field.column) for field in columns]
    assignments = ", ".join(f"{name} = v.{name}" for name in names[1:])
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {assignments} "
            f"FROM unnest({_typed_arrays(connection, columns)}) AS v({', '.join(names)}) "
            f"WHERE {table}.{names[0]} = v.{names[0]}",
            [[getattr(obj, field.attname) for obj in objects] for field in columns],
        )
        return cursor.rowcount


def _update_from_values(connection, model, objects, columns) -> int:
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    # A VALUES list names its columns column1, column2, …
    assignments = ", ".join(
        f"{quote(field.column)} = v.column{n}" for n, field in enumerate(columns[1:], 2)
    )
    row = f"({', '.join(['%s'] * len(columns))})"
    per_statement = (connection.features.max_query_params or 30_000) // len(columns)
    updated = 0
    with connection.cursor() as cursor:
        for start in range(0, len(objects), per_statement):
            batch = objects[start : start + per_statement]
            cursor.execute(
                f"UPDATE {table} SET {assignments} "
                f"FROM (VALUES {', '.join([row] * len(batch))}) AS v "
                f"WHERE {table}.{quote(columns[0].column)} = v.column1",
                [
                    field.get_db_prep_save(getattr(obj, field.attname), connection)
                    for obj in batch
                    for field in columns
                ],
            )
            updated += cursor.rowcount
    return updated


def _plain_columns(model, fields: Sequence[str]):
    connection = connections[router.db_for_write(model)]
    columns = [model._meta.get_field(name) for name in fields]
    for field in columns:
        if field.get_internal_type() not in PLAIN_COLUMNS:
            raise TypeError(f"{model.__name__}.{field.name} is not a plain column")
    return connection, columns


def _typed_arrays(connection, columns) -> str:
    return ", ".join(f"%s::{field.cast_db_type(connection)}[]" for field in columns)
