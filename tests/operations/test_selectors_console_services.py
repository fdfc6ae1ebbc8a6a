"""The console's use cases on tenants' instances (force-release, idle notices, the idle
policy), the catalog editor and quota limits: outcomes in rows, the audit log and the mail."""

from datetime import timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.utils import timezone, translation

from apps.catalog import services as catalog
from apps.catalog.models import Flavor, Price, PriceKind
from apps.catalog.selectors import price_in_force
from apps.core.errors import DomainError, InvalidTransition, PermissionDenied
from apps.core.models import AuditEvent
from apps.operations.selectors import lists
from apps.operations.selectors.dashboard import queues
from apps.orders.idle import (
    enforce_idle_policies,
    force_release,
    idle_instances,
    send_idle_notice,
)
from apps.orders.models import IdlePolicy, Instance, Order, OrderKind, OrderState
from apps.orders.operations import request_operation
from apps.quotas.models import QuotaLimit
from apps.quotas.services import add_quota_limit, organization_usage, set_limit
from tests.factories import (
    AcceleratorModelFactory,
    FlavorFactory,
    OrderFactory,
    ParkFactory,
    ParkOperatorFactory,
    TaskFactory,
    UserFactory,
)
from tests.operations.conftest import devices_of

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english():
    """Refusals are matched in English (the portal's default language is zh-hans)."""
    with translation.override("en"):
        yield


@pytest.fixture
def stranger():
    user = UserFactory()
    ParkOperatorFactory(park=ParkFactory(), user=user)
    return user


def idle(instance, *, minutes):
    """Its devices read idle for `minutes` (the others on its node read busy)."""
    return {instance.node.hostname: {str(i): 0.5 for i in devices_of(instance)}}, minutes


# --- Force-release ---------------------------------------------------------------------------


def test_force_release_releases_through_the_backend_and_tells_the_owners(
    console, operator, owner, running, commit
):
    host = running(2)
    with commit():
        order = force_release(instance=host, operator=operator, reason="Abuse report #42")

    host.refresh_from_db()
    assert host.state == "released" and host.released_at is not None
    assert not devices_of_live(host)
    assert organization_usage(console.organization).accelerators == 0
    order.refresh_from_db()
    assert (order.kind, order.state) == ("release", OrderState.DONE)
    event = AuditEvent.objects.get(action="instance.force_released")
    assert event.actor == operator and event.data == {
        "reason": "Abuse report #42",
        "order": order.pk,
    }
    # The order's own events name the park's operator (the orders app's release path).
    releasing = AuditEvent.objects.get(action="instance.releasing")
    assert releasing.actor_label == f"system:park-operator:{operator.username}"
    (message,) = mail.outbox
    assert message.to == [owner.email]
    assert "Abuse report #42" in message.body and host.name in message.subject


def devices_of_live(instance):
    return instance.workload.allocations.filter(released_at__isnull=True).exists()


def test_force_release_of_a_host_in_error(console, operator, running, commit):
    from apps.orders.services import fail_instance

    host = running()
    fail_instance(instance_id=host.pk, message="disk died")
    with commit():
        force_release(instance=host, operator=operator, reason="Cleaning up")
    assert Instance.objects.get(pk=host.pk).state == "released"


@pytest.mark.parametrize("reason", ["", "   ", "x" * 1001])
def test_force_release_needs_a_reason(console, operator, running, reason):
    host = running()
    with pytest.raises(DomainError):
        force_release(instance=host, operator=operator, reason=reason)
    assert Instance.objects.get(pk=host.pk).state == "running"
    assert not Order.objects.filter(kind=OrderKind.RELEASE).exists()


def test_force_release_is_for_this_parks_operators_only(console, stranger, owner, running):
    host = running()
    for user in (stranger, owner):
        with pytest.raises(PermissionDenied):
            force_release(instance=host, operator=user, reason="no")
    assert Instance.objects.get(pk=host.pk).state == "running"


def test_force_release_waits_for_an_operation_in_progress(console, operator, owner, running):
    host = running()
    request_operation(instance=host, actor=owner, kind=OrderKind.STOP)  # not run: in progress
    with translation.override("en"), pytest.raises(InvalidTransition, match="in progress"):
        force_release(instance=host, operator=operator, reason="now")


