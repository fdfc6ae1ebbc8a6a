"""The stack under load: orders and reads over HTTP against gunicorn on PostgreSQL, beside pgbench.

    python bench/load.py [--duration 10] [--clients 8] [--organizations 20] [--nodes 360]
                         [--workers 4] [--only orders,across,flavors,instances,catalog]
                         [--cache-url redis://127.0.0.1:6379/9] [--park-limit] [--json]

Creates a scratch PostgreSQL database (DATABASE_URL's server, database `loam_bench_load` or
`--scratch-db`, dropped first), migrates it, seeds the demo park (`seed_demo`) and adds
`--organizations` verified, funded organizations, each with large quotas and one write API
key per client, and `--nodes` 8-card simulator nodes in the demo's L40S pools (two regions), so
orders do not run out (each order scenario says how many of the pools' cards were left idle
after it; one that left fewer than it has clients ran out, and its req/s counts refusals' time:
raise `--nodes`).
With `--park-limit` the park also gets park-wide limits (high enough never to refuse), which
makes every order take the park's lock.

Starts gunicorn itself (`--workers`, 4 by default; `deploy/gunicorn.conf.py` when present) with
Celery on the in-memory broker and eager mode off, and the cache production has with
`--cache-url` (default: CACHE_URL from the environment; without it each worker keeps its own
in-memory cache, which production never does with more than one worker). An order is placed
synchronously, as the API does, and its provisioning job is only queued after commit (no worker
runs it; the hosts stay provisioning, holding their cards). Then runs each scenario for
`--duration` seconds:

- POST /api/v1/orders/ for one organization, 1 client and `--clients` clients;
- POST /api/v1/orders/ across organizations, `--clients` clients (each its own organization);
- GET /api/v1/flavors/, /catalog/ (the public page) and /api/v1/instances/.

`--only` runs some of them: `orders` (one organization, 1 and `--clients` clients), `across`,
`flavors`, `instances`, `catalog`; e.g. `--only flavors,catalog --workers 2` for the reads.

Orders leave the region to the scheduler (l40s.1x, scored over both regions). It prints req/s
and p50/p95/p99 per scenario, pgbench's TPC-B TPS measured on the same server right after
(`pgbench -i` on a scratch database, then `pgbench -T 10 -c 8 -j 2`), and the oversell check:
no node has more cards allocated than it has, no card is held by two allocations, and no
organization holds more than its limits. With each scenario, the CPU a request took, read from
/proc: gunicorn's, PostgreSQL's (where it runs here), this client's and the whole machine's. The
machine's other load counts: figures are noisy.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCRATCH_DB = "loam_bench_load"
PGBENCH_DB = "loam_bench_pgbench"
FLAVOR, IMAGE = "l40s.1x", "ubuntu2204-cuda124"
L40S_REGIONS = ("js-nanjing", "js-suzhou-edge")
NODE_CARDS, NODE_VCPU, NODE_RAM_GB = 8, 256, 2048
HUGE_LIMIT = 10**9
FUNDS_MINOR = 10**12
SCENARIOS = ("orders", "across", "flavors", "instances", "catalog")
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb0bbMkVQzCQ0yt4WzQp2jr0+Ir3ZXD9gDQsG2dLR5N bench"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per scenario")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--organizations", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=360, help="8-card nodes added")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--scratch-db",
        default=SCRATCH_DB,
        help="the database to seed (pgbench's is this name with _pgbench); another name lets "
        "two runs share a server",
    )
    parser.add_argument("--park-limit", action="store_true", help="park-wide limits too")
    parser.add_argument(
        "--only",
        type=lambda text: set(text.split(",")),
        default=set(SCENARIOS),
        help=f"the scenarios to run, comma-separated, of {','.join(SCENARIOS)}",
    )
    parser.add_argument(
        "--cache-url",
        default=os.environ.get("CACHE_URL", ""),
        help="the cache gunicorn's workers share, e.g. redis://127.0.0.1:6379/9",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if unknown := args.only - set(SCENARIOS):
        parser.error(f"--only: no scenario {', '.join(sorted(unknown))}")

    static_root = tempfile.mkdtemp(prefix="loam-load-static-")
    server, env = scratch_database(
        "bench/load.py",
        args.scratch_db,
        ALLOWED_HOSTS="127.0.0.1,localhost",
        STATIC_ROOT=static_root,
        CACHE_URL=args.cache_url,
    )
    admin_url = server._replace(path="/postgres").geturl()
    static_built = (
        subprocess.run([*MANAGE, "collectstatic", "--noinput", "-v0"], env=env, cwd=ROOT).returncode
        == 0
    )

    import django

    django.setup()
    organizations = seed(args)

    gunicorn = start_gunicorn(args, env)
    base = f"http://127.0.0.1:{args.port}"
    try:
        wait_until_up(base)
        results = run_scenarios(args, base, organizations, static_built, gunicorn.pid)
    finally:
        gunicorn.send_signal(signal.SIGTERM)
        gunicorn.wait(30)
        shutil.rmtree(static_root, ignore_errors=True)
    tps = pgbench(server, admin_url, database=f"{args.scratch_db}_pgbench")
    check = oversell_check()
    report(args, results, tps, check)
    if not check["ok"]:
        sys.exit(1)


# --- the scratch world -----------------------------------------------------------------------

MANAGE = [sys.executable, str(ROOT / "manage.py")]


def scratch_database(script: str, name: str, **settings) -> tuple:
    """(DATABASE_URL's server, the environment to run Django in), after database `name` on that
    server was dropped, created, migrated and seeded with the demo park. The environment, this
    process's too from here on, runs the production settings (DEBUG off, connections kept as
    deploy/production.env.example keeps them) with Celery on the in-memory broker and eager
    mode off, rate limits out of the way, and `settings`. Exits without PostgreSQL."""
    server = urlparse(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/loam"))
    if not server.scheme.startswith("postgres"):
        sys.exit(f"{script} needs PostgreSQL: set DATABASE_URL to a postgres:// server")
    recreate_database(server._replace(path="/postgres").geturl(), name)
    env = {
        **os.environ,
        "DATABASE_URL": server._replace(path=f"/{name}").geturl(),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DEBUG": "false",
        "LOAM_DEMO": "true",  # the demo park runs on the simulator
        "DATABASE_CONN_MAX_AGE": "60",
        "CELERY_BROKER_URL": "memory://",
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "LOAM_API_RATE_PER_KEY": "1000000/min",
        "LOAM_API_RATE_PER_USER": "1000000/min",
        **settings,
    }
    os.environ.update(env)
    subprocess.run([*MANAGE, "migrate", "-v0"], check=True, env=env, cwd=ROOT)
    subprocess.run([*MANAGE, "seed_demo"], check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    return server, env


def recreate_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')


def seed(args) -> list[dict]:
    """Capacity in the demo's L40S pools and `--organizations` organizations, each with one
    write key per client: [{"id", "keys": [secret, ...]}, ...]."""
    from django.db import transaction

    from apps.orchestration.models import Pool
    from apps.orchestration.services import register_node
    from apps.quotas.models import QuotaLimit, QuotaResource
    from apps.tenants.models import Park
    from apps.tenants.services import create_api_key
    from tests.factories import MembershipFactory, OrganizationFactory, UserFactory

    park = Park.objects.get(slug="demo")
    pools = list(
        Pool.objects.filter(
            backend__park=park,
            accelerator_model__name="L40S",
            region__code__in=L40S_REGIONS,
        ).order_by("pk")
    )
    with transaction.atomic():
        for n in range(args.nodes):
            register_node(
                pool=pools[n % len(pools)],
                hostname=f"bench-{n}",
                accelerators=NODE_CARDS,
                vcpu=NODE_VCPU,
                ram_gb=NODE_RAM_GB,
            )
        if args.park_limit:
            for resource in (QuotaResource.ACCELERATORS, QuotaResource.INSTANCES):
                QuotaLimit.objects.create(park=park, resource=resource, limit=HUGE_LIMIT)
    organizations = []
    for _ in range(args.organizations):
        with transaction.atomic():
            organization = OrganizationFactory(park=park, verified=True, wallet=FUNDS_MINOR)
            owner = UserFactory()
            MembershipFactory(organization=organization, user=owner, role="owner")
            QuotaLimit.objects.bulk_create(
                QuotaLimit(park=park, organization=organization, resource=resource, limit=limit)
                for resource, limit in (
                    (QuotaResource.ACCELERATORS, HUGE_LIMIT),
                    (QuotaResource.INSTANCES, HUGE_LIMIT),
                    (QuotaResource.VCPU, HUGE_LIMIT),
                    (QuotaResource.RAM_GB, HUGE_LIMIT),
                    (QuotaResource.DISK_GB, HUGE_LIMIT),
                    (QuotaResource.COMPUTE_UNITS, HUGE_LIMIT),
                )
            )
        # A use case of its own (a durable transaction), after the organization's.
        keys = [
            create_api_key(
                organization=organization, actor=owner, name=f"bench {i}", scope="write"
            )[1]
            for i in range(args.clients)
        ]
        organizations.append({"id": organization.pk, "keys": keys})
    # The planner's statistics, as autovacuum keeps them on a database in use: without them,
    # fresh from seeding, it reads a thousand cards as seven rows and picks slower plans.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return organizations


def start_gunicorn(args, env) -> subprocess.Popen:
    config = ROOT / "deploy" / "gunicorn.conf.py"
    bind = f"127.0.0.1:{args.port}"
    common = ["--workers", str(args.workers), "--bind", bind, "--max-requests", "0"]
    if config.exists():
        command = ["gunicorn", "-c", str(config), *common, "--access-logfile", "/dev/null"]
    else:
        command = ["gunicorn", "portal.wsgi:application", *common]
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    return subprocess.Popen(
        [gunicorn, *command[1:]],
        env={**env, "GUNICORN_WORKERS": str(args.workers), "GUNICORN_BIND": bind},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )


def wait_until_up(base: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    sys.exit("gunicorn did not answer /healthz within 60 s")


# --- load ------------------------------------------------------------------------------------


def run_scenarios(args, base, organizations, static_built, gunicorn_pid: int) -> list[dict]:
    one = organizations[0]
    order = {"method": "POST", "path": "/api/v1/orders/"}
    scenarios = [
        ("orders", "orders, one organization, 1 client", order, [one["keys"][0]]),
        ("orders", f"orders, one organization, {args.clients} clients", order, one["keys"]),
        (
            "across",
            f"orders, across organizations, {args.clients} clients",
            order,
            [
                organizations[1 + i % (len(organizations) - 1)]["keys"][i]
                for i in range(args.clients)
            ],
        ),
        (
            "flavors",
            f"GET /api/v1/flavors/, {args.clients} clients",
            {"method": "GET", "path": "/api/v1/flavors/"},
            one["keys"],
        ),
        (
            "instances",
            f"GET /api/v1/instances/, {args.clients} clients",
            {"method": "GET", "path": "/api/v1/instances/"},
            one["keys"],
        ),
    ]
    if static_built:
        scenarios.append(
            (
                "catalog",
                f"GET /catalog/ (anonymous), {args.clients} clients",
                {"method": "GET", "path": "/catalog/", "anonymous": True},
                one["keys"],
            )
        )
    scenarios = [scenario[1:] for scenario in scenarios if scenario[0] in args.only]
    results = []
    for name, request, keys in scenarios:
        before = cpu_seconds(gunicorn_pid)
        result = drive(base, name, request, keys, args.duration)
        result |= cpu_per_request(before, cpu_seconds(gunicorn_pid), result["ok"])
        if request is order:
            result["idle_cards_after"] = idle_l40s_cards()
        results.append(result)
    return results


def idle_l40s_cards() -> int:
    """The cards orders can still take: in the L40S pools, held by nothing, in service."""
    from apps.orchestration.models import Accelerator

    return Accelerator.objects.filter(
        node__pool__accelerator_model__name="L40S",
        node__pool__region__code__in=L40S_REGIONS,
        allocation__isnull=True,
        out_of_service=False,
    ).count()


def drive(base, name, request, keys, duration) -> dict:
    """One client thread per key, each sending `request` back to back for `duration` s."""
    body = {"flavor": FLAVOR, "image": IMAGE, "ssh_public_key": SSH_KEY, "name": "bench"}
    latencies, failures, lock = [], {}, threading.Lock()
    why = {}  # status: the first such answer's body, to say why
    start = threading.Barrier(len(keys) + 1)
    stop_at = []

    def client(key):
        headers = {} if request.get("anonymous") else {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            start.wait()
            while time.monotonic() < stop_at[0]:
                began = time.perf_counter()
                if request["method"] == "POST":
                    response = http.post(request["path"], json=body)
                else:
                    response = http.get(request["path"])
                took = time.perf_counter() - began
                with lock:
                    if response.status_code < 400:
                        latencies.append(took)
                    else:
                        failures[response.status_code] = failures.get(response.status_code, 0) + 1
                        why.setdefault(response.status_code, response.text[:300])

    threads = [threading.Thread(target=client, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    stop_at.append(time.monotonic() + duration)
    began = time.monotonic()
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    return (
        {"scenario": name, "clients": len(keys), "seconds": round(elapsed, 1)}
        | figures(latencies, elapsed, failures)
        | {"first_failure": why}
    )


def cpu_seconds(gunicorn_pid: int) -> dict:
    """The CPU time (user + system) spent so far by gunicorn (its master and workers), by
    PostgreSQL (every `postgres` process here: none where the server runs elsewhere), by this
    client, and by the whole machine, read from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    spent = {"gunicorn": 0.0, "postgres": 0.0}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, rest = stat.read_text().split(" ", 1)
        except OSError:
            continue  # it ended meanwhile
        command, fields = rest.rsplit(")", 1)
        fields = fields.split()
        # Its own time and its ended children's: a PostgreSQL backend that exits meanwhile
        # is counted in the postmaster's.
        cpu = sum(int(f) for f in fields[11:15]) / tick
        if int(pid) == gunicorn_pid or int(fields[1]) == gunicorn_pid:
            spent["gunicorn"] += cpu
        elif command == "(postgres":
            spent["postgres"] += cpu
    spent["client"] = time.process_time()
    busy = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    idle, iowait, guest, guest_nice = 3, 4, 8, 9  # guest time is counted in user's too
    spent["machine"] = (
        sum(int(f) for i, f in enumerate(busy) if i not in (idle, iowait, guest, guest_nice)) / tick
    )
    return spent


