"""Two-connection PostgreSQL tests: wait until another connection is blocked on a row lock."""

import time

from django.db import connection


def wait_for_a_blocked_lock(timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
            if cursor.fetchone()[0]:
                return
            time.sleep(0.02)
    raise AssertionError("nothing waited for the lock")
