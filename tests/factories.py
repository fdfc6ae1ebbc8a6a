"""factory_boy factories for every model.

Related objects stay consistent by default: an organization's instances, tasks, prices and
quotas live in its own park, an instance's flavor family, image and region belong to that park,
and an allocation's instance runs on the allocation's node. Override a SubFactory's own fields
with the double-underscore syntax (`InstanceFactory(organization__park=park)`).
"""

from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from functools import cache
from hashlib import sha256

import factory
import pytest
from allauth.account.models import EmailAddress
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from apps.agents.models import (
    AgentCard,
    AgentHost,
    AgentHostPort,
    AgentServer,
    CardSample,
    JoinToken,
    SavedImage,
    SavedImageCopy,
    WantedState,
)
from apps.agents.services import secret_hash
from apps.api.models import IdempotencyRecord
from apps.billing.metering import add_monthly_spend
from apps.billing.models import (
    BankTransfer,
    BankTransferState,
    BillingMode,
    EntryKind,
    FundsSuspension,
    Hold,
    Invoice,
    InvoiceLine,
    InvoiceState,
    LedgerEntry,
    Meter,
    MeterKind,
    MonthlySpend,
    Payment,
    PaymentState,
    StripeEvent,
    UsageRecord,
    VatInvoiceKind,
    VatInvoiceRequest,
    VatInvoiceState,
    Wallet,
)
from apps.catalog.models import (
    AcceleratorModel,
    Flavor,
    FlavorFamily,
    Image,
    Price,
    PriceKind,
    Region,
    RegionLevel,
    ResourceType,
    SoftwareStack,
    Vendor,
)
from apps.core.models import AuditEvent
from apps.core.money import Currency
from apps.orchestration.adapter import measured_power
from apps.orchestration.models import (
    Accelerator,
    Allocation,
    Backend,
    CapacitySample,
    FairShare,
    Node,
    NodeHealth,
    Placement,
    Pool,
    Preemption,
    RoomTally,
    SchedulingPolicy,
    Task,
    TaskPreference,
    TaskState,
)
from apps.orchestration.rooms import NodeRoom, recount
from apps.orders.models import (
    ApprovalPolicy,
    HostSample,
    IdlePolicy,
    Instance,
    InstanceState,
    Order,
    OrderKind,
    OrderState,
    PortMapping,
    SecurityGroup,
    SecurityGroupRule,
)
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.storage.models import Volume
from apps.tenants.credit_code import check_character
from apps.tenants.models import (
    ApiKey,
    ApiKeyScope,
    Invitation,
    Membership,
    Organization,
    Park,
    ParkOperator,
    Role,
    VerificationState,
)
from apps.webhooks.models import DeliveryState, WebhookDelivery, WebhookEndpoint
from apps.workloads.models import Workload, WorkloadKind

# Fixed instants keep sequences of periods and intervals apart and reproducible.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def credit_code(n: int) -> str:
    """A valid 统一社会信用代码; the 17-character base is digits and M, A, all in the alphabet."""
    base = f"91310115MA{n:07d}"
    return base + check_character(base)


@contextmanager
def refused(constraint: str):
    """Expect the database to refuse what the block writes, and `constraint` to be the reason.

    `constraint` is the name of a constraint in some model's Meta.constraints or of a trigger,
    or "table.column" for a field declared unique=True. The block runs in its own savepoint, so
    the test's transaction stays usable afterwards.
    """
    with pytest.raises(IntegrityError) as excinfo, transaction.atomic():
        yield excinfo
    message = str(excinfo.value)
    expected = _refusal_message(constraint)
    assert expected in message, f"expected {expected!r} in {message!r}"


def _refusal_message(constraint: str) -> str:
    sqlite = connection.vendor == "sqlite"
    if "." in constraint:  # a unique=True field
        column = constraint.split(".", 1)[1]
        return f"UNIQUE constraint failed: {constraint}" if sqlite else f"Key ({column})="
    unique = _unique_constraint(constraint)
    if unique is None:  # a check constraint or a trigger: both databases name it
        return constraint
    if not sqlite:
        return f'unique constraint "{constraint}"'
    model, fields = unique
    table = model._meta.db_table
    columns = ", ".join(f"{table}.{model._meta.get_field(name).column}" for name in fields)
    return f"UNIQUE constraint failed: {columns}"  # SQLite names the columns, not the index


def _unique_constraint(name: str):
    for model in apps.get_models():
        for constraint in model._meta.constraints:
            if constraint.name == name and isinstance(constraint, models.UniqueConstraint):
                return model, constraint.fields
    return None


class Factory(factory.django.DjangoModelFactory):
    """Base: post-generation hooks here only touch many-to-many rows, so no second save."""

    class Meta:
        abstract = True
        skip_postgeneration_save = True


@cache
def _password_hash(raw: str) -> str:
    return make_password(raw)


# --- tenants ---------------------------------------------------------------------------------


