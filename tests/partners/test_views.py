"""The partner console shows a partner its own servers, hosts and statements only; the
operators' partner page is its park's operators' only."""

from datetime import date

import pytest
from django.urls import reverse

from apps.core.models import AuditEvent
from apps.partners.models import Partner, PartnerPool, PoolTerms, Settlement, SettlementState
from tests.factories import OrganizationFactory, ParkFactory, ParkOperatorFactory, UserFactory
from tests.partners.conftest import last_month, local
from tests.partners.factories import SettlementFactory

pytestmark = pytest.mark.django_db

CONSOLE = reverse("partners:console")


def _statement_url(settlement):
    return reverse("partners:statement", args=[settlement.pk])


def _ops_url(park):
    return reverse("partners:park_partners", args=[park.pk])


# --- the partner console -------------------------------------------------------------------


def test_a_partner_sees_its_own_servers_and_hosts_but_no_tenants_data(client, world, member_of):
    world.host(world.pool, flavor__code="mine.1x")
    world.host(world.other_pool, flavor__code="theirs.1x")
    world.usage(pool=world.pool, at=local(date.today().replace(day=1), 1), amount_minor=1234)
    client.force_login(member_of(world.partner.organization, "viewer"))

    response = client.get(CONSOLE)

    assert response.status_code == 200
    page = response.content.decode()
    assert "p1-pool" in page and "p1-pool-node" in page and "mine.1x" in page
    assert "p2-pool" not in page and "theirs.1x" not in page and "park-pool" not in page
    assert "Tenant Secret Co" not in page
    assert "tenant-secret-host" not in page and "TENANTSECRETKEY" not in page
    assert response.context["revenue_minor"] in (0, 1234)  # 0 only when run on a month's 1st
    assert [p.pk for p in response.context["pools"]] == [world.pool.pk]
    assert response.context["pools"][0].total == 4


def test_utilization_counts_the_cards_held(client, world, member_of):
    from tests.factories import AllocationFactory

    allocation = AllocationFactory(node=world.node)
    card = world.node.accelerators.order_by("index").first()
    card.allocation = allocation
    card.save(update_fields=["allocation"])
    client.force_login(member_of(world.partner.organization, "member"))

    response = client.get(CONSOLE)

    (node,) = response.context["nodes"]
    assert (node.cards_in_use, node.cards) == (1, 4)
    assert response.context["pools"][0].allocated == 1


@pytest.mark.parametrize("who", ["tenant", "nobody", "other_park_operator"])
def test_who_is_no_partner_gets_404(client, world, member_of, who):
    if who == "tenant":
        user = member_of(world.tenant, "owner")
    elif who == "nobody":
        user = UserFactory()
    else:
        user = UserFactory()
        ParkOperatorFactory(park=ParkFactory(), user=user)
    client.force_login(user)
    settlement = SettlementFactory(partner=world.partner)

    assert client.get(CONSOLE).status_code == 404
    assert client.get(_statement_url(settlement)).status_code == 404


def test_anonymous_visitors_are_sent_to_sign_in(client):
    response = client.get(CONSOLE)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_a_partner_reads_its_own_statements_only(client, world, member_of):
    mine = SettlementFactory(partner=world.partner, month=date(2026, 1, 1), revenue_minor=4321)
    theirs = SettlementFactory(partner=world.other_partner, month=date(2026, 1, 1))
    client.force_login(member_of(world.partner.organization, "owner"))

    console = client.get(CONSOLE)
    assert list(console.context["settlements"]) == [mine]
    response = client.get(_statement_url(mine))
    assert response.status_code == 200 and "¥43.21" in response.content.decode()
    assert client.get(_statement_url(theirs)).status_code == 404
    assert client.get(reverse("partners:statement", args=[987654321])).status_code == 404


