"""One organization's hosts changed from many threads at once: does any use case lose a race?

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/loam python bench/lock_stress.py \
        [--threads 8] [--iterations 200] [--seed 1] [--json]

Creates a scratch PostgreSQL database (DATABASE_URL's server, database `loam_bench_locks`,
dropped first) with one funded organization, a simulator pool of 8-card nodes, two sizes of one
flavor family and a park operator. Each of `--threads` threads (each its own connection) then
runs `--iterations` use cases, drawn at random: order a host, resize one (to the other size),
stop, start, release, fail one (as a backend error does) and force-release one (as an
operator). Jobs run eagerly, after each commit, in the thread that committed: an operation's
completion crosses the other threads' use cases as a worker's would.

Prints, per use case, how many were done, refused for a reason (a state, quota or capacity
refusal: a 4xx), and lost a race (PostgreSQL broke a deadlock or a lock wait: a 503 over
HTTP), plus how many jobs lost a race and ran again (`apps.core.contention`). Any other error
is printed with its traceback and counted. A lock order followed everywhere loses none.
"""

import argparse
import json
import logging
import os
import random
import sys
import threading
import traceback
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCRATCH_DB = "loam_bench_locks"
USE_CASES = ("order", "resize", "stop", "start", "release", "fail", "force_release")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=200, help="use cases per thread")
    parser.add_argument("--nodes", type=int, default=4, help="8-card nodes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    server = urlparse(os.environ.get("DATABASE_URL", ""))
    if not server.scheme.startswith("postgres"):
        sys.exit("bench/lock_stress.py needs PostgreSQL: set DATABASE_URL to a postgres:// server")
    recreate_database(server._replace(path="/postgres").geturl(), SCRATCH_DB)
    os.environ.update(
        DATABASE_URL=server._replace(path=f"/{SCRATCH_DB}").geturl(),
        DJANGO_SETTINGS_MODULE="portal.settings",
        CELERY_BROKER_URL="memory://",
        CELERY_TASK_ALWAYS_EAGER="true",
        LOAM_DEMO="true",  # its park runs on the simulator
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    world = build_world(args.nodes)
    outcomes, job_retries = run(world, args)
    report(args, outcomes, job_retries)


def recreate_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')


def build_world(nodes: int):
    from apps.tenants.models import ParkOperator
    from tests.factories import FlavorFactory, PriceFactory, UserFactory
    from tests.worlds import sellable_world

    world = sellable_world(accelerator_quota=10**6, nodes=nodes, per_node=8)
    small = world.request.flavor
    large = FlavorFactory(family=small.family, accelerator_count=2, vcpu=8, ram_gb=32)
    PriceFactory(flavor=large, region=world.request.region, amount_minor=2000)
    operator = UserFactory()
    ParkOperator.objects.create(park=world.organization.park, user=operator)
    return SimpleNamespace(
        organization=world.organization,
        owner=world.owner,
        request=world.request,
        sizes=(small, large),
        operator=operator,
    )


class JobRetries(logging.Handler):
    """Counts the jobs that lost a race and were run again."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.count = 0
        self._lock = threading.Lock()

    def emit(self, record):
        if "lost a race for rows" in record.getMessage():
            with self._lock:
                self.count += 1


def run(world, args) -> tuple[dict, int]:
    from django.db import connection

    retries = JobRetries()
    logging.getLogger("apps.core.contention").addHandler(retries)
    outcomes: dict[str, Counter] = defaultdict(Counter)
    start = threading.Barrier(args.threads)
    tally = threading.Lock()

    def thread(index: int) -> None:
        draw = random.Random(args.seed * 1000 + index)
        start.wait()
        try:
            for _ in range(args.iterations):
                use_case = draw.choice(USE_CASES)
                outcome = attempt(world, use_case, draw)
                with tally:
                    outcomes[use_case][outcome] += 1
        finally:
            connection.close()

    threads = [threading.Thread(target=thread, args=(i,)) for i in range(args.threads)]
    for each in threads:
        each.start()
    for each in threads:
        each.join()
    return outcomes, retries.count


def attempt(world, use_case: str, draw: random.Random) -> str:
    """'done', 'refused' (a reason), 'nothing to do', 'lost a race' or 'error'."""
    from django.core.exceptions import ValidationError

    from apps.core.contention import is_contention
    from apps.core.errors import DomainError

    try:
        return "done" if act(world, use_case, draw) else "nothing to do"
    except (DomainError, ValidationError):
        return "refused"
    except Exception as exc:
        if is_contention(exc):
            return "lost a race"
        traceback.print_exc()
        return "error"


def act(world, use_case: str, draw: random.Random) -> bool:
    from apps.orders.idle import force_release
    from apps.orders.models import Instance, InstanceState, OrderKind
    from apps.orders.operations import request_operation
    from apps.orders.services import fail_instance, submit_create

    owner = world.owner
    if use_case == "order":
        submit_create(organization=world.organization, actor=owner, request=world.request)
        return True
    wanted = {
        "resize": (InstanceState.RUNNING, InstanceState.STOPPED),
        "stop": (InstanceState.RUNNING,),
        "start": (InstanceState.STOPPED,),
        "release": (InstanceState.RUNNING, InstanceState.STOPPED, InstanceState.ERROR),
        "fail": (InstanceState.RUNNING, InstanceState.STOPPED),
        "force_release": (InstanceState.RUNNING, InstanceState.STOPPED, InstanceState.ERROR),
    }[use_case]
    ids = list(
        Instance.objects.filter(organization=world.organization, state__in=wanted).values_list(
            "pk", flat=True
        )
    )
    if not ids:
        return False
    instance = Instance.objects.select_related("flavor").get(pk=draw.choice(ids))
    if use_case == "fail":
        fail_instance(instance_id=instance.pk, message="bench: the backend lost it")
    elif use_case == "force_release":
        force_release(instance=instance, operator=world.operator, reason="bench")
    elif use_case == "resize":
        small, large = world.sizes
        target = large if instance.flavor_id == small.pk else small
        request_operation(
            instance=instance, actor=owner, kind=OrderKind.RESIZE, params={"flavor": target}
        )
    else:
        kind = {"stop": OrderKind.STOP, "start": OrderKind.START, "release": OrderKind.RELEASE}
        request_operation(instance=instance, actor=owner, kind=kind[use_case])
    return True


def report(args, outcomes: dict, job_retries: int) -> None:
    rows = {use_case: dict(outcomes.get(use_case, Counter())) for use_case in USE_CASES}
    lost = sum(row.get("lost a race", 0) for row in rows.values())
    errors = sum(row.get("error", 0) for row in rows.values())
    calls = sum(sum(row.values()) for row in rows.values())
    if args.json:
        print(
            json.dumps(
                {
                    "threads": args.threads,
                    "iterations": args.iterations,
                    "use_cases": rows,
                    "lost_races": lost,
                    "errors": errors,
                    "job_retries": job_retries,
                },
                indent=2,
            )
        )
        return
    print(f"{args.threads} threads × {args.iterations} use cases, one organization")
    columns = ("done", "refused", "nothing to do", "lost a race", "error")
    print(f"{'use case':<14}" + "".join(f"{c:>15}" for c in columns))
    for use_case, row in rows.items():
        print(f"{use_case:<14}" + "".join(f"{row.get(c, 0):>15}" for c in columns))
    print(f"lost races (503s over HTTP): {lost} of {calls} calls; other errors: {errors}")
    print(f"jobs that lost a race and ran again: {job_retries}")


if __name__ == "__main__":
    main()
