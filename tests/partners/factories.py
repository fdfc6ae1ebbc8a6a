"""Factories of the partners app (tests/factories.py holds the rest)."""

from datetime import date
from decimal import Decimal

import factory
from django.utils import timezone

from apps.partners.models import Partner, PartnerPool, PoolTerms, Settlement, SettlementState
from tests.factories import Factory, OrganizationFactory, PoolFactory


class PartnerFactory(Factory):
    """An organization of a park that owns pools and is paid 70 % of what they earn."""

    class Meta:
        model = Partner

    organization = factory.SubFactory(OrganizationFactory)
    revenue_share_pct = Decimal("70.00")


class PartnerPoolFactory(Factory):
    """A pool of the partner's park that the partner owns."""

    class Meta:
        model = PartnerPool

    partner = factory.SubFactory(PartnerFactory)
    pool = factory.SubFactory(
        PoolFactory, backend__park=factory.SelfAttribute("...partner.organization.park")
    )


class PoolTermsFactory(Factory):
    """A floor of ¥10.00 per card-hour on a pool of the partner's."""

    class Meta:
        model = PoolTerms

    pool = factory.LazyAttribute(lambda o: PartnerPoolFactory().pool)
    floor_price_minor_per_card_hour = 1000


class SettlementFactory(Factory):
    """A draft statement of January 2026: ¥1,000.00 earned, 70 % paid out."""

    class Meta:
        model = Settlement

    partner = factory.SubFactory(PartnerFactory)
    month = date(2026, 1, 1)
    revenue_minor = 100_000
    share_pct = factory.SelfAttribute("partner.revenue_share_pct")
    payout_minor = factory.LazyAttribute(lambda o: int(o.revenue_minor * o.share_pct / 100))
    currency = factory.LazyAttribute(lambda o: o.partner.organization.park.currency)
    records = 10
    state = SettlementState.DRAFT
    computed_at = factory.LazyFunction(timezone.now)
