"""Metering: one pass over N running hosts, its wall time and query count.

    python bench/metering.py [--hosts 10000,20000] [--per-organization 5] [--fresh] [--json]

Builds running hosts in a throwaway SQLite database (or DATABASE_URL's, if set, which must be
an empty scratch database): `--per-organization` hosts per organization, each with a compute
meter and a cloud disk meter, running for a day and metered up to now, their first hour's hold
drawn; with `--fresh`, ordered just now, so that the pass also draws every host's hold. For
each size in `--hosts` it adds hosts up to that many, moves the clock on by one metering
interval and runs the beat's metering job once, as a worker would. The pass must stay well
inside the interval, and its query count must not grow with the hosts. Before each pass the
garbage collector runs in full, so that building the hosts (the bench's heap, not a worker's)
does not leave a full collection to fall inside the pass by chance; the time collections took
during the pass is printed apart (`gc s`). Statements are counted
as they go, without Django's debug cursor (which writes out every statement's parameters and
took a fifth of a pass). On PostgreSQL it then runs pgbench's TPC-B on the same server
(bench/load.py's), so that a figure can be read against how fast the machine was.
"""

import argparse
import gc
import json
import os
import sys
import tempfile
import time
import warnings
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Mid-month, so no record is cut at a month boundary.
START = datetime(2026, 3, 10, 10, 0, tzinfo=ZoneInfo("Asia/Shanghai"))
COMPUTE_HOURLY_MINOR = 1000
DISK_HOURLY_MINOR = Decimal(5)  # 100 GB at 36 fen a GB-month


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--hosts", "--instances", dest="hosts", default="10000,20000", help="sizes, comma-separated"
    )
    parser.add_argument("--per-organization", type=int, default=5)
    parser.add_argument("--fresh", action="store_true", help="hosts ordered just now")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(size) for size in args.hosts.split(",")]
    if sizes != sorted(sizes) or args.per_organization < 1:
        parser.error("--hosts must not shrink and --per-organization be at least 1")

    scratch = tempfile.mkdtemp(prefix="loam-bench-")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{scratch}/bench.sqlite3")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("LOAM_DEMO", "true")  # its park runs on the simulator
    warnings.filterwarnings("ignore", "No directory at")  # WhiteNoise: no collectstatic here
    import django

    django.setup()
    import time_machine
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from apps.billing.models import UsageRecord
    from apps.billing.tasks import meter_usage
    from bench.order_profile import collector_time

    call_command("migrate", verbosity=0)
    interval = settings.LOAM_METERING_INTERVAL_S
    results = []
    with time_machine.travel(START, tick=False) as clock:
        world = World(args.per_organization, fresh=args.fresh)
        for size in sizes:
            world.grow_to(size)
            clock.shift(interval)
            records_before = UsageRecord.objects.count()
            statements = StatementCounter()
            gc.collect()
            collecting = collector_time()
            with connection.execute_wrapper(statements):
                started, cpu_started = time.perf_counter(), time.process_time()
                charged = meter_usage()
                wall = time.perf_counter() - started
                cpu = time.process_time() - cpu_started
            gc.callbacks.remove(collecting)
            results.append(
                {
                    "instances": size,
                    "organizations": world.organizations,
                    "meters": world.meters,
                    "seconds": round(wall, 3),
                    # This process's CPU time: on a busy machine, what wall time would be alone
                    # less PostgreSQL's share.
                    "cpu_seconds": round(cpu, 3),
                    "gc_seconds": round(collecting.seconds, 3),
                    "queries": statements.count,
                    "usage_records": UsageRecord.objects.count() - records_before,
                    "charged_minor": charged,
                }
            )

    tps = same_server_pgbench() if connection.vendor == "postgresql" else None
    if args.json:
        print(
            json.dumps(
                {
                    "database": connection.vendor,
                    "interval_s": interval,
                    "passes": results,
                    "pgbench_tps": tps,
                },
                indent=2,
            )
        )
        return
    print(f"database: {connection.vendor}, one pass each after {interval} s")
    print(
        f"{'instances':>10}{'orgs':>7}{'meters':>8}{'seconds':>9}{'cpu s':>7}{'gc s':>7}"
        f"{'queries':>9}{'records':>9}"
    )
    for row in results:
        print(
            f"{row['instances']:>10}{row['organizations']:>7}{row['meters']:>8}"
            f"{row['seconds']:>9}{row['cpu_seconds']:>7}{row['gc_seconds']:>7}{row['queries']:>9}"
            f"{row['usage_records']:>9}"
        )
    if tps is not None:
        print(f"pgbench TPC-B, -T 10 -c 8 -j 2, same server: {tps} TPS")