class UserFactory(Factory):
    class Meta:
        model = get_user_model()

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda o: f"{o.username}@example.com")
    # Hashed once and shared: hashing per user (PBKDF2) would dominate the suite's run time.
    password = factory.LazyFunction(lambda: _password_hash("pw"))

    @factory.post_generation
    def verified_email(user, create, extracted, **kwargs):
        """The user's address is verified (as after allauth's email confirmation) unless
        `verified_email=False` is passed."""
        if create and extracted is not False:
            EmailAddress.objects.create(user=user, email=user.email, verified=True, primary=True)


class ParkFactory(Factory):
    class Meta:
        model = Park

    name = factory.Sequence(lambda n: f"Park {n}")
    slug = factory.Sequence(lambda n: f"park-{n}")
    currency = Currency.CNY


class ParkOperatorFactory(Factory):
    class Meta:
        model = ParkOperator

    park = factory.SubFactory(ParkFactory)
    user = factory.SubFactory(UserFactory)


class OrganizationFactory(Factory):
    class Meta:
        model = Organization

    park = factory.SubFactory(ParkFactory)
    name = factory.Sequence(lambda n: f"Organization {n}")
    slug = factory.Sequence(lambda n: f"org-{n}")
    legal_name = factory.LazyAttribute(lambda o: f"{o.name} Co., Ltd.")
    credit_code = factory.Sequence(credit_code)
    verification_state = VerificationState.UNVERIFIED

    class Params:
        verified = factory.Trait(verification_state=VerificationState.VERIFIED)
        anonymous = factory.Trait(legal_name="", credit_code="")

    @factory.post_generation
    def wallet(organization, create, extracted, **kwargs):
        """A wallet with ¥100,000, so what tests order is paid for; `wallet=False` for none,
        `wallet=N` for a balance of N minor units."""
        if create and extracted is not False:
            balance = FUNDED_BALANCE_MINOR if extracted in (None, True) else extracted
            WalletFactory(organization=organization, balance_minor=balance)


class MembershipFactory(Factory):
    class Meta:
        model = Membership

    organization = factory.SubFactory(OrganizationFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.MEMBER


class InvitationFactory(Factory):
    class Meta:
        model = Invitation

    organization = factory.SubFactory(OrganizationFactory)
    email = factory.Sequence(lambda n: f"invitee{n}@example.com")
    role = Role.MEMBER
    token_hash = factory.Sequence(lambda n: sha256(f"invitation-{n}".encode()).hexdigest())
    invited_by = factory.SubFactory(UserFactory)
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(days=7))


class ApiKeyFactory(Factory):
    class Meta:
        model = ApiKey

    organization = factory.SubFactory(OrganizationFactory)
    name = factory.Sequence(lambda n: f"key {n}")
    prefix = factory.Sequence(lambda n: f"lk{n:08x}")
    key_hash = factory.Sequence(lambda n: sha256(f"api-key-{n}".encode()).hexdigest())
    scope = ApiKeyScope.READ
    created_by = factory.SubFactory(UserFactory)


# --- catalog ---------------------------------------------------------------------------------


class RegionFactory(Factory):
    """The park's center by default; `province=True` or `edge=True` hang it under a parent."""

    class Meta:
        model = Region

    park = factory.SubFactory(ParkFactory)
    code = factory.Sequence(lambda n: f"region-{n}")
    name = factory.Sequence(lambda n: f"Region {n}")
    level = RegionLevel.CENTER
    parent = None
    latency_ms = 0

    class Params:
        province = factory.Trait(
            level=RegionLevel.PROVINCE,
            parent=factory.SubFactory(
                "tests.factories.RegionFactory", park=factory.SelfAttribute("..park")
            ),
            latency_ms=8,
        )
        edge = factory.Trait(
            level=RegionLevel.EDGE,
            parent=factory.SubFactory(
                "tests.factories.RegionFactory",
                park=factory.SelfAttribute("..park"),
                province=True,
            ),
            latency_ms=3,
        )


class ProvinceRegionFactory(RegionFactory):
    province = True


class EdgeRegionFactory(RegionFactory):
    edge = True


class AcceleratorModelFactory(Factory):
    """`compute_units` is left to the model's save(): dense FP16 TFLOPS / 100."""

    class Meta:
        model = AcceleratorModel

    vendor = Vendor.NVIDIA
    name = factory.Sequence(lambda n: f"Test GPU {n}")
    slug = factory.Sequence(lambda n: f"test-gpu-{n}")
    memory_gb = 80
    fp16_tflops = Decimal("989.5")
    tdp_w = 700
    software_stack = SoftwareStack.CUDA
    domestic = False

    class Params:
        ascend = factory.Trait(
            vendor=Vendor.HUAWEI,
            memory_gb=64,
            fp16_tflops=Decimal("320.0"),
            tdp_w=400,
            software_stack=SoftwareStack.CANN,
            domestic=True,
        )


class FlavorFamilyFactory(Factory):
    class Meta:
        model = FlavorFamily

    park = factory.SubFactory(ParkFactory)
    code = factory.Sequence(lambda n: f"family-{n}")
    name = factory.Sequence(lambda n: f"Family {n}")
    resource_type = ResourceType.CLOUD_HOST
    accelerator_model = factory.SubFactory(AcceleratorModelFactory)


