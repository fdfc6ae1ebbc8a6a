"""One order in process: what `POST /api/v1/orders/` and `POST /api/v1/quotes/` cost without
HTTP, load or noise from other clients: milliseconds, queries and the statements' own time per
order, at one park size or several.

    python bench/order_profile.py [--orders 40] [--nodes 240] [--profile 30] [--json]
    python bench/order_profile.py --nodes 12,1300,13000

Builds the world `bench/load.py` orders in (a scratch PostgreSQL database on DATABASE_URL's
server, `loam_bench_order` or `--scratch-db`, dropped first: the demo park, 8-card L40S nodes
in two regions, a funded organization with large quotas and a write API key). The park grows
to each size of `--nodes` in turn (nodes `bench-0`, `bench-1`, … added in bulk, each with fresh
telemetry whose loaded cards draw one of a few powers, as the host agent reports it, so
placement reads measured power), and at each size it posts `--orders` orders, then as many
quotes, through Django's test client with the production settings (DEBUG off), after five to
warm up, connections kept as in production. With several sizes it prints a line per size, how
far each size's CPU an order and a quote is from the first size's, and pgbench's TPC-B TPS on
the same server right after (bench/metering.py's `same_server_pgbench`). Prints the median
and best of batches of ten (this machine's speed drifts, so the best is the steadier figure),
the queries an order takes, and the time its statements took as the database driver saw
it. `--profile N` adds cProfile's top N functions by cumulative time; `--queries` lists one
order's statements (both of the orders at the largest size). The
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
    parser.add_argument(
        "--nodes",
        type=lambda text: sorted(int(size) for size in text.split(",")),
        default=[240],
        help="8-card nodes added; several, comma-separated, grow the park and measure at each",
    )
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions")
    parser.add_argument("--sort", default="cumulative", help="cProfile's order: tottime, …")
    parser.add_argument("--queries", action="store_true", help="print one order's statements")
    parser.add_argument("--default-gc", action="store_true", help="Python's collector settings")
    parser.add_argument(
        "--scratch-db",
        default=SCRATCH_DB,
        help="the database to seed; another name lets two runs share a server",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import load  # bench/load.py: the same world

    load.scratch_database("bench/order_profile.py", args.scratch_db, ALLOWED_HOSTS="testserver")

    import django

    django.setup()
    world = argparse.Namespace(nodes=0, organizations=1, clients=1, park_limit=False)
    (organization,) = load.seed(world)
    if not args.default_gc:
        runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))["post_worker_init"](worker=None)
    sizes = []
    for size in args.nodes:
        grow_park(size, load)
        last = size == args.nodes[-1]
        key = organization["keys"][0]
        sizes.append(
            {
                "nodes": size,
                "order": measure(args, key, load, ORDER, listing=last),
                "quote": measure(args, key, load, QUOTE, listing=False),
            }
        )
    tps = None
    if len(sizes) > 1:
        from metering import same_server_pgbench

        tps = same_server_pgbench()
    if args.json:
        print(json.dumps({"sizes": sizes, "pgbench_tps": tps}, indent=2))
        return
    for row in sizes:
        for name, (path, _status) in (("order", ORDER), ("quote", QUOTE)):
            figures = row[name]
            print(
                f"POST {path} in process, {row['nodes']} nodes, {args.orders} {name}s: "
                f"{figures['median_ms']} ms a {name} (best batch {figures['best_ms']} ms), "
                f"{figures['queries']} queries, statements {figures['statements_ms']} ms; CPU a "
                f"{name}: Python {figures['python_cpu_ms']} ms, PostgreSQL "
                f"{figures['database_cpu_ms']} ms, garbage collection {figures['gc_ms']} ms"
            )
    for row in sizes[1:]:
        print(
            f"{row['nodes']} nodes against {sizes[0]['nodes']}: "
            + "; ".join(
                f"{name} CPU {growth(sizes[0][name], row[name])}" for name in ("order", "quote")
            )
        )
    if tps is not None:
        print(f"pgbench TPC-B, -T 10 -c 8 -j 2, same server: {tps} TPS")


ORDER = ("/api/v1/orders/", 201)
QUOTE = ("/api/v1/quotes/", 200)
# What the bench nodes' loaded cards draw (W), node by node in turn: the energy term tells the
# nodes of a pool apart by it.
DRAWN_W = (240.0, 255.5, 270.0, 290.0, 300.0)


def growth(first: dict, then: dict) -> str:
    """How much more CPU (Python and PostgreSQL) `then` took than `first`, in percent."""
    before = first["python_cpu_ms"] + (first["database_cpu_ms"] or 0)
    after = then["python_cpu_ms"] + (then["database_cpu_ms"] or 0)
    python = (then["python_cpu_ms"] / first["python_cpu_ms"] - 1) * 100
    return (
        f"{after:.1f} ms against {before:.1f} ({(after / before - 1) * 100:+.0f} %; "
        f"Python alone {python:+.0f} %)"
    )


def grow_park(size: int, load) -> None:
    """Add 8-card nodes to the L40S pools bench/load.py orders in until `size` are there
    (`bench-<n>`, as load.seed names them), in bulk, with their telemetry; then VACUUM ANALYZE."""
    from django.db import connection, transaction
    from django.utils import timezone

    from apps.orchestration.adapter import measured_power
    from apps.orchestration.models import Accelerator, Node, Pool
    from apps.orchestration.rooms import correct_rooms

    pools = list(
        Pool.objects.filter(
            backend__park__slug="demo",
            accelerator_model__name="L40S",
            region__code__in=load.L40S_REGIONS,
        ).order_by("pk")
    )
    have = Node.objects.filter(hostname__startswith="bench-").count()
    now = timezone.now().isoformat()

    def telemetry(n):
        return {
            "accelerators": {
                str(i): {"util": 90.0, "power_w": DRAWN_W[n % len(DRAWN_W)]}
                for i in range(load.NODE_CARDS)
            },
            "updated_at": now,
            "simulated": True,
        }

    with transaction.atomic():
        for begin in range(have, size, 1000):
            nodes = Node.objects.bulk_create(
                Node(
                    pool=pools[n % len(pools)],
                    hostname=f"bench-{n}",
                    vcpu_total=load.NODE_VCPU,
                    ram_gb_total=load.NODE_RAM_GB,
                    telemetry=telemetry(n),
                    # As probing the backend keeps them with the telemetry.
                    loaded_watts=measured_power(telemetry(n))[0],
                    loaded_watts_at=measured_power(telemetry(n))[1],
                )
                for n in range(begin, min(size, begin + 1000))
            )
            Accelerator.objects.bulk_create(
                Accelerator(node=node, index=i, serial=f"{node.hostname}-{i}")
                for node in nodes
                for i in range(load.NODE_CARDS)
            )
    # Their cards were written in bulk, behind the nodes' kept rooms: counted as the
    # capacity sampler's beat counts them.
    correct_rooms()
    with connection.cursor() as cursor:
        # As autovacuum leaves a park's rows once they are written: visible to index-only
        # reads.
        cursor.execute("VACUUM ANALYZE")


def measure(args, key, load, endpoint, *, listing: bool) -> dict:
    """Post `--orders` requests to `endpoint` ((path, status it answers)); `listing`: the
    statements and profile asked for are of these."""
    from django.db import connection
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    body = {"flavor": load.FLAVOR, "image": load.IMAGE, "ssh_public_key": load.SSH_KEY}
    path, status = endpoint

    def order():
        response = client.post(path, {**body, "name": "bench"}, "application/json")
        if response.status_code != status:
            sys.exit(f"{path} failed: {response.status_code} {response.content[:300]!r}")

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
    if args.queries and listing:
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
    if args.profile and listing:
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
