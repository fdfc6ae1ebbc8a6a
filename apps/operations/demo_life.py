"""A month of life in the demo park (`manage.py seed_demo`): what `demo` says happened, written
through the services at the moments it happened, so both consoles open on a working park.

The seed runs each use case at a past moment with `running_at`, its own clock: the services,
the models' `auto_now` fields and the simulator all read `django.utils.timezone.now`, so that
one function answering the story's moment is the whole of it. Nothing else uses it.

The seed is the worker of its own story: after a use case it runs, there and then, the jobs the
use case sends after commit (provisioning, an operation's backend call, a queue pass, a task's
hand-over and the look at its end), as a worker would. The messages the commits send as well
find their work done when a worker takes them (every job re-checks its rows' state).

Each step is skipped when it is done already (an idempotency key, or the row it makes), so the
seed runs again without a duplicate; a later run brings the time-driven parts up to date: the
daily metering passes, the capacity samples and the telemetry up to now.
"""

import hashlib
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.core.files.base import ContentFile
from django.db.models import Count, Max, Min
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from apps.billing import invoicing, metering
from apps.billing.models import BankTransfer, BankTransferState, LedgerEntry, Meter
from apps.billing.services import (
    adjust_balance,
    enforce_balance,
    enforce_spend_quota,
    wallet_of,
)
from apps.billing.transfers import announce_bank_transfer, credit_bank_transfer
from apps.catalog.models import AcceleratorModel, Flavor, Image, Region
from apps.operations import demo
from apps.orchestration import scheduling
from apps.orchestration.capacity import RAW_SAMPLES_KEPT_FOR
from apps.orchestration.models import (
    Allocation,
    Backend,
    CapacitySample,
    Node,
    Pool,
    Task,
    TaskState,
)
from apps.orchestration.services import live_allocation, probe_backend
from apps.orchestration.tasks import follow_task, run_task
from apps.orders.models import HostSample, Instance, InstanceState
from apps.orders.monitoring import sample_past
from apps.orders.operations import request_operation
from apps.orders.services import HostRequest, submit_create
from apps.orders.tasks import fulfil_order, provision_instance
from apps.tenants.models import Membership, Organization, Park, VerificationState
from apps.tenants.services import (
    approve_verification,
    create_organization,
    submit_verification,
)

ENGLISH_OPENING_LINE = "Demo opening balance"  # what earlier seeds wrote, untranslated
SAMPLE_EVERY = timedelta(minutes=5)  # as the beat samples capacity
SSH_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4 "
    "ml-team@demo-enterprise"
)


@contextmanager
def running_at(moment: datetime) -> Iterator[None]:
    """Run the block as if it were `moment`: `django.utils.timezone.now` answers it. The
    services read the time there and nowhere else (the models' `auto_now` fields and the
    simulator too), so this one patch moves all of them, and only while the block runs."""
    real = timezone.now
    timezone.now = lambda: moment
    try:
        yield
    finally:
        timezone.now = real


def story_start(now: datetime) -> datetime:
    """The story's first day (midnight, local time): `demo.STORY_DAYS` ago, or earlier when that
    is in this month, so that last month always has usage and its invoice."""
    earliest = min(
        now - timedelta(days=demo.STORY_DAYS), metering.month_start(now) - timedelta(days=4)
    )
    return metering.day_start(earliest)


@dataclass
class Cast:
    park: Park
    backend: Backend
    enterprise: Organization
    owner: object
    operator: object
    tenant_owners: dict  # email -> user, of demo.OTHER_TENANTS


