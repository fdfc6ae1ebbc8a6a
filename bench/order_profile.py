"""One order in process: what `POST /api/v1/orders/` costs without HTTP, load or noise from
other clients: milliseconds, queries and the statements' own time per order.

    python bench/order_profile.py [--orders 40] [--nodes 240] [--profile 30] [--json]

Builds the world `bench/load.py` orders in (a scratch PostgreSQL database on DATABASE_URL's
server, `loam_bench_order`, dropped first: the demo park, `--nodes` 8-card L40S nodes in two
regions, a funded organization with large quotas and a write API key), then posts `--orders`
orders through Django's test client with the production settings (DEBUG off), after five to
warm up, connections kept as in production. Prints the median and best of batches of ten
(this machine's speed drifts, so the best is the steadier figure), the queries an order takes,
and the time its statements took as the database driver saw it. `--profile N` adds
cProfile's top N functions by cumulative time; `--queries` lists one order's statements. The
CPU an order takes is given apart, for this process and for its PostgreSQL backend (read from
/proc where the server runs on this machine): the steadier figures on a machine whose speed
drifts; so is the time Python's garbage collector took, with the collector tuned as a gunicorn
worker tunes it (deploy/gunicorn.conf.py's post_worker_init), or as Python's defaults have it
with `--default-gc`.
"""

import argparse
import cProfile
import gc
import json
import os
import pstats
import runpy
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SCRATCH_DB = "loam_bench_order"
BATCH = 10


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=40)
    parser.add_argument("--nodes", type=int, default=240, help="8-card nodes added")
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions")
    parser.add_argument("--sort", default="cumulative", help="cProfile's order: tottime, …")
    parser.add_argument("--queries", action="store_true", help="print one order's statements")
    parser.add_argument("--default-gc", action="store_true", help="Python's collector settings")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import load  # bench/load.py: the same world

    load.scratch_database("bench/order_profile.py", SCRATCH_DB, ALLOWED_HOSTS="testserver")

    import django

    django.setup()
    world = argparse.Namespace(nodes=args.nodes, organizations=1, clients=1, park_limit=False)
    (organization,) = load.seed(world)
    if not args.default_gc:
        runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))["post_worker_init"](worker=None)
    figures = measure(args, organization["keys"][0], load)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(
            f"POST /api/v1/orders/ in process, {args.nodes} nodes, {args.orders} orders: "
            f"{figures['median_ms']} ms an order (best batch {figures['best_ms']} ms), "
            f"{figures['queries']} queries, statements {figures['statements_ms']} ms; CPU an "
            f"order: Python {figures['python_cpu_ms']} ms, PostgreSQL "
            f"{figures['database_cpu_ms']} ms, garbage collection {figures['gc_ms']} ms"
        )


def measure(args, key, load) -> dict:
    from django.db import connection
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    body = {"flavor": load.FLAVOR, "image": load.IMAGE, "ssh_public_key": load.SSH_KEY}

    def order():
        response = client.post("/api/v1/orders/", {**body, "name": "bench"}, "application/json")
        if response.status_code != 201:
            sys.exit(f"an order failed: {response.status_code} {response.content[:300]!r}")

    for _ in range(5):
        order()
    batches = []
    collecting = collector_time()
    database_began, began_cpu = database_cpu_seconds(connection), time.process_time()
    for _ in range(max(1, args.orders // BATCH)):
        began = time.perf_counter()
        for _ in range(BATCH):
            order()
        batches.append((time.perf_counter() - began) / BATCH * 1000)
    measured = max(1, args.orders // BATCH) * BATCH
    python_cpu = (time.process_time() - began_cpu) / measured * 1000
    gc.callbacks.remove(collecting)
    database_ended = database_cpu_seconds(connection)
    database_cpu = (
        (database_ended - database_began) / measured * 1000
        if database_began is not None and database_ended is not None
        else None
    )
    # The statements, counted apart: timing each costs time of its own.
    statements = []

    def timed(execute, sql, params, many, context):
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements.append(time.perf_counter() - began)

    with connection.execute_wrapper(timed):
        for _ in range(BATCH):
            order()
    queries, statements_ms = len(statements) / BATCH, sum(statements) / BATCH * 1000
    if args.queries:
        with connection.execute_wrapper(timed):
            statements.clear()
            shown = []
            with connection.execute_wrapper(
                lambda execute, sql, params, many, context: (
                    shown.append(sql) or execute(sql, params, many, context)
                )
            ):
                order()
        for sql, took in zip(shown, statements, strict=True):
            print(f"{took * 1000:6.2f} ms  {sql[:220]}")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(lambda: [order() for _ in range(BATCH)])
        pstats.Stats(profile).sort_stats(args.sort).print_stats(args.profile)
    return {
        "median_ms": round(statistics.median(batches), 1),
        "best_ms": round(min(batches), 1),
        "queries": round(queries, 1),
        "statements_ms": round(statements_ms, 1),
        "python_cpu_ms": round(python_cpu, 1),
        "database_cpu_ms": round(database_cpu, 1) if database_cpu is not None else None,
        "gc_ms": round(collecting.seconds / measured * 1000, 2),
    }


def collector_time():
    """A gc callback, installed, that adds up the CPU time collections take (`.seconds`)."""

    def collecting(phase, info):
        if phase == "start":
            collecting.began = time.process_time()
        else:
            collecting.seconds += time.process_time() - collecting.began

    collecting.seconds = 0.0
    gc.callbacks.append(collecting)
    return collecting


def database_cpu_seconds(connection) -> float | None:
    """The CPU time of this connection's PostgreSQL backend so far, where the server runs on
    this machine (/proc), else None."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
