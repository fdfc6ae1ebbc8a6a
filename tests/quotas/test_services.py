"""apps.quotas.services: Usage arithmetic, what instances and open orders hold, reserve() and
the tier defaults."""

from decimal import Decimal

import pytest
from django.conf import settings
from django.utils import timezone, translation

from apps.orchestration.models import TaskState
from apps.orders.models import INSTANCE_HOLDING_STATES, Instance, InstanceState, OrderState
from apps.orders.selectors import held_by_instances, pending_growth
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.quotas.services import (
    QuotaExceeded,
    Usage,
    apply_default_limits,
    demand_for,
    organization_usage,
    park_usage,
    reserve,
)
from apps.tenants.models import Organization
from tests.factories import (
    AcceleratorModelFactory,
    FlavorFactory,
    FlavorFamilyFactory,
    InstanceFactory,
    OrderFactory,
    OrganizationFactory,
    PoolFactory,
    TaskFactory,
)


@pytest.fixture(autouse=True)
def _english():
    with translation.override("en"):
        yield


# --- Usage arithmetic ------------------------------------------------------------------------


def test_usage_adds_every_field_and_merges_models():
    a = Usage(
        accelerators=2,
        compute_units=Decimal("6.24"),
        vcpu=32,
        ram_gb=256,
        disk_gb=100,
        instances=1,
        by_model={1: 2},
    )
    b = Usage(
        accelerators=3,
        compute_units=Decimal("1.5"),
        vcpu=8,
        ram_gb=64,
        disk_gb=50,
        instances=2,
        by_model={1: 1, 2: 2},
    )

    assert a + b == Usage(
        accelerators=5,
        compute_units=Decimal("7.74"),
        vcpu=40,
        ram_gb=320,
        disk_gb=150,
        instances=3,
        by_model={1: 3, 2: 2},
    )
    assert a.by_model == {1: 2}  # the operands are unchanged
    assert a + Usage() == a
    assert Usage() + a == a


def test_usage_subtracts_and_positive_keeps_only_the_growth():
    big = Usage(accelerators=4, compute_units=Decimal(12), vcpu=64, ram_gb=512, by_model={1: 4})
    small = Usage(accelerators=1, compute_units=Decimal(3), vcpu=16, ram_gb=128, disk_gb=10)

    shrink = small - big
    assert shrink == Usage(
        accelerators=-3,
        compute_units=Decimal(-9),
        vcpu=-48,
        ram_gb=-384,
        disk_gb=10,
        by_model={1: -4},
    )
    assert shrink.positive() == Usage(disk_gb=10)
    assert (big - small).positive() == Usage(
        accelerators=3, compute_units=Decimal(9), vcpu=48, ram_gb=384, by_model={1: 4}
    )
    assert (big - big).positive() == Usage(by_model={})


def test_amount_reads_the_limits_resource():
    usage = Usage(
        accelerators=3,
        compute_units=Decimal("9.36"),
        vcpu=48,
        ram_gb=384,
        disk_gb=300,
        instances=2,
        by_model={7: 2, 8: 1},
    )
    amounts = {
        QuotaResource.ACCELERATORS: 3,
        QuotaResource.COMPUTE_UNITS: Decimal("9.36"),
        QuotaResource.VCPU: 48,
        QuotaResource.RAM_GB: 384,
        QuotaResource.DISK_GB: 300,
        QuotaResource.INSTANCES: 2,
        QuotaResource.MONTHLY_SPEND: None,  # not counted from usage
    }
    for resource, amount in amounts.items():
        assert usage.amount(QuotaLimit(resource=resource, limit=1)) == amount, resource

    model_limit = QuotaLimit(resource=QuotaResource.MODEL_ACCELERATORS, limit=1)
    model_limit.accelerator_model_id = 8
    assert usage.amount(model_limit) == 1
    model_limit.accelerator_model_id = 9
    assert usage.amount(model_limit) == 0