class Story:
    def __init__(self, cast: Cast, *, now: datetime):
        self.cast = cast
        self.now = now
        self.start = story_start(now)
        self.steps: list[tuple[datetime, Callable[[], None]]] = []

    def at(self, moment: tuple) -> datetime:
        anchor, delta = moment
        return (self.start if anchor == "start" else self.now) + delta

    def step(self, moment: tuple | datetime, action: Callable[[], None]) -> None:
        when = moment if isinstance(moment, datetime) else self.at(moment)
        if when <= self.now:  # what is still to come, the live demo does
            self.steps.append((when, action))

    def write(self) -> None:
        """Every step at its moment, in order, with the simulator answering as in the story;
        then the live demo's simulator, and the park brought up to now."""
        self._plan()
        self.steps.sort(key=lambda step: step[0])  # stable: steps at one moment keep their order
        self._set_simulator(history=True)
        try:
            # Texts the story stores (ledger lines) are in the park's language, as its pages.
            with translation.override(settings.LANGUAGE_CODE):
                for moment, action in self.steps:
                    with running_at(moment):
                        action()
        finally:
            with running_at(self.now):
                self._set_simulator(history=False)
        with running_at(self.now):
            self._catch_up()

    # --- the plan ---------------------------------------------------------------------------

    def _plan(self) -> None:
        enterprise, owner = self.cast.enterprise, self.cast.owner
        self.step(demo.OPENING_BALANCE_AT, lambda: give_opening_balance(self.cast))
        for amount, announced, credited in demo.DEMO_TRANSFERS:
            self._transfer(enterprise, owner, amount, announced, credited)
        for host in demo.DEMO_HOSTS:
            self.step(host.ordered, lambda host=host: self._order(enterprise, owner, host))
            for n, (kind, moment) in enumerate(host.later):
                self.step(moment, lambda host=host, kind=kind, n=n: self._operate(host, kind, n))
            if host.idle_since:
                self.step(host.idle_since, self._idle)
        for task in demo.DEMO_TASKS:
            self.step(task.submitted, lambda task=task: self._submit(task))
            end = self.at(task.submitted) + timedelta(minutes=task.minutes)
            self.step(end, lambda task=task: self._look_at(task))
        for tenant in demo.OTHER_TENANTS:
            self._tenant(tenant)
        midnight = self.start + timedelta(days=1)
        while midnight <= self.now:
            self.step(midnight, lambda until=midnight: self._meter(until))
            midnight += timedelta(days=1)  # local midnights: aware arithmetic is wall time
        boundary = metering.month_start(self.now)
        # The beat issues last month's invoices within the hour after the month began.
        self.step(boundary + timedelta(minutes=20), lambda: self._invoice(boundary))

    def _tenant(self, tenant: demo.DemoTenant) -> None:
        owner = self.cast.tenant_owners[tenant.owner_email]
        self.step(tenant.signed_up, lambda: self._sign_up(tenant, owner))
        self._transfer(lambda: self._organization_of(owner), owner, *tenant.transfer)
        self.step(tenant.verification_sent, lambda: self._send_licence(tenant, owner))
        if tenant.verified:
            self.step(tenant.verified, lambda: self._verify(owner))
        for host in tenant.hosts:
            self.step(
                host.ordered,
                lambda host=host: self._order(self._organization_of(owner), owner, host),
            )

    # --- the simulator ----------------------------------------------------------------------

    def _set_simulator(self, *, history: bool) -> None:
        """The demo's simulated backend. While the story is written it answers host requests at
        once (the story says when each job looks) and runs the story's tasks as scripted; the
        live demo then takes a second or three, as a backend would. The cards of the idle hosts
        read idle in both."""
        config = {**demo.LIVE_SIMULATOR, "utilization": self._idle_cards()}
        if history:
            config["latency_seconds"] = [0, 0]
            config["tasks"] = {
                task.name: {"seconds": task.minutes * 60, "exit_code": task.exit_code}
                for task in demo.DEMO_TASKS
            }
        Backend.objects.filter(pk=self.cast.backend.pk).update(config=config)

    def _idle_cards(self) -> dict:
        """{node: {index: pct}}: the cards of the demo hosts idle by now, where they run: those
        the story says idle by now, and those an earlier run said idle already (a run later
        than the first places the story's moments later, not its past)."""
        scripted = Backend.objects.get(pk=self.cast.backend.pk).config.get("utilization") or {}
        hosts = {host.name: host for host in demo.DEMO_HOSTS if host.idle_since}
        cards: dict = {}
        for instance in self._hosts(hosts).filter(state=InstanceState.RUNNING):
            allocation = live_allocation(instance)
            if allocation is None:
                continue
            node = instance.node.hostname
            indices = [str(i) for i in allocation.accelerators.values_list("index", flat=True)]
            idle_before = all(index in scripted.get(node, {}) for index in indices)
            if idle_before or self.at(hosts[instance.name].idle_since) <= timezone.now():
                for index in indices:
                    cards.setdefault(node, {})[index] = demo.IDLE_READING_PCT
        return cards

    def _idle(self) -> None:
        """A host's work ended: its cards read idle from this reading on."""
        backend = Backend.objects.get(pk=self.cast.backend.pk)
        if backend.last_checked_at and backend.last_checked_at >= timezone.now():
            return  # read since: the telemetry already says since when it idles
        self._set_simulator(history=True)
        probe_backend(backend=backend)

    def _catch_up(self) -> None:
        """Up to now: fresh telemetry, and the tasks that ended since the last look finished (a
        later run finds some)."""
        probe_backend(backend=Backend.objects.get(pk=self.cast.backend.pk))
        self._look_at()

    # --- money ------------------------------------------------------------------------------

    def _transfer(self, organization, actor, amount, announced, credited) -> None:
        """A bank transfer the tenant announces, and the operator credits when `credited` is a
        moment (else it awaits the money). `organization`: a callable where the organization
        is signed up by the story itself."""

        def payer():
            return organization() if callable(organization) else organization

        def mine():
            return BankTransfer.objects.filter(organization=payer(), amount_minor=amount)

        def announce():
            if not mine().exists():
                announce_bank_transfer(organization=payer(), actor=actor, amount_minor=amount)

        def credit():
            for transfer in mine().filter(state=BankTransferState.AWAITING):
                credit_bank_transfer(
                    transfer_id=transfer.pk, operator=self.cast.operator, received_minor=amount
                )

        self.step(announced, announce)
        if credited:
            self.step(credited, credit)

    def _meter(self, until: datetime) -> None:
        """The metering pass (apps.billing.tasks.meter_usage) of the park's organizations with
        meters due, after a look at the tasks: the beat's looks every 30 s tell metering how
        far each task is known to have run (a later run of the story, finding a task's meter
        known further by then, would otherwise meter it here again)."""
        self._look_at()
        meters = metering.due(Meter.objects.filter(organization__park=self.cast.park))
        organizations = sorted(set(meters.values_list("organization_id", flat=True)))
        metered = metering.meter_organizations(organizations, until=until)
        for organization_id in metered.balances_to_enforce:
            enforce_balance(organization_id)
        for organization_id in metered.spend_limited:
            enforce_spend_quota(organization_id)

    def _invoice(self, boundary: datetime) -> None:
        """Last month's invoices, as the beat's month-end job issues them (for the park's
        organizations only)."""
        for organization in Organization.objects.filter(park=self.cast.park).order_by("pk"):
            start = invoicing.next_period_start(organization)
            if start is None or start >= boundary:
                continue
            try:
                invoicing.issue_invoice(organization=organization, period_end=boundary)
            except invoicing.NothingToInvoice:
                continue

    # --- hosts ------------------------------------------------------------------------------

    def _hosts(self, names):
        return Instance.objects.filter(
            organization__park=self.cast.park, name__in=names
        ).select_related("node")

    def _order(self, organization, actor, host: demo.DemoHost) -> None:
        flavor = Flavor.objects.get(family__park=self.cast.park, code=host.flavor)
        request = HostRequest(
            flavor=flavor,
            image=Image.objects.get(park=self.cast.park, code=host.image),
            region=Region.objects.get(park=self.cast.park, code=host.region),
            system_disk_gb=flavor.system_disk_gb,
            data_disk_gb=host.data_disk_gb,
            bandwidth_mbps=host.bandwidth_mbps,
            ssh_public_key=SSH_KEY,
            name=host.name,
        )
        (order,) = submit_create(
            organization=organization,
            actor=actor,
            request=request,
            idempotency_key=f"demo:{host.name}",
        )
        provision_instance(order.instance_id)  # a no-op unless it is provisioning

    def _operate(self, host: demo.DemoHost, kind: str, n: int) -> None:
        instance = self._hosts([host.name]).get(organization=self.cast.enterprise)
        order = request_operation(
            instance=instance,
            actor=self.cast.owner,
            kind=kind,
            idempotency_key=f"demo:{host.name}:{n}",
        )
        fulfil_order(order.pk)  # a no-op once it is done

    # --- training tasks ---------------------------------------------------------------------

    def _submit(self, task: demo.DemoTask) -> None:
        enterprise = self.cast.enterprise
        if Task.objects.filter(organization=enterprise, name=task.name).exists():
            return
        scheduling.submit_task(
            organization=enterprise,
            actor=self.cast.owner,
            data=scheduling.TaskInput(
                image=Image.objects.get(park=self.cast.park, code=task.image),
                command=task.command,
                name=task.name,
                accelerator_model=AcceleratorModel.objects.get(name=task.model),
                accelerator_milli=task.cards * 1000,
                vcpu=8 * task.cards,
                ram_gb=64 * task.cards,
            ),
        )
        placed = scheduling.schedule_queue_pass(park=self.cast.park).placed
        for task_id in placed:
            run_task(task_id)  # hands it to the simulator, which runs it from now

    def _look_at(self, task: demo.DemoTask | None = None) -> None:
        """A look at the park's tasks on the backend (all of them, or `task`), as the beat's
        looks every 30 s: one that ended is finished with the backend's own times."""
        running = Task.objects.filter(
            organization__park=self.cast.park, state__in=(TaskState.PLACED, TaskState.RUNNING)
        ).exclude(backend_handle="")
        if task is not None:
            running = running.filter(organization=self.cast.enterprise, name=task.name)
        for task_id in running.order_by("pk").values_list("pk", flat=True):
            follow_task(task_id)

    # --- the other tenants --------------------------------------------------------------------

    def _organization_of(self, owner) -> Organization:
        return Organization.objects.get(park=self.cast.park, memberships__user=owner)

    def _sign_up(self, tenant: demo.DemoTenant, owner) -> None:
        if Membership.objects.filter(user=owner, organization__park=self.cast.park).exists():
            return
        create_organization(user=owner, park=self.cast.park, name=tenant.name)

    def _send_licence(self, tenant: demo.DemoTenant, owner) -> None:
        organization = self._organization_of(owner)
        if organization.verification_state != VerificationState.UNVERIFIED:
            return
        submit_verification(
            organization=organization,
            actor=owner,
            legal_name=tenant.legal_name,
            credit_code=tenant.credit_code,
            licence=ContentFile(licence_pdf(tenant.credit_code), name="licence.pdf"),
        )

    def _verify(self, owner) -> None:
        organization = self._organization_of(owner)
        if organization.verification_state == VerificationState.SUBMITTED:
            approve_verification(organization=organization, operator=self.cast.operator)