def test_force_release_of_a_released_host_is_refused(console, operator, running, commit):
    host = running()
    with commit():
        force_release(instance=host, operator=operator, reason="first")
    with pytest.raises(InvalidTransition):
        force_release(instance=host, operator=operator, reason="again")


# --- Idle capacity ---------------------------------------------------------------------------


def test_an_instance_is_idle_once_all_its_devices_stayed_idle_past_the_threshold(
    console, running, telemetry
):
    quiet, busy = running(2, name="quiet"), running(2, name="busy")
    readings = {quiet.node.hostname: {str(i): 1 for i in devices_of(quiet)}}
    busy_devices = devices_of(busy)
    readings.setdefault(busy.node.hostname, {}).update({str(busy_devices[0]): 1})
    telemetry(readings, idle_for=150)

    (row,) = idle_instances([console.park])
    assert row.instance == quiet  # `busy` has one device in use
    assert row.utilization_pct == 1.0 and row.threshold_minutes == 120
    assert 149 <= row.idle_minutes <= 151
    # Past a stricter threshold it is not (yet) idle; an explicit minimum overrides.
    IdlePolicy.objects.create(park=console.park, threshold_minutes=180)
    assert idle_instances([console.park]) == []
    assert [r.instance for r in idle_instances([console.park], min_minutes=0)] == [quiet]


def test_a_host_idles_only_from_when_it_got_its_accelerators(console, running, telemetry):
    early = running(name="early")
    telemetry({early.node.hostname: {str(i): 0 for i in range(8)}}, idle_for=300)
    late = running(name="late")  # gets a device that has read idle for five hours
    assert late.node_id == early.node_id
    telemetry({early.node.hostname: {str(i): 0 for i in range(8)}})
    assert [r.instance for r in idle_instances([console.park])] == [early]
    (row,) = idle_instances([console.park], min_minutes=0)[1:]
    assert row.instance == late and row.idle_minutes == 0


def test_stale_telemetry_proves_nothing(console, running, telemetry):
    host = running()
    utilization, _ = idle(host, minutes=0)
    telemetry(utilization, idle_for=300)
    assert idle_instances([console.park])
    from apps.orchestration.models import Node
    from apps.orchestration.services import keep_card_readings

    node = Node.objects.get(pk=host.node_id)
    node.telemetry["updated_at"] = (timezone.now() - timedelta(hours=2)).isoformat()
    node.save(update_fields=["telemetry"])
    keep_card_readings([node])  # as probing keeps them with the telemetry
    assert idle_instances([console.park]) == []


def test_idle_notice_mails_the_owners_and_is_audited(
    console, operator, owner, running, telemetry, commit
):
    host = running()
    telemetry(*idle(host, minutes=200)[:1], idle_for=200)
    with commit():
        send_idle_notice(instance=host, operator=operator)

    (message,) = mail.outbox
    assert message.to == [owner.email] and host.name in message.subject
    event = AuditEvent.objects.get(action="instance.idle_notice")
    assert event.actor == operator and event.organization_id == console.organization.pk
    (row,) = idle_instances([console.park])
    assert row.last_notice_at == event.created_at


def test_idle_notice_for_a_busy_instance_is_refused(console, operator, running, telemetry):
    host = running()
    telemetry({host.node.hostname: {"0": 90}})
    with pytest.raises(DomainError, match="not idle"):
        send_idle_notice(instance=host, operator=operator)
    assert not mail.outbox


def test_the_idle_policy_stops_idle_hosts_where_the_park_says_so(
    console, operator, owner, running, telemetry, commit
):
    host, other = running(name="idle-one"), running(name="working")
    readings = {host.node.hostname: {str(i): 0 for i in devices_of(host)}}
    telemetry(readings, idle_for=130)

    assert enforce_idle_policies() == []  # no policy: nobody is stopped
    IdlePolicy.objects.create(park=console.park, threshold_minutes=120, auto_stop=False)
    assert enforce_idle_policies() == []
    IdlePolicy.objects.filter(park=console.park).update(auto_stop=True)
    with commit():
        (order,) = enforce_idle_policies()

    assert (order.kind, order.instance_id) == (OrderKind.STOP, host.pk)
    assert Instance.objects.get(pk=host.pk).state == "stopped"
    assert Instance.objects.get(pk=other.pk).state == "running"
    event = AuditEvent.objects.get(action="instance.idle_stopped")
    assert event.actor is None and event.actor_label == "system:idle-policy"
    assert AuditEvent.objects.get(action="instance.stopping").actor_label == "system:idle-policy"
    assert event.data["threshold_minutes"] == 120
    (message,) = mail.outbox
    assert message.to == [owner.email] and "120" in message.body  # the threshold
    # Stopped, it is no longer idle capacity, and the next run leaves it alone.
    assert enforce_idle_policies() == []