class StatementCounter:
    """Counts the statements run through it (BEGIN and COMMIT are not statements here)."""

    def __init__(self):
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def same_server_pgbench() -> float | None:
    """TPC-B TPS on DATABASE_URL's server, right after the passes (bench/load.py's run)."""
    from urllib.parse import urlparse

    from bench.load import pgbench

    server = urlparse(os.environ["DATABASE_URL"])
    return pgbench(server, server._replace(path="/postgres").geturl())


class World:
    """One park, one flavor; organizations of `per_organization` running hosts, made in bulk
    (the factories' one row at a time would take longer than what is measured)."""

    def __init__(self, per_organization: int, *, fresh: bool):
        from tests.factories import FlavorFactory, ImageFactory, RegionFactory, UserFactory

        self.per_organization = per_organization
        self.fresh = fresh
        self.flavor = FlavorFactory()
        self.park = self.flavor.family.park
        self.image = ImageFactory(park=self.park)
        self.region = RegionFactory(park=self.park)
        self.user = UserFactory()
        self.instances = self.organizations = self.meters = 0
        self._pending = []  # (organization, its hosts) not yet written

    def grow_to(self, size: int) -> None:
        from django.db import transaction

        from apps.orders.models import Instance, InstanceState
        from apps.tenants.models import Organization

        with transaction.atomic():
            while self.instances < size:
                count = min(self.per_organization, size - self.instances)
                n = self.organizations
                self.organizations += 1
                organization = Organization(park=self.park, name=f"Bench {n}", slug=f"bench-{n}")
                instances = [
                    Instance(
                        organization=organization,
                        name=f"host-{n}-{i}",
                        flavor=self.flavor,
                        image=self.image,
                        region=self.region,
                        state=InstanceState.RUNNING,
                        system_disk_gb=self.flavor.system_disk_gb,
                        data_disk_gb=100,
                        created_by=self.user,
                    )
                    for i in range(count)
                ]
                self.instances += count
                self._pending.append((organization, instances))
                if len(self._pending) >= 500 or self.instances >= size:
                    self._flush()

    def _flush(self):
        from django.utils import timezone

        from apps.billing.metering import amount_for
        from apps.billing.models import Hold, Meter, MeterKind, Wallet
        from apps.orders.models import Instance
        from apps.tenants.models import Organization
        from bench.workloads import give_workloads

        now = timezone.now()
        running_for = 0 if self.fresh else 24 * 3600
        held = COMPUTE_HOURLY_MINOR if self.fresh else 0
        organizations = Organization.objects.bulk_create([o for o, _ in self._pending])
        wallets = Wallet.objects.bulk_create(
            Wallet(organization=o, currency=self.park.currency, balance_minor=10_000_000)
            for o in organizations
        )
        wallet_of = {wallet.organization_id: wallet for wallet in wallets}
        planned = [instance for _, hosts in self._pending for instance in hosts]
        give_workloads(planned, "host")
        instances = Instance.objects.bulk_create(planned)
        holds, meters = [], []
        for instance in instances:
            wallet = wallet_of[instance.organization.pk]
            holds.append(Hold(wallet=wallet, workload=instance.workload, amount_minor=held))
            wallet.held_minor += held
            for kind, hourly, units in (
                (MeterKind.COMPUTE, COMPUTE_HOURLY_MINOR, Decimal("3.12")),
                (MeterKind.DISK, DISK_HOURLY_MINOR, Decimal(0)),
            ):
                meters.append(
                    Meter(
                        organization=instance.organization,
                        workload=instance.workload,
                        kind=kind,
                        quantity=1 if kind == MeterKind.COMPUTE else 100,
                        hourly_minor=hourly,
                        compute_units=units,
                        currency=self.park.currency,
                        started_at=now - timedelta(seconds=running_for),
                        metered_until=now,
                        metered_seconds=running_for,
                        metered_minor=amount_for(Decimal(hourly), running_for),
                    )
                )
        Hold.objects.bulk_create(holds)
        Wallet.objects.bulk_update(wallets, ["held_minor"], batch_size=500)
        Meter.objects.bulk_create(meters)
        self.meters += len(meters)
        self._pending = []


if __name__ == "__main__":
    main()
