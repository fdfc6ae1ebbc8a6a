"""A burst of host orders against a slow backend: seconds from order to running.

    python bench/provision_burst.py [--orders 100] [--concurrency 4] [--latency 1,3]

Recreates a scratch PostgreSQL database (--database, default loam_prov_bench on
127.0.0.1:5432), migrates it and builds a park whose simulator backend takes --latency seconds
(uniform) to complete each host request. Starts a real Celery worker (`celery -A portal
worker`, prefork, --concurrency processes, as production runs it) on a real broker (--broker,
default Redis database 11). While the worker takes nothing from its queue, one client submits
--orders one-card host orders through the service layer; then the worker takes the whole burst
at once. Prints p50/p95/max of order → running, counted from when the burst was let through
(from the order, for one placed later), from the orders' and the audit log's timestamps. The
worker's log is var/log/bench-provision-worker.log.

To measure another version's worker on the same burst (the old blocking one, say), export it
and point --worker-tree at it: the orders are still placed by this checkout.

    git archive HEAD | tar -x -C /tmp/loam-head
    python bench/provision_burst.py --worker-tree /tmp/loam-head
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4, help="worker processes")
    parser.add_argument("--latency", default="1,3", help="min,max seconds per host request")
    parser.add_argument("--database", default="loam_prov_bench")
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/11")
    parser.add_argument("--timeout", type=float, default=300, help="give up after (seconds)")
    parser.add_argument("--worker-tree", type=Path, default=REPO, help="run the worker from here")
    args = parser.parse_args()
    low, high = (float(part) for part in args.latency.split(","))

    recreate_database(args.postgres, args.database)
    database_url = f"{args.postgres}/{args.database}"
    os.environ.update(
        DATABASE_URL=database_url,
        CELERY_BROKER_URL=args.broker,
        CELERY_TASK_ALWAYS_EAGER="false",
        DJANGO_SETTINGS_MODULE="portal.settings",
        LOAM_DEMO="true",  # its park runs on the simulator
    )
    warnings.filterwarnings("ignore", "No directory at")  # WhiteNoise: no collectstatic here
    import django

    django.setup()
    from django.core.management import call_command
    from django.utils import timezone

    from portal.celery import app

    call_command("migrate", verbosity=0)
    world = build_world(args.orders, latency=[low, high])
    app.control.purge()  # messages a previous run left in this broker database

    log = REPO / "var" / "log" / "bench-provision-worker.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    worker = start_worker(args.worker_tree, args.concurrency, log)
    try:
        wait_for_worker(app, worker)
        queue = app.conf.task_default_queue
        app.control.cancel_consumer(queue, reply=True)
        submitted, took = submit_burst(world, args.orders)
        released = timezone.now()
        app.control.add_consumer(queue, reply=True)
        to_running, failed = wait_for_outcomes(submitted, released, args.timeout)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)

    print(
        f"{args.orders} orders submitted in {took:.1f} s by one client, then let through at "
        f"once; simulator latency "
        f"{low:g}-{high:g} s a request; worker: prefork, concurrency {args.concurrency}; "
        f"broker {args.broker}; worker from {args.worker_tree}"
    )
    if failed:
        print(f"failed: {len(failed)} (first: {failed[0]})")
    if to_running:
        to_running.sort()
        p95 = to_running[max(0, round(0.95 * len(to_running)) - 1)]
        p50 = statistics.median(to_running)
        print(
            f"order -> running ({len(to_running)} hosts): p50 {p50:.2f} s, p95 {p95:.2f} s, "
            f"max {to_running[-1]:.2f} s"
        )


def recreate_database(postgres: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{postgres}/postgres", autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')


def build_world(orders: int, *, latency: list[float]):
    from apps.quotas.models import QuotaLimit
    from tests.worlds import sellable_world

    per_node = 8
    world = sellable_world(
        accelerator_quota=orders,
        nodes=-(-orders // per_node),
        per_node=per_node,
        backend_config={"latency_seconds": latency},
    )
    QuotaLimit.objects.create(
        park=world.organization.park,
        organization=world.organization,
        resource="instances",
        limit=orders,
    )
    return world


def start_worker(tree: Path, concurrency: int, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "celery", "-A", "portal", "worker"]
    command += [f"--concurrency={concurrency}", "--loglevel=INFO", "--without-gossip"]
    return subprocess.Popen(
        command, cwd=tree, env=os.environ, stdout=log.open("w"), stderr=subprocess.STDOUT
    )


def wait_for_worker(app, worker: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not app.control.ping(timeout=0.5):
        if worker.poll() is not None or time.monotonic() > deadline:
            sys.exit("the worker did not start: see var/log/bench-provision-worker.log")


def submit_burst(world, orders: int) -> tuple[list[int], float]:
    import dataclasses

    from apps.orders.services import submit_create

    started = time.perf_counter()
    submitted = []
    for n in range(orders):
        request = dataclasses.replace(world.request, name=f"burst-{n}")
        [order] = submit_create(organization=world.organization, actor=world.owner, request=request)
        submitted.append(order.pk)
    return submitted, time.perf_counter() - started


def wait_for_outcomes(
    order_ids: list[int], released, timeout: float
) -> tuple[list[float], list[str]]:
    """Seconds from each order (or the burst's release, if later) to its host's running (audit
    log), and the failures' reasons."""
    from apps.core.models import AuditEvent
    from apps.orders.models import Order, OrderState

    orders = Order.objects.filter(pk__in=order_ids)
    deadline = time.monotonic() + timeout
    while orders.filter(state=OrderState.FULFILLING).exists():
        if time.monotonic() > deadline:
            print(f"timed out: {orders.filter(state=OrderState.FULFILLING).count()} still open")
            break
        time.sleep(0.5)
    running_at = dict(
        AuditEvent.objects.filter(action="instance.running").values_list("object_id", "created_at")
    )
    to_running, failed = [], []
    for order in orders.order_by("pk"):
        if order.state == OrderState.DONE:
            began = max(order.created_at, released)
            to_running.append((running_at[str(order.instance_id)] - began).total_seconds())
        elif order.state == OrderState.FAILED:
            failed.append(order.reason)
    return to_running, failed


if __name__ == "__main__":
    main()