def test_the_partners_owner_sets_a_floor_from_the_console(client, world, member_of):
    client.force_login(member_of(world.partner.organization, "owner"))

    response = client.post(
        CONSOLE, {"action": "floor", "pool": world.pool.pk, "floor_price": "12.50"}
    )

    assert response.status_code == 302
    assert PoolTerms.objects.get(pool=world.pool).floor_price_minor_per_card_hour == 1250
    # Another partner's pool is not a choice: a form error, nothing written.
    response = client.post(
        CONSOLE, {"action": "floor", "pool": world.other_pool.pk, "floor_price": "1"}
    )
    assert response.status_code == 422
    assert not PoolTerms.objects.filter(pool=world.other_pool).exists()


def test_a_viewer_may_not_set_a_floor(client, world, member_of):
    client.force_login(member_of(world.partner.organization, "viewer"))
    response = client.post(CONSOLE, {"action": "floor", "pool": world.pool.pk, "floor_price": "1"})
    assert response.status_code == 403
    assert not PoolTerms.objects.exists()


# --- the operators' page -------------------------------------------------------------------


def test_the_parks_operator_runs_partners_from_their_page(client, world, operator):
    client.force_login(operator)
    url = _ops_url(world.park)
    newcomer = OrganizationFactory(park=world.park)

    assert client.get(url).status_code == 200
    response = client.post(
        url, {"action": "partner", "organization": newcomer.pk, "revenue_share_pct": "55"}
    )
    assert response.status_code == 302
    partner = Partner.objects.get(organization=newcomer)
    response = client.post(
        url, {"action": "assign_pool", "pool": world.own_pool.pk, "partner": partner.pk}
    )
    assert response.status_code == 302
    world.own_pool.refresh_from_db()
    assert PartnerPool.objects.get(pool=world.own_pool).partner == partner

    month = last_month()
    world.usage(pool=world.own_pool, at=local(month, 3), amount_minor=10_000)
    response = client.post(
        url, {"action": "settle", "partner": partner.pk, "month": month.strftime("%Y-%m")}
    )
    assert response.status_code == 302
    settlement = Settlement.objects.get(partner=partner, month=month)
    assert (settlement.revenue_minor, settlement.payout_minor) == (10_000, 5_500)

    response = client.post(url, {"action": "confirm", "settlement": settlement.pk})
    assert response.status_code == 302
    settlement.refresh_from_db()
    assert settlement.state == SettlementState.CONFIRMED and settlement.confirmed_by == operator
    # Twice: refused, shown as a message.
    response = client.post(url, {"action": "confirm", "settlement": settlement.pk}, follow=True)
    assert "cannot go from" in response.content.decode()
    assert set(
        AuditEvent.objects.filter(action__startswith="partner.").values_list("action", flat=True)
    ) >= {
        "partner.created",
        "partner.pool_assigned",
        "partner.settlement_computed",
        "partner.settlement_confirmed",
    }


def test_a_bad_month_is_a_form_error(client, world, operator):
    client.force_login(operator)
    response = client.post(
        _ops_url(world.park), {"action": "settle", "partner": world.partner.pk, "month": "2026-13"}
    )
    assert response.status_code == 422
    assert not Settlement.objects.exists()


def test_an_operator_of_another_park_gets_404(client, world):
    stranger = UserFactory()
    ParkOperatorFactory(park=ParkFactory(), user=stranger)
    client.force_login(stranger)
    settlement = SettlementFactory(partner=world.partner)
    url = _ops_url(world.park)

    assert client.get(url).status_code == 404
    assert client.post(url, {"action": "confirm", "settlement": settlement.pk}).status_code == 404
    settlement.refresh_from_db()
    assert settlement.state == SettlementState.DRAFT


def test_an_operator_cannot_confirm_another_parks_statement_from_their_own_page(
    client, world, operator
):
    elsewhere = SettlementFactory()  # a partner of another park
    client.force_login(operator)
    response = client.post(_ops_url(world.park), {"action": "confirm", "settlement": elsewhere.pk})
    assert response.status_code == 404
    elsewhere.refresh_from_db()
    assert elsewhere.state == SettlementState.DRAFT


@pytest.mark.parametrize("role", ["owner", "member"])
def test_tenants_and_partners_do_not_see_the_operators_page(client, world, member_of, role):
    for organization in (world.tenant, world.partner.organization):
        client.force_login(member_of(organization, role))
        assert client.get(_ops_url(world.park)).status_code in (403, 404)
