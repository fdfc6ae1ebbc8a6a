"""The Workload migrations on a populated database: every row still belongs to what it did.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/<db> python bench/workload_migration.py

Run it on a copy of a database migrated and filled by the code before the Workload (commit
f80554a: `manage.py migrate`, `manage.py seed_demo`, then `bench/scale.py`'s world). It reads,
in SQL, whom each allocation, placement, meter, usage record, hold, suspension for funds and
invoice line belonged to (a host, a task, or a host's order) and which partner owned each
pool; applies the migrations (`manage.py migrate`), timing them; reads the same through the
workloads and `partners_partnerpool`; and prints, per table, the rows before and after and how
many changed owner. Exits 1 when any row changed owner, was lost or was added.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent

# table: (owner before the migrations, owner after), each a query of (row id, owner).
HOST_OR_TASK_AFTER = """
SELECT row.id, COALESCE('host ' || host.id, 'task ' || task.id)
FROM {table} row
LEFT JOIN orders_instance host ON host.workload_id = row.workload_id
LEFT JOIN orders_task task ON task.workload_id = row.workload_id
"""
OWNERS = {
    "orchestration_allocation": (
        "SELECT id, COALESCE('host ' || instance_id, 'task ' || task_id) FROM {table}",
        HOST_OR_TASK_AFTER,
    ),
    "orchestration_placement": (
        """SELECT row.id, COALESCE('host ' || o.instance_id, 'task ' || row.task_id)
        FROM {table} row LEFT JOIN orders_order o ON o.id = row.order_id""",
        HOST_OR_TASK_AFTER,
    ),
    "billing_meter": (
        "SELECT id, COALESCE('host ' || instance_id, 'task ' || task_id) FROM {table}",
        HOST_OR_TASK_AFTER,
    ),
    "billing_usagerecord": (
        "SELECT id, COALESCE('host ' || instance_id, 'task ' || task_id) FROM {table}",
        HOST_OR_TASK_AFTER,
    ),
    "billing_hold": ("SELECT id, 'host ' || instance_id FROM {table}", HOST_OR_TASK_AFTER),
    "billing_fundssuspension": (
        "SELECT id, 'host ' || instance_id FROM {table}",
        HOST_OR_TASK_AFTER,
    ),
    "billing_invoiceline": (
        "SELECT id, COALESCE('host ' || instance_id, 'task ' || task_id, '-') FROM {table}",
        HOST_OR_TASK_AFTER.replace("'task ' || task.id)", "'task ' || task.id, '-')"),
    ),
    "orchestration_pool": (
        "SELECT id, 'partner ' || partner_id FROM {table} WHERE partner_id IS NOT NULL",
        """SELECT pool_id, 'partner ' || partner_id FROM partners_partnerpool""",
    ),
}
SUBJECTS = ("orders_instance", "orders_task")


def owners(connection, which: int) -> dict[str, dict]:
    with connection.cursor() as cursor:
        found = {}
        for table, queries in OWNERS.items():
            cursor.execute(queries[which].format(table=table))
            found[table] = dict(cursor.fetchall())
        for table in SUBJECTS:
            cursor.execute(f"SELECT count(*) FROM {table}")
            found[table] = cursor.fetchone()[0]
        return found


def main() -> None:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("bench/workload_migration.py needs DATABASE_URL: a copy of a populated database")
    with psycopg.connect(url, autocommit=True) as connection:
        before = owners(connection, 0)
    started = time.monotonic()
    subprocess.run([sys.executable, "manage.py", "migrate", "--no-input"], cwd=ROOT, check=True)
    took = time.monotonic() - started
    with psycopg.connect(url, autocommit=True) as connection:
        after = owners(connection, 1)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM workloads_workload w WHERE NOT EXISTS "
                "(SELECT 1 FROM orders_instance i WHERE i.workload_id = w.id) AND NOT EXISTS "
                "(SELECT 1 FROM orders_task t WHERE t.workload_id = w.id)"
            )
            orphans = cursor.fetchone()[0]
    print(f"migrations applied in {took:.1f} s; workloads without a host or task: {orphans}")
    print(f"{'table':<28}{'before':>10}{'after':>10}{'moved':>8}")
    wrong = orphans
    for table in SUBJECTS:
        print(f"{table:<28}{before[table]:>10}{after[table]:>10}")
    for table in OWNERS:
        was, now = before[table], after[table]
        moved = sum(1 for row, owner in was.items() if now.get(row) != owner)
        moved += len(set(now) - set(was))
        wrong += moved
        print(f"{table:<28}{len(was):>10}{len(now):>10}{moved:>8}")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