def write_story(cast: Cast, *, now: datetime | None = None) -> None:
    Story(cast, now=now or timezone.now()).write()


def give_opening_balance(cast: Cast) -> None:
    """The demo enterprise's opening balance, an operator's adjustment with a line in the park's
    language: the story's first step, or now in a park without the story (`--no-life`)."""
    wallet = wallet_of(cast.enterprise)
    with translation.override(settings.LANGUAGE_CODE):
        line = _("Demo opening balance")
    if LedgerEntry.objects.filter(wallet=wallet).exists():
        # A park seeded before the story wrote this line itself, in English: only its words
        # change, to the park's language, as the story writes them.
        LedgerEntry.objects.filter(wallet=wallet, description=ENGLISH_OPENING_LINE).update(
            description=line
        )
        return
    adjust_balance(
        organization=cast.enterprise,
        operator=cast.operator,
        amount_minor=demo.ENTERPRISE_OPENING_BALANCE_MINOR,
        reason=line,
    )


# --- the business licence the tenants send ----------------------------------------------------


def licence_pdf(credit_code: str) -> bytes:
    """A one-page PDF that says it stands for a business licence (in English: the PDF's
    standard font has no Chinese)."""
    text = f"Business licence (demo) - unified social credit code {credit_code}"
    stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