@pytest.mark.django_db
def test_demand_for_counts_hosts():
    flavor = FlavorFactory(
        accelerator_count=2,
        vcpu=32,
        ram_gb=256,
        family__accelerator_model__fp16_tflops=Decimal("312.0"),
    )
    model = flavor.family.accelerator_model

    assert demand_for(flavor=flavor, system_disk_gb=100, data_disk_gb=50, count=3) == Usage(
        accelerators=6,
        compute_units=Decimal("18.72"),
        vcpu=96,
        ram_gb=768,
        disk_gb=450,
        instances=3,
        by_model={model.pk: 6},
    )


# --- held_by_instances and pending_growth ----------------------------------------------------


def host(organization, flavor, state=InstanceState.RUNNING, **fields):
    released = timezone.now() if state == InstanceState.RELEASED else None
    return InstanceFactory(
        organization=organization, flavor=flavor, state=state, released_at=released, **fields
    )


@pytest.fixture
def family(park):
    return FlavorFamilyFactory(park=park, accelerator_model__fp16_tflops=Decimal("312.0"))


@pytest.fixture
def sizes(family):
    return {
        n: FlavorFactory(
            family=family, code=f"f{n}", accelerator_count=n, vcpu=16 * n, ram_gb=128 * n
        )
        for n in (1, 2, 4, 8)
    }


@pytest.mark.django_db
@pytest.mark.parametrize("state", InstanceState.values)
def test_held_by_instances_counts_only_holding_states(organization, sizes, state):
    instance = host(organization, sizes[2], state, system_disk_gb=100, data_disk_gb=20)

    usage = held_by_instances([organization])

    if state in INSTANCE_HOLDING_STATES:
        assert usage == demand_for(flavor=sizes[2], system_disk_gb=100, data_disk_gb=20)
    else:
        assert usage == Usage()
        assert state in (InstanceState.RELEASED, InstanceState.ERROR)
    assert Instance.objects.get(pk=instance.pk).state == state


@pytest.mark.django_db
def test_held_by_instances_sums_per_model(organization, park, sizes):
    other = FlavorFactory(
        family=FlavorFamilyFactory(
            park=park, accelerator_model=AcceleratorModelFactory(ascend=True)
        ),
        accelerator_count=4,
        vcpu=48,
        ram_gb=384,
    )
    host(organization, sizes[1], system_disk_gb=100)
    host(organization, sizes[4], InstanceState.STOPPED, system_disk_gb=200, data_disk_gb=300)
    host(organization, other, InstanceState.PROVISIONING, system_disk_gb=100)
    host(organization, sizes[8], InstanceState.ERROR)
    host(organization, other, InstanceState.RELEASED)

    usage = held_by_instances([organization])

    cuda, ascend = sizes[1].family.accelerator_model, other.family.accelerator_model
    assert usage == Usage(
        accelerators=9,
        compute_units=Decimal("3.12") * 5 + Decimal("3.2") * 4,
        vcpu=16 + 64 + 48,
        ram_gb=128 + 512 + 384,
        disk_gb=100 + 500 + 100,
        instances=3,
        by_model={cuda.pk: 5, ascend.pk: 4},
    )


@pytest.mark.django_db
def test_held_by_instances_counts_only_the_organizations_given(organization, sizes):
    other = OrganizationFactory(park=organization.park)
    host(organization, sizes[1])
    host(other, sizes[4])
    host(other, sizes[2], InstanceState.STOPPED)

    assert held_by_instances([organization]).accelerators == 1
    assert held_by_instances([other.pk]).accelerators == 6
    # A queryset of organizations is counted as a subquery, the same way.
    assert held_by_instances(Organization.objects.filter(pk=other.pk)).instances == 2
    assert held_by_instances(Organization.objects.filter(park=organization.park)).instances == 3
    assert held_by_instances([]) == Usage()