class FlavorFactory(Factory):
    """Sizes are a sequence so several flavors of one family never collide."""

    class Meta:
        model = Flavor

    family = factory.SubFactory(FlavorFamilyFactory)
    code = factory.Sequence(lambda n: f"flavor-{n}")
    accelerator_count = factory.Sequence(lambda n: n + 1)
    vcpu = factory.LazyAttribute(lambda o: min(o.accelerator_count * 16, 256))
    ram_gb = factory.LazyAttribute(lambda o: min(o.accelerator_count * 128, 2048))
    system_disk_gb = 100
    is_active = True


class ImageFactory(Factory):
    """Pass `compatible_accelerators=[model, ...]` to link accelerator models."""

    class Meta:
        model = Image

    park = factory.SubFactory(ParkFactory)
    code = factory.Sequence(lambda n: f"image-{n}")
    name = factory.Sequence(lambda n: f"Ubuntu 22.04 CUDA 12.4 #{n}")
    os = "Ubuntu 22.04"
    software_stack = SoftwareStack.CUDA
    stack_version = "12.4"
    is_active = True

    @factory.post_generation
    def compatible_accelerators(self, create, extracted, **kwargs):
        if create and extracted:
            self.compatible_accelerators.add(*extracted)


class PriceFactory(Factory):
    """A flavor-hour price by default (flavor in the region's park); `disk`, `bandwidth` or
    `no_card` for resource prices, which have no flavor."""

    class Meta:
        model = Price

    region = factory.SubFactory(RegionFactory)
    kind = PriceKind.FLAVOR_HOUR
    flavor = factory.SubFactory(FlavorFactory, family__park=factory.SelfAttribute("...region.park"))
    amount_minor = 2500
    currency = factory.LazyAttribute(lambda o: o.region.park.currency)
    effective_from = factory.Sequence(lambda n: EPOCH + timedelta(minutes=n))

    class Params:
        disk = factory.Trait(kind=PriceKind.DISK_GB_MONTH, flavor=None, amount_minor=30)
        bandwidth = factory.Trait(
            kind=PriceKind.BANDWIDTH_MBPS_MONTH, flavor=None, amount_minor=2000
        )
        no_card = factory.Trait(kind=PriceKind.NO_CARD_HOUR, flavor=None, amount_minor=80)


# --- orchestration ---------------------------------------------------------------------------


class BackendFactory(Factory):
    class Meta:
        model = Backend

    park = factory.SubFactory(ParkFactory)
    name = factory.Sequence(lambda n: f"backend-{n}")
    driver = "simulator"
    config = factory.LazyFunction(dict)
    is_enabled = True


class PoolFactory(Factory):
    class Meta:
        model = Pool

    backend = factory.SubFactory(BackendFactory)
    region = factory.SubFactory(RegionFactory, park=factory.SelfAttribute("..backend.park"))
    name = factory.Sequence(lambda n: f"pool-{n}")
    accelerator_model = factory.SubFactory(AcceleratorModelFactory)
    pue = Decimal("1.30")
    power_price_minor_per_kwh = 60
    carbon_g_per_kwh = 550
    is_schedulable = True


class NodeFactory(Factory):
    class Meta:
        model = Node

    pool = factory.SubFactory(PoolFactory)
    hostname = factory.Sequence(lambda n: f"gpu-node-{n:03d}")
    vcpu_total = 128
    ram_gb_total = 1024
    health = NodeHealth.HEALTHY
    is_drained = False
    telemetry = factory.LazyFunction(dict)
    # Kept with the telemetry, as probing a backend keeps them.
    loaded_watts = factory.LazyAttribute(lambda node: measured_power(node.telemetry)[0])
    loaded_watts_at = factory.LazyAttribute(lambda node: measured_power(node.telemetry)[1])


class RoomTallyFactory(Factory):
    """A row of the tally of kinds of room as written by hand (on PostgreSQL a trigger keeps
    it from the nodes, and `rooms.correct_tallies` takes back what a hand added): one node of
    a new pool with its 8 cards idle, as the beat folds it (backend 0)."""

    class Meta:
        model = RoomTally

    pool = factory.SubFactory(PoolFactory)
    room_cards = 8
    room_idle = 8
    vcpu_total = 128
    room_vcpu_held = 0
    ram_gb_total = 1024
    room_ram_gb_held = 0
    backend = 0
    nodes = 1


class AcceleratorFactory(Factory):
    class Meta:
        model = Accelerator

    node = factory.SubFactory(NodeFactory)
    index = factory.Sequence(lambda n: n % 32767)
    serial = factory.Sequence(lambda n: f"GPU-{n:08d}")
    allocation = None

    @factory.post_generation
    def counted(card, create, extracted, **kwargs):
        """The node's kept room counts its new card (as registering the node does)."""
        if create:
            recount([card.node_id])


# --- orders ----------------------------------------------------------------------------------


class WorkloadFactory(Factory):
    class Meta:
        model = Workload

    organization = factory.SubFactory(OrganizationFactory)
    kind = WorkloadKind.HOST