# --- The queues on the overview --------------------------------------------------------------


def test_queues_count_what_waits_and_for_how_long(console):
    now = timezone.now()
    TaskFactory(organization=console.organization)
    started = TaskFactory(organization=console.organization, state="running")
    type(started).objects.filter(pk=started.pk).update(
        submitted_at=now - timedelta(minutes=30), started_at=now - timedelta(minutes=20)
    )
    OrderFactory(organization=console.organization, state=OrderState.AWAITING_APPROVAL)
    OrderFactory(organization=ParkOrg(), state=OrderState.AWAITING_APPROVAL)

    found = queues([console.park], now=now)
    assert found["tasks"].length == 1 and found["tasks"].longest_wait is not None
    assert found["tasks"].average_wait == timedelta(minutes=10)
    assert found["approvals"].length == 1


def ParkOrg():  # noqa: N802 - an organization of another park
    from tests.factories import OrganizationFactory

    return OrganizationFactory()


# --- The catalog editor ----------------------------------------------------------------------


def test_catalog_families_flavors_and_withdrawal(console, operator):
    family = catalog.create_family(
        park=console.park,
        operator=operator,
        code="h1x",
        name="H1 extra",
        resource_type="cloud_host",
        accelerator_model=console.model,
    )
    flavor = catalog.create_flavor(
        family=family,
        operator=operator,
        code="h1x.8x",
        accelerator_count=8,
        vcpu=64,
        ram_gb=512,
        system_disk_gb=100,
    )
    assert flavor.is_active
    catalog.set_flavor_on_sale(flavor=flavor, operator=operator, on_sale=False)
    assert not Flavor.objects.get(pk=flavor.pk).is_active
    actions = list(
        AuditEvent.objects.filter(park_id=console.park.pk, action__startswith="catalog.")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == [
        "catalog.family_created",
        "catalog.flavor_created",
        "catalog.flavor_withdrawn",
    ]


def test_catalog_refusals_are_validation_errors(console, operator):
    with pytest.raises(ValidationError):  # the code is taken in this park
        catalog.create_family(
            park=console.park,
            operator=operator,
            code="h1",
            name="again",
            resource_type="cloud_host",
            accelerator_model=console.model,
        )
    with pytest.raises(ValidationError):  # a size the family has
        catalog.create_flavor(
            family=console.family,
            operator=operator,
            code="h1.1y",
            accelerator_count=1,
            vcpu=8,
            ram_gb=64,
            system_disk_gb=100,
        )
    with pytest.raises(ValidationError) as excinfo:
        catalog.create_flavor(
            family=console.family,
            operator=operator,
            code="Bad Code",
            accelerator_count=3,
            vcpu=8,
            ram_gb=64,
            system_disk_gb=10,
        )
    assert {"code", "__all__"} <= set(excinfo.value.message_dict)  # the disk: a constraint


def test_an_image_runs_only_on_its_own_stack(console, operator):
    ascend = AcceleratorModelFactory(ascend=True)
    with pytest.raises(ValidationError) as excinfo:
        catalog.create_image(
            park=console.park,
            operator=operator,
            code="cann8",
            name="CANN 8",
            os="openEuler",
            software_stack="cuda",
            stack_version="12",
            compatible_accelerators=[ascend],
        )
    assert "compatible_accelerators" in excinfo.value.message_dict
    image = catalog.create_image(
        park=console.park,
        operator=operator,
        code="cann8",
        name="CANN 8",
        os="openEuler",
        software_stack="cann",
        stack_version="8.0",
        compatible_accelerators=[ascend],
    )
    assert list(image.compatible_accelerators.all()) == [ascend]
    catalog.set_image_available(image=image, operator=operator, available=False)
    image.refresh_from_db()
    assert not image.is_active


def test_a_scheduled_price_takes_effect_on_its_date_and_can_be_withdrawn_until_then(
    console, operator
):
    flavor = console.flavors[1]
    later = timezone.now() + timedelta(days=3)
    price = catalog.schedule_price(
        region=console.region,
        operator=operator,
        kind=PriceKind.FLAVOR_HOUR,
        flavor=flavor,
        amount_minor=1500,
        effective_from=later,
    )
    assert price.currency == console.park.currency
    in_force = price_in_force(region=console.region, kind=PriceKind.FLAVOR_HOUR, flavor=flavor)
    assert in_force.amount_minor == 1000
    at = later + timedelta(minutes=1)
    assert (
        price_in_force(
            region=console.region, kind=PriceKind.FLAVOR_HOUR, flavor=flavor, at=at
        ).amount_minor
        == 1500
    )
    assert [p.pk for p in lists.prices(console.park, when="scheduled")] == [price.pk]
    current = lists.prices(console.park, when="current")
    assert price.pk not in {p.pk for p in current}
    assert {p.amount_minor for p in current if p.flavor_id == flavor.pk} == {1000}

    catalog.withdraw_price(price=price, operator=operator)
    assert not Price.objects.filter(pk=price.pk).exists()
    assert AuditEvent.objects.filter(action="catalog.price_withdrawn").count() == 1
    with pytest.raises(DomainError, match="already in force"):
        catalog.withdraw_price(price=in_force, operator=operator)


def test_price_refusals(console, operator):
    region, flavor = console.region, console.flavors[1]
    cases = [
        ({"kind": PriceKind.FLAVOR_HOUR, "flavor": None}, "flavor"),
        ({"kind": PriceKind.DISK_GB_MONTH, "flavor": flavor}, "flavor"),
        ({"kind": PriceKind.FLAVOR_HOUR, "flavor": FlavorFactory()}, "flavor"),
        (
            {
                "kind": PriceKind.FLAVOR_HOUR,
                "flavor": flavor,
                "effective_from": timezone.now() - timedelta(days=1),
            },
            "effective_from",
        ),
    ]
    for fields, field in cases:
        with pytest.raises(ValidationError) as excinfo:
            catalog.schedule_price(region=region, operator=operator, amount_minor=1, **fields)
        assert field in excinfo.value.message_dict, fields


def test_catalog_is_for_this_parks_operators(console, stranger):
    with pytest.raises(PermissionDenied):
        catalog.set_flavor_on_sale(flavor=console.flavors[1], operator=stranger, on_sale=False)
    with pytest.raises(PermissionDenied):
        catalog.schedule_price(
            region=console.region, operator=stranger, kind=PriceKind.DISK_GB_MONTH, amount_minor=1
        )


# --- Quotas ----------------------------------------------------------------------------------


def test_quota_history_reads_changes_and_additions(console, operator):
    limit = QuotaLimit.objects.get(organization=console.organization, resource="accelerators")
    set_limit(limit=limit, operator=operator, value=32)
    add_quota_limit(
        organization=console.organization,
        operator=operator,
        resource="model_accelerators",
        accelerator_model=console.model,
        value=4,
    )
    history = list(lists.quota_history(console.organization))
    assert [(e.data["resource"], e.data["from"], e.data["to"]) for e in history] == [
        ("model_accelerators", None, 4),
        ("accelerators", 64, 32),
    ]
    assert history[0].data["accelerator_model"] == "test-h1"


def test_adding_a_limit_twice_or_without_its_model_is_refused(console, operator, stranger):
    with pytest.raises(ValidationError):
        add_quota_limit(
            organization=console.organization, operator=operator, resource="accelerators", value=1
        )
    with pytest.raises(ValidationError) as excinfo:
        add_quota_limit(
            organization=console.organization,
            operator=operator,
            resource="model_accelerators",
            value=1,
        )
    assert "accelerator_model" in excinfo.value.message_dict
    with pytest.raises(PermissionDenied):
        add_quota_limit(
            organization=console.organization, operator=stranger, resource="vcpu", value=1
        )