def cpu_per_request(before: dict, after: dict, requests: int) -> dict:
    """{"cpu_ms": {whose: CPU milliseconds a request took}} between two `cpu_seconds`
    readings: where the machine's cores went (the machine's, idle and I/O wait aside)."""
    if not requests:
        return {"cpu_ms": {}}
    return {
        "cpu_ms": {
            whose: round((after[whose] - before[whose]) / requests * 1000, 1) for whose in before
        }
    }


def figures(latencies, elapsed, failures) -> dict:
    ordered = sorted(latencies)

    def pct(p):
        if not ordered:
            return None
        return round(1000 * ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 1)

    return {
        "ok": len(ordered),
        "failed": failures,
        "req_per_s": round(len(ordered) / elapsed, 1),
        "p50_ms": pct(50),
        "p95_ms": pct(95),
        "p99_ms": pct(99),
        "mean_ms": round(1000 * statistics.fmean(ordered), 1) if ordered else None,
    }


# --- pgbench and the oversell check ----------------------------------------------------------


def pgbench(server, admin_url, database: str = PGBENCH_DB) -> float | None:
    recreate_database(admin_url, database)
    connection = [
        "-h",
        server.hostname or "127.0.0.1",
        "-p",
        str(server.port or 5432),
        "-U",
        server.username or "postgres",
    ]
    subprocess.run(
        ["pgbench", *connection, "-i", "-q", database],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run = subprocess.run(
        ["pgbench", *connection, "-T", "10", "-c", "8", "-j", "2", database],
        check=True,
        capture_output=True,
        text=True,
    )
    for line in run.stdout.splitlines():
        if line.startswith("tps ="):
            return float(line.split()[2])
    return None


def oversell_check() -> dict:
    from django.db import connection
    from django.db.models import Count, F, Q

    from apps.orchestration.models import Accelerator, Node
    from apps.orders.models import Instance
    from apps.quotas.models import QuotaLimit
    from apps.quotas.services import organization_usage
    from apps.tenants.models import Organization

    connection.close()  # gunicorn wrote meanwhile: a fresh connection sees it all
    over_nodes = list(
        Node.objects.annotate(
            cards=Count("accelerators"),
            taken=Count("accelerators", filter=Q(accelerators__allocation__isnull=False)),
        )
        .filter(taken__gt=F("cards"))
        .values_list("hostname", flat=True)
    )
    # A card is held by one allocation at most, and each live allocation of a host holds
    # exactly its flavor's count (hosts with none, waiting for approval, hold none: `isnull`
    # alone would match them through the outer join).
    short = [
        i.pk
        for i in Instance.objects.filter(
            workload__allocations__isnull=False, workload__allocations__released_at__isnull=True
        )
        .annotate(cards=Count("workload__allocations__accelerators"))
        .select_related("flavor")
        if i.cards != i.flavor.accelerator_count
    ]
    over_quota = []
    for organization in Organization.objects.filter(quota_limits__isnull=False).distinct():
        held = organization_usage(organization)
        for limit in QuotaLimit.objects.filter(organization=organization):
            used = held.amount(limit)
            if used is not None and used > limit.limit:
                over_quota.append(f"{organization.slug} {limit.resource} {used}>{limit.limit}")
    allocated = Accelerator.objects.filter(allocation__isnull=False).count()
    return {
        "ok": not (over_nodes or short or over_quota),
        "allocated_cards": allocated,
        "nodes_over": over_nodes,
        "hosts_with_wrong_cards": short,
        "over_quota": over_quota,
    }


def report(args, results, tps, check) -> None:
    if args.json:
        print(json.dumps({"scenarios": results, "pgbench_tps": tps, "oversell": check}, indent=2))
        return
    print(f"{'scenario':<52} {'req/s':>7} {'p50':>7} {'p95':>7} {'p99':>7}  ok / failed")
    for r in results:
        print(
            f"{r['scenario']:<52} {r['req_per_s']:>7} {r['p50_ms']!s:>7} {r['p95_ms']!s:>7} "
            f"{r['p99_ms']!s:>7}  {r['ok']} / {r['failed'] or 0}"
        )
    print("(latencies in ms)")
    print("CPU ms a request (gunicorn, PostgreSQL, this client, the whole machine):")
    for r in results:
        cpu = r["cpu_ms"]
        if cpu:
            print(
                f"  {r['scenario']:<50} {cpu['gunicorn']:>6} {cpu['postgres']:>6} "
                f"{cpu['client']:>6} {cpu['machine']:>6}"
            )
    for r in results:
        for status, body in r["first_failure"].items():
            print(f"{r['scenario']}: first {status}: {body}")
    for r in results:
        if "idle_cards_after" in r:
            ran_out = r["idle_cards_after"] < r["clients"]
            print(
                f"{r['scenario']}: {r['idle_cards_after']} L40S cards idle after it"
                + (" - RAN OUT: its req/s counts refusals; raise --nodes" if ran_out else "")
            )
    print(f"gunicorn workers: {args.workers}; cache: {args.cache_url or 'in-memory, per worker'}")
    print(f"pgbench TPC-B, -T 10 -c 8 -j 2, same server: {tps} TPS")
    verdict = "no oversell" if check["ok"] else "OVERSOLD"
    print(
        f"oversell check: {verdict} ({check['allocated_cards']} cards allocated; nodes over: "
        f"{check['nodes_over'] or 'none'}; hosts with wrong cards: "
        f"{check['hosts_with_wrong_cards'] or 'none'}; over quota: {check['over_quota'] or 'none'})"
    )


if __name__ == "__main__":
    main()