class VolumeFactory(Factory):
    class Meta:
        model = Volume

    organization = factory.SubFactory(OrganizationFactory)
    node = factory.SubFactory(NodeFactory)
    region = factory.LazyAttribute(lambda volume: volume.node.pool.region)
    name = factory.Sequence(lambda n: f"volume-{n}")
    size_gb = 20


def workload_of(subject_names=("instance", "task")):
    """A factory's `workload`: the one of the host or task given as one of its (excluded)
    `subject_names`, or None when none is."""

    def workload(o):
        subject = next((getattr(o, name) for name in subject_names if getattr(o, name)), None)
        return subject.workload if subject is not None else None

    return factory.LazyAttribute(workload)


class InstanceFactory(Factory):
    """A pending instance whose flavor family, image and region are in its organization's park.

    The image is made compatible with the flavor's accelerator model."""

    class Meta:
        model = Instance

    organization = factory.SubFactory(OrganizationFactory)
    workload = factory.SubFactory(
        WorkloadFactory, organization=factory.SelfAttribute("..organization")
    )
    name = factory.Sequence(lambda n: f"instance-{n}")
    flavor = factory.SubFactory(
        FlavorFactory, family__park=factory.SelfAttribute("...organization.park")
    )
    image = factory.SubFactory(ImageFactory, park=factory.SelfAttribute("..organization.park"))
    region = factory.SubFactory(RegionFactory, park=factory.SelfAttribute("..organization.park"))
    pool = None
    node = None
    state = InstanceState.PENDING
    system_disk_gb = factory.LazyAttribute(lambda o: o.flavor.system_disk_gb)
    data_disk_gb = 0
    bandwidth_mbps = 0
    created_by = factory.SubFactory(UserFactory)
    released_at = None

    class Params:
        running = factory.Trait(state=InstanceState.RUNNING)
        released = factory.Trait(
            state=InstanceState.RELEASED, released_at=factory.LazyFunction(timezone.now)
        )

    @factory.post_generation
    def image_fits_flavor(self, create, extracted, **kwargs):
        if create:
            self.image.compatible_accelerators.add(self.flavor.family.accelerator_model)


class HostSampleFactory(Factory):
    """A running host's monitoring sample of this minute: two cards half busy."""

    class Meta:
        model = HostSample

    instance = factory.SubFactory(InstanceFactory, running=True)
    at = factory.LazyFunction(lambda: timezone.now().replace(second=0, microsecond=0))
    gpu_count = 2
    gpu_utilization_pct = 50.0
    gpu_memory_used_mib = 40_960
    gpu_memory_total_mib = 163_840
    power_w = 800.0
    cpu_pct = 25.0
    memory_used_mib = 65_536
    memory_limit_mib = 262_144
    disk_used_mib = 102_400
    disk_size_mib = 512_000
    net_rx_bytes_per_s = 1_250_000.0
    net_tx_bytes_per_s = 250_000.0


class OrderFactory(Factory):
    """A create order (no instance yet); `for_instance=True` makes a resize of a new instance
    of the same organization."""

    class Meta:
        model = Order

    organization = factory.SubFactory(OrganizationFactory)
    kind = OrderKind.CREATE
    state = OrderState.SUBMITTED
    instance = None
    parameters = factory.LazyFunction(dict)
    quote = factory.LazyFunction(dict)
    hourly_minor = 2500
    currency = factory.LazyAttribute(lambda o: o.organization.park.currency)
    idempotency_key = ""
    created_by = factory.SubFactory(UserFactory)

    class Params:
        for_instance = factory.Trait(
            kind=OrderKind.RESIZE,
            instance=factory.SubFactory(
                InstanceFactory,
                organization=factory.SelfAttribute("..organization"),
                running=True,
            ),
        )


class SecurityGroupFactory(Factory):
    """A (non-default) security group with no rules; add them with SecurityGroupRuleFactory."""

    class Meta:
        model = SecurityGroup

    organization = factory.SubFactory(OrganizationFactory)
    name = factory.Sequence(lambda n: f"group-{n}")
    description = ""
    is_default = False


class SecurityGroupRuleFactory(Factory):
    class Meta:
        model = SecurityGroupRule

    group = factory.SubFactory(SecurityGroupFactory)
    protocol = "tcp"
    from_port = 22
    to_port = 22
    source = "0.0.0.0/0"


class PortMappingFactory(Factory):
    """A mapping of a running instance's port, forwarded from a documentation address."""

    class Meta:
        model = PortMapping

    instance = factory.SubFactory(InstanceFactory, running=True)
    protocol = "tcp"
    host_port = factory.Sequence(lambda n: 8000 + n % 1000)
    address = "198.51.100.2"
    server_port = factory.Sequence(lambda n: 20001 + n % 9000)