def resize_order(instance, to, state=OrderState.FULFILLING):
    return OrderFactory(
        organization=instance.organization,
        kind="resize",
        instance=instance,
        state=state,
        parameters={"from": instance.flavor.code, "to": to.code, "resume": "running"},
    )


def expand_order(instance, to, state=OrderState.FULFILLING):
    return OrderFactory(
        organization=instance.organization,
        kind="expand_disk",
        instance=instance,
        state=state,
        parameters={"from": instance.data_disk_gb, "to": to},
    )


@pytest.mark.django_db
@pytest.mark.parametrize("state", OrderState.values)
def test_an_open_resize_holds_its_growth(organization, sizes, state):
    instance = host(organization, sizes[1], InstanceState.RESIZING)
    resize_order(instance, sizes[4], state)

    growth = pending_growth([organization.pk])

    if state in (OrderState.APPROVED, OrderState.FULFILLING):
        model = sizes[1].family.accelerator_model
        assert growth == Usage(
            accelerators=3,
            compute_units=Decimal("9.36"),
            vcpu=48,
            ram_gb=384,
            by_model={model.pk: 3},
        )
    else:
        assert growth == Usage()


@pytest.mark.django_db
def test_growth_counts_only_the_organizations_given(organization, sizes):
    other = OrganizationFactory(park=organization.park)
    resize_order(host(other, sizes[1], InstanceState.RESIZING), sizes[4])

    assert pending_growth([organization.pk]) == Usage()
    assert pending_growth([other.pk]).accelerators == 3
    assert pending_growth(Organization.objects.filter(park=other.park)).accelerators == 3


@pytest.mark.django_db
def test_a_shrink_holds_no_growth(organization, sizes):
    instance = host(organization, sizes[4], InstanceState.RESIZING)
    resize_order(instance, sizes[1])

    assert pending_growth([organization.pk]) == Usage()


@pytest.mark.django_db
def test_an_open_disk_expansion_holds_its_growth(organization, sizes):
    instance = host(organization, sizes[1], data_disk_gb=100)
    expand_order(instance, 350)
    expand_order(host(organization, sizes[1]), 50, OrderState.DONE)

    assert pending_growth([organization.pk]) == Usage(disk_gb=250)


@pytest.mark.django_db
@pytest.mark.parametrize("state", [InstanceState.ERROR, InstanceState.RELEASED])
def test_growth_of_a_host_that_holds_nothing_is_not_counted(organization, sizes, state):
    instance = host(organization, sizes[1], state)
    resize_order(instance, sizes[8])
    expand_order(instance, 500)

    assert pending_growth([organization.pk]) == Usage()


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["stop", "start", "set_bandwidth", "release"])
def test_other_operations_hold_no_growth(organization, sizes, kind):
    instance = host(organization, sizes[1])
    OrderFactory(
        organization=organization,
        kind=kind,
        instance=instance,
        state=OrderState.FULFILLING,
        parameters={"from": 0, "to": 100},
    )

    assert pending_growth([organization.pk]) == Usage()


@pytest.mark.django_db
def test_organization_and_park_usage(park, organization, other_organization, sizes):
    mine = host(organization, sizes[1], system_disk_gb=100)
    resize_order(mine, sizes[2])
    host(other_organization, sizes[4], system_disk_gb=100)
    stranger = OrganizationFactory()  # another park
    host(stranger, FlavorFactory(family__park=stranger.park, accelerator_count=8))

    mine_usage = organization_usage(organization)
    assert (mine_usage.accelerators, mine_usage.instances, mine_usage.disk_gb) == (2, 1, 100)
    theirs = organization_usage(other_organization)
    assert (theirs.accelerators, theirs.instances) == (4, 1)
    assert park_usage(park) == mine_usage + theirs


# --- reserve ---------------------------------------------------------------------------------