# --- host samples -----------------------------------------------------------------------------

HOST_SAMPLE_EVERY = timedelta(minutes=5)


def write_host_samples(*, now: datetime) -> int:
    """The running demo hosts' monitoring samples every 5 minutes over the charts' longest range
    (7 days), from the simulator's model, as its minute job would have taken them (each from
    when the host took the cards it holds), so the host pages chart a past on first sign-in; a
    later run adds only what is newer than the newest sample. Returns how many it wrote."""
    newest = HostSample.objects.aggregate(at=Max("at"))["at"]
    since = newest + HOST_SAMPLE_EVERY if newest else now - timedelta(days=7)
    return sample_past(since=since, every=HOST_SAMPLE_EVERY, now=now)


# --- capacity samples -------------------------------------------------------------------------


def write_capacity_samples(park: Park, *, now: datetime) -> int:
    """The pools' capacity every 5 minutes over the last `demo.STORY_DAYS` days, where the park
    has no sample yet, stored as the sampler keeps them (`apps.orchestration.capacity`): each
    moment of the last day, and the hourly means of the moments before. What each pool held is
    read off the allocations' own times; which cards idled, off the nodes' telemetry; what the
    busy ones measured is a modelled daily swing. Returns how many samples it wrote."""
    samples = CapacitySample.objects.filter(park=park)
    bounds = samples.aggregate(first=Min("taken_at"), last=Max("taken_at"))
    since = now - timedelta(days=demo.STORY_DAYS)
    moments = [m for m in _grid(since, now) if bounds["first"] is None or m < bounds["first"]]
    if bounds["last"] is not None:
        moments += _grid(bounds["last"] + SAMPLE_EVERY, now)
    if not moments:
        return 0
    pools = list(
        Pool.objects.filter(backend__park=park)
        .select_related("accelerator_model")
        .annotate(total=Count("nodes__accelerators"))
        .order_by("pk")
    )
    history = _PoolHistory(pools)
    cutoff = (now - RAW_SAMPLES_KEPT_FOR).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    zone = timezone.get_current_timezone()
    days = [_working_day(moment.astimezone(zone)) for moment in moments]
    rows = []
    for pool in pools:
        hours: dict[datetime, list[dict]] = {}
        for moment, day_share in zip(moments, days, strict=True):
            reading = history.reading(pool, moment, day_share)
            if moment >= cutoff:
                rows.append(_sample(park, pool, moment, [reading]))
            else:
                hours.setdefault(moment.replace(minute=0), []).append(reading)
        rows += [_sample(park, pool, hour, readings) for hour, readings in hours.items()]
    CapacitySample.objects.bulk_create(rows, ignore_conflicts=True, batch_size=2000)
    return len(rows)