class TaskFactory(Factory):
    class Meta:
        model = Task

    organization = factory.SubFactory(OrganizationFactory)
    workload = factory.SubFactory(
        WorkloadFactory,
        organization=factory.SelfAttribute("..organization"),
        kind=WorkloadKind.TASK,
    )
    name = factory.Sequence(lambda n: f"task-{n}")
    image = factory.SubFactory(ImageFactory, park=factory.SelfAttribute("..organization.park"))
    command = "python train.py --epochs 1"
    accelerator_model = None
    accelerator_milli = 1000
    vcpu = 8
    ram_gb = 32
    preference = TaskPreference.BALANCED
    priority = 0
    state = TaskState.QUEUED
    created_by = factory.SubFactory(UserFactory)


class AllocationFactory(Factory):
    """A live allocation of a running instance placed on the allocation's node: same park,
    region, pool and accelerator model. `for_task=True` holds a task instead."""

    class Meta:
        model = Allocation
        exclude = ("instance", "task")

    node = factory.SubFactory(NodeFactory)
    instance = factory.SubFactory(
        InstanceFactory,
        organization__park=factory.SelfAttribute("...node.pool.backend.park"),
        flavor__family__accelerator_model=factory.SelfAttribute("....node.pool.accelerator_model"),
        region=factory.SelfAttribute("..node.pool.region"),
        pool=factory.SelfAttribute("..node.pool"),
        node=factory.SelfAttribute("..node"),
        running=True,
    )
    task = None
    workload = workload_of()
    vcpu = 16
    ram_gb = 128
    released_at = None

    @factory.post_generation
    def counted(allocation, create, extracted, **kwargs):
        """The node's kept room counts what the allocation holds (as placing it does)."""
        if create:
            recount([allocation.node_id])

    class Params:
        for_task = factory.Trait(
            instance=None,
            task=factory.SubFactory(
                TaskFactory,
                organization__park=factory.SelfAttribute("...node.pool.backend.park"),
                pool=factory.SelfAttribute("..node.pool"),
                node=factory.SelfAttribute("..node"),
                state=TaskState.PLACED,
            ),
        )


def allocate_task(task, *, node) -> Allocation | None:
    """Give `task` its room on `node` (its allocation, written), counted under the node's lock
    by the node's room as a queue pass counts it, without a pass: a test's task that holds
    cards. None when the node cannot take it now."""
    room = NodeRoom.lock([node.pk])[node.pk]
    allocation = Allocation(
        node=room.node, workload_id=task.workload_id, vcpu=task.vcpu, ram_gb=task.ram_gb
    )
    return allocation if room.allocate(allocation, task.accelerator_milli) else None


class PlacementFactory(Factory):
    """The placement of a new host (or of `task`)."""

    class Meta:
        model = Placement
        exclude = ("instance", "task")

    instance = factory.SubFactory(InstanceFactory)
    task = None
    workload = workload_of(("task", "instance"))
    chosen_pool = None
    chosen_node = None
    weights = factory.LazyFunction(lambda: {"price": 1.0})
    candidates = factory.LazyFunction(list)


class ApprovalPolicyFactory(Factory):
    class Meta:
        model = ApprovalPolicy
        django_get_or_create = ("park",)

    park = factory.SubFactory(ParkFactory)
    unverified_needs_approval = True
    max_accelerators = None
    max_hourly_minor = None


# --- quotas ----------------------------------------------------------------------------------


class QuotaLimitFactory(Factory):
    """An organization's accelerator limit; `organization=None` for a park-wide limit and
    `per_model=True` for a limit on one accelerator model."""

    class Meta:
        model = QuotaLimit

    park = factory.SubFactory(ParkFactory)
    organization = factory.SubFactory(OrganizationFactory, park=factory.SelfAttribute("..park"))
    resource = QuotaResource.ACCELERATORS
    accelerator_model = None
    limit = 8

    class Params:
        per_model = factory.Trait(
            resource=QuotaResource.MODEL_ACCELERATORS,
            accelerator_model=factory.SubFactory(AcceleratorModelFactory),
        )


# --- billing ---------------------------------------------------------------------------------


FUNDED_BALANCE_MINOR = 10_000_000


class WalletFactory(Factory):
    """Sets the organization's wallet: every organization gets one, so this updates it."""

    class Meta:
        model = Wallet

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        organization = kwargs.pop("organization")
        wallet, _ = model_class.objects.update_or_create(organization=organization, defaults=kwargs)
        return wallet

    organization = factory.SubFactory(OrganizationFactory)
    currency = factory.LazyAttribute(lambda o: o.organization.park.currency)
    mode = BillingMode.PREPAID
    balance_minor = 100_000
    held_minor = 0
    credit_limit_minor = 0


class LedgerEntryFactory(Factory):
    """A top-up; `balance_after_minor` follows the wallet's balance."""

    class Meta:
        model = LedgerEntry

    wallet = factory.SubFactory(WalletFactory)
    kind = EntryKind.TOP_UP
    amount_minor = 10_000
    balance_after_minor = factory.LazyAttribute(lambda o: o.wallet.balance_minor + o.amount_minor)
    description = "Top-up"

    class Params:
        charge = factory.Trait(kind=EntryKind.CHARGE, amount_minor=-2500, description="Usage")


