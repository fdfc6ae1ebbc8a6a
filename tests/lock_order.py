"""The row locks a transaction takes, recorded on PostgreSQL, and checked against the declared
lock order (`apps.core.transactions.LOCK_ORDER`).

Every statement that locks rows (`FOR UPDATE`, `FOR NO KEY UPDATE`, `FOR SHARE`, `FOR KEY
SHARE`) is seen on its way to the database; the rows it locked are read back from its result
(the first column is the primary key in every locking query the project makes) and the cursor
rewound for Django. A lock is out of order when its transaction already holds a lock on a
table declared after it, or on a row of the same table with a higher id, unless the row itself
was locked before (locking a held row again waits for nobody).

A "transaction" is PostgreSQL's; inside a test wrapped in one (pytest-django's `db`), it is the
use case's outermost savepoint, since each use case ends there and the next starts afresh.
"""

import re
import sys
import threading
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.apps import apps
from django.db import connections
from django.db.backends.signals import connection_created

from apps.core.transactions import LOCK_ORDER

LOCKING = re.compile(r"\bFOR (?:NO KEY UPDATE|UPDATE|KEY SHARE|SHARE)\b")
MAIN_TABLE = re.compile(r'\bFROM "(?P<table>[^"]+)"')
INSERTED = re.compile(r'^INSERT INTO "(?P<table>[^"]+)".* RETURNING ', re.DOTALL)


@dataclass
class Lock:
    label: str
    rows: tuple
    sql: str
    created: bool = False
    where: str = field(default_factory=lambda: _caller())


@dataclass
class Recorder:
    """Locks taken, by transaction, and those taken out of order."""

    by_transaction: dict = field(default_factory=lambda: defaultdict(list))
    out_of_order: list = field(default_factory=list)
    pairs: set = field(default_factory=set)
    guard: threading.Lock = field(default_factory=threading.Lock)

    def created(self, key, lock: Lock) -> None:
        """Rows the transaction inserted: no other transaction sees them, so they are held."""
        lock.created = True
        with self.guard:
            self.by_transaction[key].append(lock)

    def record(self, key, lock: Lock) -> None:
        with self.guard:
            earlier = self.by_transaction[key]
            held = {(seen.label, row) for seen in earlier for row in seen.rows}
            fresh = [row for row in lock.rows if (lock.label, row) not in held]
            if fresh:  # a statement that found no row locked none
                taken = [seen for seen in earlier if seen.rows and not seen.created]
                for seen in taken:
                    if seen.label != lock.label:
                        self.pairs.add((seen.label, lock.label, seen.where, lock.where))
                for seen in taken:
                    if _after(seen, lock, fresh):
                        self.out_of_order.append((seen, lock))
                        break
            earlier.append(lock)


def _callers():
    """The frames that led here, innermost first."""
    frame = sys._getframe(2)
    while frame:
        yield frame
        frame = frame.f_back


def _caller() -> str:
    """The code that asked for the lock: the innermost frame in apps/ outside the helpers
    that lock for it."""
    for frame in _callers():
        name = frame.f_code.co_filename
        if "/apps/" in name and not name.endswith(("transactions.py", "transitions.py")):
            return f"{name.split('/apps/')[1]}:{frame.f_lineno} {frame.f_code.co_name}"
    return "?"


def _in_a_command() -> bool:
    """Whether a management command takes the lock: commands (seed_demo building a park with
    update_or_create) run alone, not beside the use cases whose order this checks."""
    return any("/management/commands/" in frame.f_code.co_filename for frame in _callers())


def _rank(label: str) -> int:
    try:
        return LOCK_ORDER.index(label)
    except ValueError:
        return -1


def _after(seen: Lock, lock: Lock, fresh: list) -> bool:
    """Whether `lock` (of rows `fresh`, not held before) should have come before `seen`, or
    either model has no declared place (a transaction that locks two must say their order)."""
    if seen.label == lock.label:
        return bool(fresh) and any(
            isinstance(row, int) and row < max(seen.rows, default=row) for row in fresh
        )
    return min(_rank(lock.label), _rank(seen.label)) < 0 or _rank(lock.label) < _rank(seen.label)


def _labels_by_table() -> dict:
    return {model._meta.db_table: model._meta.label for model in apps.get_models()}


def _transaction_key(connection) -> tuple:
    """PostgreSQL's transaction id, and inside a test's wrapping transaction the savepoint of
    the use case's outermost block."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT txid_current()")
        (txid,) = cursor.fetchone()
    blocks = connection.atomic_blocks
    if blocks and getattr(blocks[0], "_from_testcase", False) and connection.savepoint_ids:
        return (id(connection), txid, connection.savepoint_ids[0])
    return (id(connection), txid, None)


def _wrapper(recorder: Recorder, labels: dict):
    def execute(run, sql, params, many, context):
        result = run(sql, params, many, context)
        inserted = INSERTED.match(sql)
        if many or not (inserted or LOCKING.search(sql)) or _in_a_command():
            return result
        table = inserted or MAIN_TABLE.search(sql)
        cursor = context["cursor"].cursor
        rows = tuple(row[0] for row in cursor.fetchall()) if cursor.description else ()
        if rows:
            cursor.scroll(0, mode="absolute")
        lock = Lock(labels.get(table["table"], table["table"]) if table else "?", rows, sql)
        key = _transaction_key(context["connection"])
        (recorder.created if inserted else recorder.record)(key, lock)
        return result

    return execute


@contextmanager
def recording():
    """Record the row locks every PostgreSQL connection takes inside, in any thread."""
    recorder = Recorder()
    execute = _wrapper(recorder, _labels_by_table())

    def install(connection, **_):
        if connection.vendor == "postgresql" and execute not in connection.execute_wrappers:
            connection.execute_wrappers.append(execute)

    for connection in connections.all():
        install(connection)
    connection_created.connect(install, weak=False)
    try:
        yield recorder
    finally:
        connection_created.disconnect(install)
        for connection in connections.all(initialized_only=True):
            if execute in connection.execute_wrappers:
                connection.execute_wrappers.remove(execute)


def describe(out_of_order: list) -> str:
    return "\n".join(
        f"{lock.label} {lock.rows} locked after {seen.label} {seen.rows}"
        for seen, lock in out_of_order
    )