def limit(organization, resource, value, *, park_wide=False, model=None):
    return QuotaLimit.objects.create(
        park=organization.park,
        organization=None if park_wide else organization,
        resource=resource,
        accelerator_model=model,
        limit=value,
    )


def test_reserve_must_run_inside_a_transaction():
    # No database access is needed to refuse: outside any transaction it raises at once.
    with pytest.raises(RuntimeError, match="inside the transaction"):
        reserve(organization=Organization(), demand=Usage(accelerators=1))


@pytest.mark.django_db
def test_reserve_without_limits_accepts_anything(organization):
    reserve(organization=organization, demand=Usage(accelerators=10**6, instances=10**6))


@pytest.mark.django_db
def test_reserve_refuses_what_passes_a_limit(organization, sizes):
    host(organization, sizes[2])
    limit(organization, QuotaResource.ACCELERATORS, 4)

    reserve(organization=organization, demand=Usage(accelerators=2))  # 2 + 2 = 4: allowed
    with pytest.raises(QuotaExceeded) as excinfo:
        reserve(organization=organization, demand=Usage(accelerators=3))

    assert excinfo.value.code == "quota_exceeded"
    assert excinfo.value.status == 409
    assert excinfo.value.message == (
        "Over your organization's quota for Accelerators (all models): 2 in use + 3 asked "
        "exceeds the limit of 4. Release something or ask the park for more."
    )


@pytest.mark.django_db
def test_reserve_counts_open_growth(organization, sizes):
    instance = host(organization, sizes[1], InstanceState.RESIZING)
    resize_order(instance, sizes[4])  # 1 held + 3 growing
    limit(organization, QuotaResource.ACCELERATORS, 4)

    with pytest.raises(QuotaExceeded) as excinfo:
        reserve(organization=organization, demand=Usage(accelerators=1))

    assert "4 in use + 1 asked" in excinfo.value.message


@pytest.mark.django_db
def test_reserve_ignores_limits_the_demand_does_not_touch(organization, sizes):
    host(organization, sizes[4])
    limit(organization, QuotaResource.ACCELERATORS, 1)  # already over, e.g. lowered later

    reserve(organization=organization, demand=Usage(disk_gb=10))


@pytest.mark.django_db
def test_reserve_checks_the_parks_limits_against_the_whole_park(
    organization, other_organization, sizes
):
    host(other_organization, sizes[4])
    limit(organization, QuotaResource.INSTANCES, 2, park_wide=True)
    limit(organization, QuotaResource.ACCELERATORS, 6, park_wide=True)

    reserve(organization=organization, demand=Usage(accelerators=2, instances=1))
    with pytest.raises(QuotaExceeded) as excinfo:
        reserve(organization=organization, demand=Usage(accelerators=3, instances=1))

    assert excinfo.value.message == (
        "The park's capacity limit for Accelerators (all models) is reached (4 in use + 3 "
        "asked, limit 6). Try again later or choose another resource."
    )


@pytest.mark.django_db
def test_reserve_checks_a_models_limit(organization, sizes):
    model = sizes[1].family.accelerator_model
    limit(organization, QuotaResource.MODEL_ACCELERATORS, 2, model=model)

    reserve(organization=organization, demand=Usage(accelerators=5, by_model={model.pk + 1: 5}))
    with pytest.raises(QuotaExceeded) as excinfo:
        reserve(organization=organization, demand=Usage(accelerators=3, by_model={model.pk: 3}))

    assert f"quota for {model}: 0 in use + 3 asked exceeds the limit of 2" in (
        excinfo.value.message
    )


@pytest.mark.django_db
def test_reserve_does_not_count_another_parks_hosts(organization, sizes):
    stranger = OrganizationFactory()
    host(stranger, FlavorFactory(family__park=stranger.park, accelerator_count=8))
    limit(organization, QuotaResource.ACCELERATORS, 1, park_wide=True)

    reserve(organization=organization, demand=Usage(accelerators=1))


# --- training tasks hold quota too ----------------------------------------------------------