class PaymentFactory(Factory):
    class Meta:
        model = Payment

    wallet = factory.SubFactory(WalletFactory)
    amount_minor = 10_000
    currency = factory.LazyAttribute(lambda o: o.wallet.currency)
    state = PaymentState.PENDING
    stripe_checkout_session_id = factory.Sequence(lambda n: f"cs_test_{n:06d}")


class BankTransferFactory(Factory):
    """A transfer the organization announced, awaiting the money."""

    class Meta:
        model = BankTransfer

    organization = factory.SubFactory(OrganizationFactory)
    amount_minor = 500_000
    currency = factory.LazyAttribute(lambda o: o.organization.park.currency)
    reference = factory.Sequence(lambda n: f"LM{n:08d}")
    state = BankTransferState.AWAITING
    requested_by = factory.SubFactory(UserFactory)


class VatInvoiceRequestFactory(Factory):
    """A general VAT invoice requested by the organization."""

    class Meta:
        model = VatInvoiceRequest

    organization = factory.SubFactory(OrganizationFactory)
    kind = VatInvoiceKind.GENERAL
    amount_minor = 100_000
    currency = factory.LazyAttribute(lambda o: o.organization.park.currency)
    title = factory.LazyAttribute(lambda o: o.organization.name)
    taxpayer_id = "91310000MA1FL3X63G"
    email = factory.Sequence(lambda n: f"finance{n}@example.com")
    state = VatInvoiceState.REQUESTED
    requested_by = factory.SubFactory(UserFactory)


class InvoiceFactory(Factory):
    class Meta:
        model = Invoice

    organization = factory.SubFactory(OrganizationFactory)
    number = factory.Sequence(lambda n: f"INV-2026-{n:06d}")
    period_start = factory.Sequence(lambda n: EPOCH + timedelta(days=30 * n))
    period_end = factory.LazyAttribute(lambda o: o.period_start + timedelta(days=30))
    currency = factory.LazyAttribute(lambda o: o.organization.park.currency)
    subtotal_minor = 10_000
    tax_minor = 600
    total_minor = factory.LazyAttribute(lambda o: o.subtotal_minor + o.tax_minor)
    state = InvoiceState.DRAFT


class InvoiceLineFactory(Factory):
    class Meta:
        model = InvoiceLine
        exclude = ("instance", "task")

    invoice = factory.SubFactory(InvoiceFactory)
    instance = None
    task = None
    workload = workload_of()
    description = "gpu-1"
    kind = MeterKind.COMPUTE
    seconds = 3600
    quantity = 1
    compute_unit_milliseconds = 3600 * 9895
    amount_minor = 2500


class HoldFactory(Factory):
    """A first hour held for a pending host of the wallet's organization."""

    class Meta:
        model = Hold
        exclude = ("instance",)

    wallet = factory.SubFactory(WalletFactory)
    instance = factory.SubFactory(
        InstanceFactory, organization=factory.SelfAttribute("..wallet.organization")
    )
    workload = factory.SelfAttribute("instance.workload")
    amount_minor = 2500


class FundsSuspensionFactory(Factory):
    class Meta:
        model = FundsSuspension
        exclude = ("instance",)

    instance = factory.SubFactory(InstanceFactory, state=InstanceState.STOPPED)
    workload = factory.SelfAttribute("instance.workload")


class StripeEventFactory(Factory):
    class Meta:
        model = StripeEvent

    event_id = factory.Sequence(lambda n: f"evt_test_{n:06d}")
    type = "checkout.session.completed"


class MeterFactory(Factory):
    """An open meter of a running host: ¥25.00 an hour."""

    class Meta:
        model = Meter
        exclude = ("instance", "task")

    organization = factory.SubFactory(OrganizationFactory)
    instance = factory.SubFactory(
        InstanceFactory, organization=factory.SelfAttribute("..organization"), running=True
    )
    task = None
    workload = workload_of(("task", "instance"))
    kind = MeterKind.COMPUTE
    quantity = 1
    hourly_minor = Decimal(2500)
    compute_units = Decimal("9.895")
    currency = factory.LazyAttribute(lambda o: o.organization.park.currency)
    started_at = EPOCH
    metered_until = factory.SelfAttribute("started_at")


