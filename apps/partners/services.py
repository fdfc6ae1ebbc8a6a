"""Partner use cases: the park's operators make an organization a partner with a revenue share
and give it pools; the partner sets a floor price per card-hour on each of its pools; each month
is settled from the usage of its pools, and the park's finance confirms the statement (then
marks it paid). Every action is recorded in the audit log.

`check_floor` is the rule a price of the park must keep: a flavor that runs on a partner's pool
is never priced below the partner's floor × its cards."""

from datetime import date
from decimal import ROUND_HALF_UP, Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.money import format_money
from apps.core.transactions import locked, locked_update_or_create
from apps.core.transitions import transition
from apps.orchestration.models import Pool
from apps.partners import selectors
from apps.partners.models import (
    SETTLEMENT_TRANSITIONS,
    Partner,
    PartnerPool,
    PoolTerms,
    Settlement,
    SettlementState,
)
from apps.tenants.access import authorize, require_operator
from apps.tenants.models import Organization
from apps.tenants.roles import Action


def _require(operator, park):
    require_operator(operator, park, _("Only this park's operators may manage its partners."))


# --- the park's operators ------------------------------------------------------------------


@transaction.atomic(durable=True)
def make_partner(*, operator, organization: Organization, revenue_share_pct: Decimal) -> Partner:
    """Make `organization` a partner with this share, or change an existing partner's share."""
    _require(operator, organization.park)
    partner = Partner.objects.filter(organization=organization).first()
    if partner is None:
        partner = Partner(organization=organization, revenue_share_pct=revenue_share_pct)
        partner.full_clean()
        partner.save()
        record_event(
            action="partner.created",
            actor=operator,
            target=partner,
            data={"share_pct": str(partner.revenue_share_pct)},
        )
        return partner
    partner = locked(Partner, partner.pk, related=("organization__park",))
    before = partner.revenue_share_pct
    partner.revenue_share_pct = revenue_share_pct
    partner.full_clean()
    if before != partner.revenue_share_pct:
        partner.save(update_fields=["revenue_share_pct"])
        record_event(
            action="partner.share_changed",
            actor=operator,
            target=partner,
            data={"from": str(before), "to": str(partner.revenue_share_pct)},
        )
    return partner


@transaction.atomic(durable=True)
def assign_pool(*, operator, pool: Pool, partner: Partner | None) -> Pool:
    """Give `pool` to `partner` (None: back to the park's own)."""
    park = pool.backend.park
    _require(operator, park)
    if partner is not None and partner.organization.park_id != park.pk:
        raise ValidationError({"partner": _("This partner is not in the pool's park.")})
    pool = locked(Pool, pool.pk, related=("backend__park",))
    # The pool's lock keeps two operators' assignments of it from crossing.
    ownership = PartnerPool.objects.filter(pool=pool)
    before = ownership.values_list("partner_id", flat=True).first()
    if before != (partner.pk if partner else None):
        if partner is None:
            ownership.delete()
        elif before is None:
            PartnerPool.objects.create(pool=pool, partner=partner)
        else:
            ownership.update(partner=partner)
        record_event(
            action="partner.pool_assigned" if partner else "partner.pool_unassigned",
            actor=operator,
            target=pool,
            organization=partner.organization if partner else None,
            park=park,
            data={"pool": pool.name, "from_partner": before, "to_partner": partner and partner.pk},
        )
    return pool


# --- the partner ---------------------------------------------------------------------------


@transaction.atomic(durable=True)
def set_floor_price(
    *, actor, partner: Partner, pool: Pool, floor_price_minor_per_card_hour: int
) -> PoolTerms:
    """The partner's floor price per card-hour on one of its own pools (its owner or admin)."""
    authorize(actor, partner.organization, Action.MANAGE_ORGANIZATION)
    if not PartnerPool.objects.filter(pool=pool, partner=partner).exists():
        raise ValidationError({"pool": _("This pool is not one of yours.")})
    if floor_price_minor_per_card_hour < 0:
        raise ValidationError({"floor_price": _("A floor price cannot be negative.")})
    terms, _created = locked_update_or_create(
        PoolTerms,
        pool=pool,
        defaults={
            "floor_price_minor_per_card_hour": floor_price_minor_per_card_hour,
            "updated_by": actor,
        },
    )
    record_event(
        action="partner.floor_price_set",
        actor=actor,
        target=partner,
        data={
            "pool": pool.name,
            "pool_id": pool.pk,
            "floor_minor": floor_price_minor_per_card_hour,
        },
    )
    return terms


