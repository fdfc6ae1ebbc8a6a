from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from apps.core.errors import DomainError, InvalidTransition, PermissionDenied
from apps.core.models import AuditEvent
from apps.partners import services
from apps.partners.models import PartnerPool, PoolTerms, Settlement, SettlementState
from tests.factories import (
    FlavorFactory,
    OrganizationFactory,
    ParkFactory,
    ParkOperatorFactory,
    PoolFactory,
    RegionFactory,
    UserFactory,
)
from tests.partners.conftest import last_month, local
from tests.partners.factories import PartnerFactory, PartnerPoolFactory, PoolTermsFactory

pytestmark = pytest.mark.django_db


# --- settlement ----------------------------------------------------------------------------


def test_settlement_sums_exactly_the_partners_pools_usage_of_the_month(world, operator):
    month = last_month()
    following = (month + timedelta(days=32)).replace(day=1)
    counted = [
        world.usage(pool=world.pool, at=local(month, 0, 0), amount_minor=1_000),  # first moment
        world.usage(pool=world.pool, at=local(month, 12), amount_minor=2_345),
        world.usage(pool=world.pool, at=local(month, 13), amount_minor=655, task=True),
    ]
    # Not counted: the month before (its last minute in the park's zone), the next month, the
    # other partner's pool, the park's own pool.
    before = local(month) - timedelta(minutes=1)
    world.usage(pool=world.pool, at=before, amount_minor=50_000)
    world.usage(pool=world.pool, at=local(following), amount_minor=60_000)
    world.usage(pool=world.other_pool, at=local(month, 12), amount_minor=70_000)
    world.usage(pool=world.other_pool, at=local(month, 14), amount_minor=70_000, task=True)
    world.usage(pool=world.own_pool, at=local(month, 12), amount_minor=80_000)

    settlement = services.settle_month(operator=operator, partner=world.partner, month=month)

    assert settlement.month == month
    assert settlement.revenue_minor == sum(r.amount_minor for r in counted) == 4_000
    assert settlement.records == 3
    assert settlement.share_pct == Decimal("70.00")
    assert settlement.payout_minor == 2_800
    assert settlement.currency == world.park.currency
    assert settlement.state == SettlementState.DRAFT
    assert AuditEvent.objects.filter(
        action="partner.settlement_computed", object_id=str(settlement.pk)
    ).exists()


def test_settling_again_recomputes_a_draft_and_keeps_one_row(world, operator):
    month = last_month()
    world.usage(pool=world.pool, at=local(month, 1), amount_minor=1_000)
    first = services.settle_month(operator=operator, partner=world.partner, month=month)
    world.usage(pool=world.pool, at=local(month, 2), amount_minor=1_001)  # metered late

    again = services.settle_month(
        operator=operator, partner=world.partner, month=month.replace(day=15)
    )

    assert again.pk == first.pk
    assert Settlement.objects.filter(partner=world.partner).count() == 1
    assert again.revenue_minor == 2_001
    assert again.payout_minor == 1_401  # 1400.7 rounded half up


def test_a_confirmed_statement_is_never_recomputed_and_confirmed_once(world, operator):
    month = last_month()
    world.usage(pool=world.pool, at=local(month, 1), amount_minor=1_000)
    settlement = services.settle_month(operator=operator, partner=world.partner, month=month)

    confirmed = services.confirm_settlement(operator=operator, settlement=settlement)
    assert confirmed.state == SettlementState.CONFIRMED
    assert confirmed.confirmed_by == operator and confirmed.confirmed_at is not None

    with pytest.raises(InvalidTransition):
        services.confirm_settlement(operator=operator, settlement=confirmed)
    world.usage(pool=world.pool, at=local(month, 2), amount_minor=9_999)
    with pytest.raises(DomainError):
        services.settle_month(operator=operator, partner=world.partner, month=month)
    confirmed.refresh_from_db()
    assert confirmed.revenue_minor == 1_000
    assert (
        AuditEvent.objects.filter(
            action="partner.settlement_confirmed", object_id=str(settlement.pk)
        ).count()
        == 1
    )

    paid = services.mark_settlement_paid(operator=operator, settlement=confirmed)
    assert paid.state == SettlementState.PAID and paid.paid_at is not None
    with pytest.raises(InvalidTransition):
        services.mark_settlement_paid(operator=operator, settlement=paid)


def test_this_months_statement_is_a_draft_until_the_month_is_over(world, operator):
    from django.utils import timezone

    settlement = services.settle_month(
        operator=operator, partner=world.partner, month=timezone.localdate()
    )
    with pytest.raises(DomainError):
        services.confirm_settlement(operator=operator, settlement=settlement)
    settlement.refresh_from_db()
    assert settlement.state == SettlementState.DRAFT


def test_a_month_not_begun_is_not_settled(world, operator):
    from django.utils import timezone

    with pytest.raises(ValidationError):
        services.settle_month(
            operator=operator,
            partner=world.partner,
            month=timezone.localdate().replace(day=1).replace(year=timezone.localdate().year + 1),
        )


def test_only_the_parks_operators_settle_and_confirm(world, operator):
    month = last_month()
    stranger = UserFactory()
    ParkOperatorFactory(park=ParkFactory(), user=stranger)
    with pytest.raises(PermissionDenied):
        services.settle_month(operator=stranger, partner=world.partner, month=month)
    settlement = services.settle_month(operator=operator, partner=world.partner, month=month)
    with pytest.raises(PermissionDenied):
        services.confirm_settlement(operator=stranger, settlement=settlement)