class UsageRecordFactory(Factory):
    """One hour of an instance of the record's organization; `for_task=True` meters a task."""

    class Meta:
        model = UsageRecord
        exclude = ("instance", "task")

    organization = factory.SubFactory(OrganizationFactory)
    instance = factory.SubFactory(
        InstanceFactory, organization=factory.SelfAttribute("..organization"), running=True
    )
    task = None
    workload = workload_of(("task", "instance"))
    meter = factory.SubFactory(
        MeterFactory,
        organization=factory.SelfAttribute("..organization"),
        instance=factory.SelfAttribute("..instance"),
        task=factory.SelfAttribute("..task"),
        kind=factory.SelfAttribute("..kind"),
    )
    kind = MeterKind.COMPUTE
    invoice = None
    started_at = factory.Sequence(lambda n: EPOCH + timedelta(hours=n))
    ended_at = factory.LazyAttribute(lambda o: o.started_at + timedelta(seconds=o.seconds))
    seconds = 3600
    compute_unit_milliseconds = factory.LazyAttribute(lambda o: o.seconds * 9895)
    hourly_minor = 2500
    amount_minor = factory.LazyAttribute(lambda o: o.hourly_minor * o.seconds // 3600)
    currency = factory.LazyAttribute(lambda o: o.organization.park.currency)

    class Params:
        for_task = factory.Trait(
            instance=None,
            task=factory.SubFactory(
                TaskFactory,
                organization=factory.SelfAttribute("..organization"),
                state=TaskState.RUNNING,
                started_at=factory.LazyFunction(timezone.now),
            ),
        )

    @factory.post_generation
    def monthly_spend(record, create, extracted, **kwargs):
        """Added to its organization's month as metering adds what it records."""
        if create:
            month = timezone.localtime(record.started_at).date().replace(day=1)
            add_monthly_spend({(record.organization_id, month): record.amount_minor})


# --- operations ------------------------------------------------------------------------------


class SchedulingPolicyFactory(Factory):
    """A park that weighs price twice as much as the other parts."""

    class Meta:
        model = SchedulingPolicy
        django_get_or_create = ("park",)

    park = factory.SubFactory(ParkFactory)
    price_weight = Decimal("2.00")


class CapacitySampleFactory(Factory):
    class Meta:
        model = CapacitySample

    pool = factory.SubFactory(PoolFactory)
    park = factory.SelfAttribute("pool.backend.park")
    taken_at = factory.Sequence(lambda n: EPOCH + timedelta(minutes=5 * n))
    accelerators_total = 16
    accelerators_allocated = 4
    accelerators_idle = 1
    utilization_pct = None
    watts = 3640


class IdlePolicyFactory(Factory):
    class Meta:
        model = IdlePolicy
        django_get_or_create = ("park",)

    park = factory.SubFactory(ParkFactory)
    threshold_minutes = 120
    auto_stop = False


class AuditEventFactory(Factory):
    class Meta:
        model = AuditEvent

    class Params:
        organization = factory.SubFactory(OrganizationFactory)

    park_id = factory.SelfAttribute("organization.park_id")
    organization_id = factory.SelfAttribute("organization.pk")
    actor = factory.SubFactory(UserFactory)
    actor_label = factory.LazyAttribute(lambda o: str(o.actor) if o.actor else "system")
    action = "instance.provisioning"
    object_type = "orders.instance"
    object_id = factory.Sequence(str)
    object_repr = factory.LazyAttribute(lambda o: f"instance-{o.object_id}")
    data = factory.LazyFunction(lambda: {"from": "pending", "to": "provisioning"})


# --- webhooks --------------------------------------------------------------------------------


class IdempotencyRecordFactory(Factory):
    class Meta:
        model = IdempotencyRecord

    caller = factory.Sequence(lambda n: f"user:{n}")
    key = factory.Sequence(lambda n: f"key-{n}")
    method = "POST"
    path = "/api/v1/orders/"
    body_hash = factory.LazyFunction(lambda: sha256(b"{}").hexdigest())
    status_code = 201
    response_body = factory.LazyFunction(dict)


class WebhookEndpointFactory(Factory):
    class Meta:
        model = WebhookEndpoint

    organization = factory.SubFactory(OrganizationFactory)
    # Loopback, port 9 (closed): a delivery a test forgets to stub never leaves the machine.
    url = factory.Sequence(lambda n: f"http://127.0.0.1:9/loam/{n}")
    secret = factory.Sequence(lambda n: f"whsec_{sha256(f'webhook-{n}'.encode()).hexdigest()}")
    event_types = factory.LazyFunction(lambda: ["order.done", "instance.running"])


class WebhookDeliveryFactory(Factory):
    class Meta:
        model = WebhookDelivery

    endpoint = factory.SubFactory(WebhookEndpointFactory)
    event_id = factory.Faker("uuid4", cast_to=None)
    event_type = "order.done"
    payload = factory.LazyAttribute(
        lambda o: {
            "id": str(o.event_id),
            "type": o.event_type,
            "created_at": "2026-01-01T00:00:00.000Z",
            "data": {"order": 1},
        }
    )
    state = DeliveryState.PENDING


# --- host agents -------------------------------------------------------------------------------


class AgentPoolFactory(PoolFactory):
    """A pool of a backend whose driver is the host agent's."""

    backend = factory.SubFactory(BackendFactory, driver="agent", config={"pools": []})


class JoinTokenFactory(Factory):
    """An unused token valid for a day; pass `secret=` to know it (only its hash is kept).
    Traits: used, expired, revoked."""

    class Meta:
        model = JoinToken

    pool = factory.SubFactory(AgentPoolFactory)
    token_hash = factory.LazyAttribute(lambda o: secret_hash(o.secret))
    prefix = factory.LazyAttribute(lambda o: o.secret[:13])
    created_by = factory.SubFactory(UserFactory)
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(days=1))

    class Params:
        secret = factory.Sequence(lambda n: f"loamjt_test-{n}")
        used = factory.Trait(used_at=factory.LazyFunction(timezone.now))
        expired = factory.Trait(expires_at=factory.LazyFunction(lambda: timezone.now()))
        revoked = factory.Trait(revoked_at=factory.LazyFunction(timezone.now))


