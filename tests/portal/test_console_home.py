"""The tenant's console home (portal.selectors.tenant_home and `/`): what runs, what it costs
today and this month, the balance, quota use and what needs the members' attention."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone, translation

from apps.billing.selectors import today_spend, wallet_for
from apps.orchestration.models import TaskState
from apps.orders.models import InstanceState, OrderState
from apps.quotas.models import QuotaResource
from portal.selectors import tenant_home
from tests.factories import (
    InstanceFactory,
    MeterFactory,
    OrderFactory,
    QuotaLimitFactory,
    TaskFactory,
    UsageRecordFactory,
    WalletFactory,
)

pytestmark = pytest.mark.django_db

ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}


def test_the_home_counts_what_holds_resources_and_what_runs(organization):
    InstanceFactory.create_batch(2, organization=organization, running=True)
    InstanceFactory(organization=organization, state=InstanceState.STOPPED)
    InstanceFactory(organization=organization, released=True)
    TaskFactory(organization=organization, state=TaskState.QUEUED)
    TaskFactory(organization=organization, state=TaskState.SUCCEEDED)

    home = tenant_home(organization, with_billing=False)

    assert (home.running_host_count, home.host_count) == (2, 3)
    assert len(home.hosts) == 3
    assert home.task_count == 1
    assert home.spend is None and home.wallet is None  # not for a reader without billing rights


def test_alerts_name_errors_recent_failures_full_quotas_and_waiting_orders(organization):
    now = timezone.now()
    InstanceFactory(organization=organization, state=InstanceState.ERROR)
    InstanceFactory(organization=organization, running=True)  # 1 of 1 instance allowed
    for finished in (now, now - timedelta(days=2)):  # the older one is old news
        TaskFactory(
            organization=organization,
            state=TaskState.FAILED,
            started_at=finished - timedelta(hours=1),
            finished_at=finished,
        )
    QuotaLimitFactory(
        park=organization.park,
        organization=organization,
        resource=QuotaResource.INSTANCES,
        limit=1,
    )
    OrderFactory(organization=organization, state=OrderState.AWAITING_APPROVAL)

    with translation.override("en"):
        alerts = tenant_home(organization, with_billing=False, now=now).alerts

    assert [alert.level for alert in alerts] == ["danger", "warning", "warning", "info"]
    assert "1 host is in error." in alerts[0].message
    assert "1 training task failed in the last 24 hours." in alerts[1].message
    assert "100% used" in alerts[2].message
    assert "1 order is waiting for the park's approval." in alerts[3].message


def test_today_counts_usage_since_midnight_and_what_runs_now(organization):
    now = timezone.localtime()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    instance = InstanceFactory(organization=organization, running=True)
    for started in (midnight, midnight - timedelta(hours=2)):  # today's and yesterday's
        UsageRecordFactory(
            organization=organization,
            instance=instance,
            started_at=started,
            meter__started_at=started,
            meter__ended_at=started + timedelta(hours=1),
        )
    MeterFactory(  # ¥25.00 an hour, half an hour unmetered
        organization=organization,
        instance=instance,
        started_at=now - timedelta(minutes=30),
        hourly_minor=Decimal(2500),
    )

    assert today_spend(organization, now=now) == 2500 + 1250


def test_the_wallet_is_the_organizations(organization, other_organization):
    assert wallet_for(organization).organization == organization
    assert wallet_for(other_organization).organization == other_organization


def test_the_page_shows_figures_and_money_to_billing_readers(client, organization, owner):
    WalletFactory(organization=organization, balance_minor=123_456)
    InstanceFactory(organization=organization, running=True, name="trainer-7")
    client.force_login(owner)

    html = client.get("/", **ENGLISH).content.decode()

    assert 'id="home-hosts"' in html and "trainer-7" in html
    assert 'id="home-spend"' in html and 'id="home-balance"' in html
    assert "¥1,234.56" in html
    assert 'id="nav-billing"' in html


def test_a_member_without_billing_rights_sees_no_money(client, organization, member):
    WalletFactory(organization=organization, balance_minor=123_456)
    client.force_login(member)

    html = client.get("/", **ENGLISH).content.decode()

    assert 'id="home-hosts"' in html
    assert 'id="home-spend"' not in html and 'id="home-balance"' not in html
    assert "¥1,234.56" not in html
    assert 'id="nav-billing"' not in html


def test_a_visitor_gets_the_landing_page(client, park):
    html = client.get("/", **ENGLISH).content.decode()

    assert 'id="home-hosts"' not in html


def test_signing_in_lands_a_member_on_the_home(client, owner):
    client.force_login(owner)

    assert client.get("/start/")["Location"] == "/"