def held_task(organization, family, milli, state=TaskState.RUNNING):
    """A task holding `milli` thousandths of cards of `family`'s model on one of its pools."""
    pool = PoolFactory(backend__park=organization.park, accelerator_model=family.accelerator_model)
    return TaskFactory(
        organization=organization,
        accelerator_milli=milli,
        vcpu=4,
        ram_gb=16,
        state=state,
        pool=pool,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "state,held", [(TaskState.QUEUED, 0), (TaskState.PLACED, 2), (TaskState.RUNNING, 2)]
)
def test_placed_and_running_tasks_hold_quota(organization, family, state, held):
    held_task(organization, family, 2000, state)

    usage = organization_usage(organization)

    assert usage.accelerators == held
    assert usage.by_model.get(family.accelerator_model_id, 0) == held


@pytest.mark.django_db
def test_shares_of_cards_add_up_before_they_count(organization, family):
    for _ in range(3):
        held_task(organization, family, 500)  # three half cards: two cards held

    assert organization_usage(organization).accelerators == 2


@pytest.mark.django_db
def test_a_host_order_counts_what_the_organizations_tasks_hold(organization, family):
    held_task(organization, family, 3000)
    limit(organization, QuotaResource.ACCELERATORS, 4)

    reserve(organization=organization, demand=Usage(accelerators=1))  # 3 + 1 = 4
    with pytest.raises(QuotaExceeded) as excinfo:
        reserve(organization=organization, demand=Usage(accelerators=2))

    assert "3 in use + 2 asked" in excinfo.value.message


@pytest.mark.django_db
def test_park_wide_limits_count_other_organizations_tasks(organization, other_organization, family):
    held_task(other_organization, family, 4000)
    limit(organization, QuotaResource.ACCELERATORS, 5, park_wide=True)

    reserve(organization=organization, demand=Usage(accelerators=1))
    with pytest.raises(QuotaExceeded) as excinfo:
        reserve(organization=organization, demand=Usage(accelerators=2))

    assert "(4 in use + 2 asked, limit 5)" in excinfo.value.message


# --- apply_default_limits --------------------------------------------------------------------


def limits_of(organization):
    return dict(
        QuotaLimit.objects.filter(organization=organization).values_list("resource", "limit")
    )


@pytest.mark.django_db
def test_default_limits_are_created_for_the_tier(organization):
    apply_default_limits(organization=organization, tier="unverified")

    assert limits_of(organization) == settings.LOAM_DEFAULT_QUOTAS["unverified"]
    assert not QuotaLimit.objects.filter(organization__isnull=True).exists()


@pytest.mark.django_db
def test_default_limits_only_raise(organization):
    apply_default_limits(organization=organization, tier="unverified")
    QuotaLimit.objects.filter(organization=organization, resource="accelerators").update(
        limit=100
    )  # an operator's higher limit

    apply_default_limits(organization=organization, tier="verified")

    expected = {**settings.LOAM_DEFAULT_QUOTAS["verified"], "accelerators": 100}
    assert limits_of(organization) == expected

    apply_default_limits(organization=organization, tier="unverified")  # never lowers

    assert limits_of(organization) == expected


@pytest.mark.django_db
def test_default_limits_leave_other_limits_alone(organization, other_organization):
    model = AcceleratorModelFactory()
    QuotaLimit.objects.create(
        park=organization.park,
        organization=organization,
        resource=QuotaResource.MODEL_ACCELERATORS,
        accelerator_model=model,
        limit=1,
    )
    QuotaLimit.objects.create(
        park=organization.park, organization=None, resource=QuotaResource.ACCELERATORS, limit=3
    )

    apply_default_limits(organization=organization, tier="verified")

    assert QuotaLimit.objects.get(accelerator_model=model).limit == 1
    assert QuotaLimit.objects.get(organization__isnull=True).limit == 3
    assert limits_of(other_organization) == {}