def _grid(since: datetime, until: datetime) -> list[datetime]:
    """The 5-minute marks (UTC) from `since` to `until`, both included."""
    step = int(SAMPLE_EVERY.total_seconds())
    first = math.ceil(since.timestamp() / step) * step
    last = math.floor(until.timestamp() / step) * step
    return [datetime.fromtimestamp(t, UTC) for t in range(first, last + 1, step)]


class _PoolHistory:
    """What each pool held when, from its allocations (created, released, cards), and since
    when its held cards idle (the nodes' telemetry)."""

    def __init__(self, pools):
        self.held: dict[int, list[tuple[datetime, datetime | None, int]]] = {
            p.pk: [] for p in pools
        }
        rows = Allocation.objects.filter(node__pool__in=pools, share_milli=0).values_list(
            "node__pool_id",
            "created_at",
            "released_at",
            "workload__instance__flavor__accelerator_count",
            "workload__task__accelerator_milli",
        )
        for pool_id, created, released, host_cards, task_milli in rows:
            cards = host_cards if host_cards is not None else task_milli // 1000
            self.held[pool_id].append((created, released, cards))
        self.idle: dict[int, list[datetime]] = {p.pk: [] for p in pools}
        held_cards = Allocation.objects.filter(
            node__pool__in=pools, released_at__isnull=True
        ).values_list("node__pool_id", "node_id", "accelerators__index")
        telemetry = dict(Node.objects.filter(pool__in=pools).values_list("pk", "telemetry"))
        for pool_id, node_id, index in held_cards:
            if index is None:
                continue
            reading = ((telemetry.get(node_id) or {}).get("accelerators") or {}).get(str(index))
            since = (reading or {}).get("idle_since")
            if since:
                self.idle[pool_id].append(datetime.fromisoformat(since))

    def reading(self, pool, moment: datetime, day_share: float) -> dict:
        allocated = sum(
            cards
            for created, released, cards in self.held[pool.pk]
            if created <= moment and (released is None or moment < released)
        )
        idle = min(allocated, sum(1 for since in self.idle[pool.pk] if since <= moment))
        util = None
        if allocated:
            # A busy card's utilization: the pool's own level, higher in the working day.
            busy = 55 + _unit(f"{pool.pk}") * 25 + 12 * day_share
            util = (busy * (allocated - idle) + demo.IDLE_READING_PCT * idle) / allocated
        return {"allocated": allocated, "idle": idle, "util": util}


def _working_day(local: datetime) -> float:
    """-1 at 3 in the night to 1 at 3 in the afternoon (local time), with a little noise."""
    hour = local.hour + local.minute / 60
    noise = 0.2 * math.sin(local.timestamp() / 1700)
    return math.sin(2 * math.pi * (hour - 9) / 24) + noise


def _unit(text: str) -> float:
    return hashlib.sha256(text.encode()).digest()[0] / 255


def _sample(park, pool, taken_at: datetime, readings: list[dict]) -> CapacitySample:
    """One sample of `readings` (one moment, or an hour's moments: their means)."""
    allocated = _whole(sum(r["allocated"] for r in readings) / len(readings))
    utils = [r["util"] for r in readings if r["util"] is not None]
    watts = Decimal(pool.accelerator_model.tdp_w) * pool.pue
    return CapacitySample(
        park=park,
        pool=pool,
        taken_at=taken_at,
        accelerators_total=pool.total,
        accelerators_allocated=allocated,
        accelerators_idle=_whole(sum(r["idle"] for r in readings) / len(readings)),
        utilization_pct=(
            Decimal(sum(utils) / len(utils)).quantize(Decimal("0.1")) if utils else None
        ),
        watts=_whole(sum(Decimal(r["allocated"]) * watts for r in readings) / len(readings)),
        measured_watts=None,
        measured_accelerators=0,
    )


def _whole(mean) -> int:
    return int(Decimal(mean).quantize(Decimal(1), rounding=ROUND_HALF_UP))