class AgentServerFactory(Factory):
    """An enrolled server; pass `credential=` to know it (only its hash is kept)."""

    class Meta:
        model = AgentServer

    class Params:
        credential = factory.Sequence(lambda n: f"loamsc_test-{n}")

    node = factory.SubFactory(NodeFactory, pool=factory.SubFactory(AgentPoolFactory))
    public_id = factory.Sequence(lambda n: f"srv-test{n:04d}")
    credential_hash = factory.LazyAttribute(lambda o: secret_hash(o.credential))
    hostname = factory.SelfAttribute("node.hostname")
    agent_version = "0.1.0"
    readers = factory.LazyFunction(
        lambda: [{"vendor": "nvidia", "state": "ok", "message": "driver 550.54.15"}]
    )
    last_heartbeat_at = factory.LazyFunction(timezone.now)


class AgentCardFactory(Factory):
    class Meta:
        model = AgentCard

    server = factory.SubFactory(AgentServerFactory)
    accelerator = factory.SubFactory(
        AcceleratorFactory,
        node=factory.SelfAttribute("..server.node"),
        serial=factory.SelfAttribute("..uuid"),
    )
    uuid = factory.Sequence(lambda n: f"GPU-{n:08d}-0000-0000-0000-000000000000")
    vendor = "nvidia"
    model = "NVIDIA H200"
    vendor_index = factory.SelfAttribute("accelerator.index")
    memory_total_mib = 143771
    device_path = factory.LazyAttribute(lambda o: f"/dev/nvidia{o.vendor_index}")


class CardSampleFactory(Factory):
    class Meta:
        model = CardSample

    card = factory.SubFactory(AgentCardFactory)
    at = factory.LazyFunction(timezone.now)
    utilization_pct = 37
    memory_used_mib = 20480
    power_w = 312.5


class AgentHostFactory(Factory):
    class Meta:
        model = AgentHost

    handle = factory.Sequence(lambda n: f"h-test{n:08d}")
    server = factory.SubFactory(AgentServerFactory)
    name = factory.Sequence(lambda n: f"host-{n}")
    state = WantedState.RUNNING
    vcpu = 16
    memory_mib = 131072
    system_disk_gb = 100
    image = "ubuntu-cuda"


class SavedImageFactory(Factory):
    """A stopped host's root saved as a private image of its organization, on its server."""

    class Meta:
        model = SavedImage

    server = factory.SubFactory(AgentServerFactory)
    organization = factory.SubFactory(
        OrganizationFactory, park=factory.SelfAttribute("..server.node.pool.backend.park")
    )
    image = factory.SubFactory(
        ImageFactory,
        park=factory.SelfAttribute("..organization.park"),
        organization=factory.SelfAttribute("..organization"),
    )
    workload = factory.SubFactory(
        WorkloadFactory,
        organization=factory.SelfAttribute("..organization"),
        kind=WorkloadKind.IMAGE,
    )
    generation = 1


class AgentHostPortFactory(Factory):
    """A server port forwarded to a host's port (a mapping; the host's SSH port is "ssh")."""

    class Meta:
        model = AgentHostPort

    host = factory.SubFactory(AgentHostFactory)
    server = factory.SelfAttribute("host.server")
    protocol = "tcp"
    server_port = factory.Sequence(lambda n: 20000 + n % 10000)
    host_port = factory.Sequence(lambda n: 8000 + n % 1000)
    purpose = "mapping"


from tests.partners.factories import (  # noqa: E402, F401
    PartnerFactory,
    PartnerPoolFactory,
    PoolTermsFactory,
    SettlementFactory,
)
from tests.sharedfs.factories import SharedFileSystemFactory  # noqa: E402, F401


class SavedImageCopyFactory(Factory):
    """A saved image on its way to another server of its region, sent by its holder."""

    class Meta:
        model = SavedImageCopy

    saved_image = factory.SubFactory(SavedImageFactory)
    server = factory.SubFactory(AgentServerFactory)


class MonthlySpendFactory(Factory):
    """What an organization was charged in a month, as metering adds its records up."""

    class Meta:
        model = MonthlySpend

    organization = factory.SubFactory(OrganizationFactory)
    month = date(2026, 1, 1)
    amount_minor = 2500


class PreemptionFactory(Factory):
    """A preemptible task requeued after ten minutes' run, for another of its organization."""

    class Meta:
        model = Preemption

    task = factory.SubFactory(TaskFactory, state=TaskState.QUEUED, preemptible=True)
    preempted_by = factory.SubFactory(
        TaskFactory, organization=factory.SelfAttribute("..task.organization")
    )
    at = factory.LazyFunction(timezone.now)
    ran_from = factory.LazyAttribute(lambda o: o.at - timedelta(minutes=10))
    billed_seconds = 600
    hourly_minor = 1750


class FairShareFactory(Factory):
    """An organization given twice the park's default share."""

    class Meta:
        model = FairShare

    organization = factory.SubFactory(OrganizationFactory)
    shares = 2