def floor_for(*, flavor, region) -> tuple[int, Pool] | None:
    """(the least an hour of `flavor` may sell for in `region`, the pool that asks it), or None
    when no partner's pool with a floor runs it there. A flavor runs on the pools of its
    accelerator model in the region; of several partners' pools the highest floor holds."""
    terms = (
        PoolTerms.objects.filter(
            pool__partner_pool__isnull=False,
            pool__region=region,
            pool__accelerator_model_id=flavor.family.accelerator_model_id,
        )
        .select_related("pool")
        .order_by("-floor_price_minor_per_card_hour", "pk")
        .first()
    )
    if terms is None:
        return None
    return terms.floor_price_minor_per_card_hour * flavor.accelerator_count, terms.pool


def check_floor(*, flavor, region, amount_minor: int) -> None:
    """Refuse an hourly price of `flavor` in `region` below the floor of a partner's pool it
    runs on (ValidationError on `amount_minor`, which forms show above or on the amount)."""
    floor = floor_for(flavor=flavor, region=region)
    if floor is None or amount_minor >= floor[0]:
        return
    minimum, pool = floor
    raise ValidationError(
        {
            "amount_minor": _(
                "%(flavor)s runs on the partner's pool %(pool)s, whose floor price is %(floor)s "
                "per card-hour: an hour of it (%(cards)d × the floor) sells for at least "
                "%(minimum)s."
            )
            % {
                "flavor": flavor.code,
                "pool": pool.name,
                "floor": format_money(
                    pool.partner_terms.floor_price_minor_per_card_hour, region.park.currency
                ),
                "cards": flavor.accelerator_count,
                "minimum": format_money(minimum, region.park.currency),
            }
        }
    )


# --- monthly settlement --------------------------------------------------------------------


def payout_of(revenue_minor: int, share_pct: Decimal) -> int:
    """The partner's share of `revenue_minor`, rounded half up to a whole minor unit."""
    return int(
        (Decimal(revenue_minor) * share_pct / 100).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    )


@transaction.atomic(durable=True)
def settle_month(*, operator, partner: Partner, month: date) -> Settlement:
    """The partner's statement of `month` (any day of it), computed from the usage records of
    hosts and tasks on its pools that began in the month, at its share in force now.

    Idempotent: a draft is computed again (usage metered late is counted), a confirmed or paid
    statement is never changed. The partner's row is locked first, so two settlements of one
    partner wait for each other instead of both inserting."""
    _require(operator, partner.organization.park)
    month = selectors.first_of_month(month)
    if month > selectors.first_of_month(timezone.now()):
        raise ValidationError({"month": _("A month that has not begun cannot be settled.")})
    partner = locked(Partner, partner.pk, related=("organization__park",))
    existing = Settlement.objects.filter(partner=partner, month=month).values_list("pk", flat=True)
    settlement = locked(Settlement, existing[0]) if existing else None
    if settlement is not None and settlement.state != SettlementState.DRAFT:
        raise DomainError(
            _("The statement of %(month)s is %(state)s: it is not computed again.")
            % {"month": month.strftime("%Y-%m"), "state": settlement.get_state_display()}
        )
    revenue_minor, records = selectors.revenue(partner, month)
    values = {
        "revenue_minor": revenue_minor,
        "share_pct": partner.revenue_share_pct,
        "payout_minor": payout_of(revenue_minor, partner.revenue_share_pct),
        "currency": partner.organization.park.currency,
        "records": records,
        "computed_at": timezone.now(),
    }
    if settlement is None:
        settlement = Settlement.objects.create(partner=partner, month=month, **values)
    else:
        for name, value in values.items():
            setattr(settlement, name, value)
        settlement.save(update_fields=list(values))
    record_event(
        action="partner.settlement_computed",
        actor=operator,
        target=settlement,
        data={
            "month": month.isoformat(),
            "revenue_minor": revenue_minor,
            "payout_minor": values["payout_minor"],
            "records": records,
        },
    )
    return settlement


@transaction.atomic(durable=True)
def confirm_settlement(*, operator, settlement: Settlement) -> Settlement:
    """The park's finance confirms a draft statement of a month that is over; it is frozen."""
    _require(operator, settlement.partner.organization.park)
    if not selectors.is_over(settlement.month):
        raise DomainError(
            _(
                "The month is not over yet: its statement can be confirmed from the first day "
                "of the next month."
            )
        )
    return transition(
        settlement,
        SettlementState.CONFIRMED,
        table=SETTLEMENT_TRANSITIONS,
        actor=operator,
        changes={"confirmed_by": operator, "confirmed_at": timezone.now()},
        action="partner.settlement_confirmed",
    )


@transaction.atomic(durable=True)
def mark_settlement_paid(*, operator, settlement: Settlement) -> Settlement:
    """The payout of a confirmed statement has left."""
    _require(operator, settlement.partner.organization.park)
    return transition(
        settlement,
        SettlementState.PAID,
        table=SETTLEMENT_TRANSITIONS,
        actor=operator,
        changes={"paid_at": timezone.now()},
        action="partner.settlement_paid",
    )