# --- partners and pools --------------------------------------------------------------------


def test_make_partner_then_change_its_share(park, operator):
    organization = OrganizationFactory(park=park)
    partner = services.make_partner(
        operator=operator, organization=organization, revenue_share_pct=Decimal("60")
    )
    again = services.make_partner(
        operator=operator, organization=organization, revenue_share_pct=Decimal("65.5")
    )
    assert again.pk == partner.pk and again.revenue_share_pct == Decimal("65.5")
    assert AuditEvent.objects.filter(
        action="partner.created", organization_id=organization.pk
    ).exists()
    assert AuditEvent.objects.filter(action="partner.share_changed").exists()
    with pytest.raises(ValidationError):
        services.make_partner(
            operator=operator, organization=organization, revenue_share_pct=Decimal("100.01")
        )


def test_assign_a_pool_and_give_it_back_to_the_park(world, operator):
    pool = services.assign_pool(operator=operator, pool=world.own_pool, partner=world.partner)
    assert PartnerPool.objects.get(pool=pool).partner == world.partner
    pool = services.assign_pool(operator=operator, pool=world.own_pool, partner=None)
    assert not PartnerPool.objects.filter(pool=pool).exists()
    assert AuditEvent.objects.filter(action="partner.pool_assigned").exists()
    assert AuditEvent.objects.filter(action="partner.pool_unassigned").exists()


def test_a_pool_goes_only_to_a_partner_of_its_park(world, operator):
    elsewhere = PartnerFactory()
    with pytest.raises(ValidationError):
        services.assign_pool(operator=operator, pool=world.own_pool, partner=elsewhere)


# --- floor prices --------------------------------------------------------------------------


def test_partner_sets_a_floor_on_its_own_pool_only(world, member_of):
    owner = member_of(world.partner.organization, "owner")
    terms = services.set_floor_price(
        actor=owner, partner=world.partner, pool=world.pool, floor_price_minor_per_card_hour=900
    )
    assert terms.floor_price_minor_per_card_hour == 900
    services.set_floor_price(
        actor=owner, partner=world.partner, pool=world.pool, floor_price_minor_per_card_hour=1200
    )
    assert PoolTerms.objects.get(pool=world.pool).floor_price_minor_per_card_hour == 1200
    with pytest.raises(ValidationError):
        services.set_floor_price(
            actor=owner,
            partner=world.partner,
            pool=world.other_pool,
            floor_price_minor_per_card_hour=1,
        )
    with pytest.raises(PermissionDenied):
        services.set_floor_price(
            actor=member_of(world.partner.organization, "viewer"),
            partner=world.partner,
            pool=world.pool,
            floor_price_minor_per_card_hour=1,
        )
    assert AuditEvent.objects.filter(action="partner.floor_price_set").count() == 2


def test_a_price_below_the_floor_times_cards_is_refused():
    terms = PoolTermsFactory(floor_price_minor_per_card_hour=1000)
    pool = terms.pool
    flavor = FlavorFactory(
        family__park=pool.backend.park,
        family__accelerator_model=pool.accelerator_model,
        accelerator_count=4,
    )
    with pytest.raises(ValidationError) as refused:
        services.check_floor(flavor=flavor, region=pool.region, amount_minor=3_999)
    assert "amount_minor" in refused.value.error_dict
    assert "at least ¥40.00." in " ".join(refused.value.messages)
    services.check_floor(flavor=flavor, region=pool.region, amount_minor=4_000)


def test_the_floor_holds_only_where_the_partners_pool_runs_the_flavor():
    terms = PoolTermsFactory(floor_price_minor_per_card_hour=1000)
    pool = terms.pool
    park = pool.backend.park
    flavor = FlavorFactory(family__park=park, family__accelerator_model=pool.accelerator_model)
    other_model = FlavorFactory(family__park=park)
    other_region = RegionFactory(park=park)
    services.check_floor(flavor=other_model, region=pool.region, amount_minor=1)
    services.check_floor(flavor=flavor, region=other_region, amount_minor=1)
    # A pool given back to the park keeps its terms, but the park's own pool has no floor.
    PartnerPool.objects.filter(pool=pool).delete()
    services.check_floor(flavor=flavor, region=pool.region, amount_minor=1)


def test_of_several_partners_pools_the_highest_floor_holds():
    terms = PoolTermsFactory(floor_price_minor_per_card_hour=1000)
    pool = terms.pool
    second = PoolFactory(
        backend__park=pool.backend.park,
        region=pool.region,
        accelerator_model=pool.accelerator_model,
    )
    PartnerPoolFactory(pool=second, partner=PartnerFactory(organization__park=pool.backend.park))
    PoolTermsFactory(pool=second, floor_price_minor_per_card_hour=1500)
    flavor = FlavorFactory(
        family__park=pool.backend.park,
        family__accelerator_model=pool.accelerator_model,
        accelerator_count=1,
    )
    with pytest.raises(ValidationError):
        services.check_floor(flavor=flavor, region=pool.region, amount_minor=1_499)
    services.check_floor(flavor=flavor, region=pool.region, amount_minor=1_500)
