"""The tenant's console home: portal.selectors.tenant_home (what runs, what needs attention, what
it costs), billing's today_spend and wallet_for, and `/` for members, for each role and for
visitors."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone, translation

from apps.billing.selectors import today_spend, wallet_for
from apps.orchestration.models import TaskState
from apps.orders.models import InstanceState, OrderState
from apps.quotas.models import QuotaResource
from apps.tenants.models import Role
from apps.tenants.roles import Action, can
from portal.selectors import SHOWN_ON_HOME, tenant_home
from tests.factories import (
    FlavorFactory,
    ImageFactory,
    InstanceFactory,
    MeterFactory,
    OrderFactory,
    OrganizationFactory,
    QuotaLimitFactory,
    RegionFactory,
    TaskFactory,
    UsageRecordFactory,
    UserFactory,
    WalletFactory,
)

pytestmark = pytest.mark.django_db

SHANGHAI = "Asia/Shanghai"
BILLING_READERS = [role for role in Role.values if can(role, Action.VIEW_BILLING)]
NOT_BILLING_READERS = [role for role in Role.values if not can(role, Action.VIEW_BILLING)]


@pytest.fixture(autouse=True)
def english(client):
    client.cookies["django_language"] = "en"
    with translation.override("en"):
        yield


def hosts(organization, *states):
    """One host of the organization in each of `states`, sharing one flavor, image and region."""
    park = organization.park
    flavor = FlavorFactory(family__park=park)
    image = ImageFactory(park=park)
    region = RegionFactory(park=park)
    return [
        InstanceFactory(
            organization=organization,
            flavor=flavor,
            image=image,
            region=region,
            state=state,
            released_at=timezone.now() if state == InstanceState.RELEASED else None,
        )
        for state in states
    ]


def usage(organization, *, started_at, amount_minor):
    """A usage record whose meter is closed and metered to its end, so only the record counts."""
    return UsageRecordFactory(
        organization=organization,
        started_at=started_at,
        amount_minor=amount_minor,
        meter__started_at=started_at,
        meter__ended_at=started_at + timedelta(hours=1),
        meter__metered_until=started_at + timedelta(hours=1),
    )


def messages(organization, **kwargs) -> list[str]:
    return [
        alert.message for alert in tenant_home(organization, with_billing=False, **kwargs).alerts
    ]


# --- tenant_home: counts ----------------------------------------------------------------------


def test_hosts_that_hold_resources_are_counted_and_running_ones_apart(organization):
    """Pending, running and stopped hosts hold resources; released and failed ones do not."""
    hosts(
        organization,
        InstanceState.PENDING,
        InstanceState.RUNNING,
        InstanceState.RUNNING,
        InstanceState.STOPPED,
        InstanceState.RELEASED,
        InstanceState.ERROR,
    )

    home = tenant_home(organization, with_billing=False)

    assert home.host_count == 3 + 1
    assert home.running_host_count == 2
    assert {host.state for host in home.hosts} == {"pending", "running", "stopped"}


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


def test_the_home_lists_a_few_hosts_but_counts_them_all(organization):
    hosts(organization, *[InstanceState.RUNNING] * (SHOWN_ON_HOME + 2))

    home = tenant_home(organization, with_billing=False)

    assert len(home.hosts) == SHOWN_ON_HOME
    assert home.host_count == home.running_host_count == SHOWN_ON_HOME + 2


def test_only_queued_placed_and_running_tasks_are_busy(organization):
    for state in TaskState.values:
        TaskFactory(organization=organization, state=state)

    home = tenant_home(organization, with_billing=False)

    assert home.task_count == 3
    assert {task.state for task in home.tasks} == {"queued", "placed", "running"}


def test_another_organizations_hosts_and_tasks_are_not_counted(organization, other_organization):
    hosts(other_organization, InstanceState.RUNNING)
    TaskFactory(organization=other_organization, state=TaskState.RUNNING)

    home = tenant_home(organization, with_billing=False)

    assert (home.host_count, home.task_count, home.hosts, home.tasks) == (0, 0, [], [])


def test_each_limit_of_the_organization_is_a_quota_row(organization, park):
    QuotaLimitFactory(park=park, organization=organization, resource=QuotaResource.INSTANCES)
    QuotaLimitFactory(park=park, organization=organization, resource=QuotaResource.VCPU)
    QuotaLimitFactory(park=park, organization=None, resource=QuotaResource.DISK_GB)  # the park's

    rows = tenant_home(organization, with_billing=False).quotas

    assert [row.resource for row in rows] == ["vcpu", "instances"]


# --- tenant_home: alerts ----------------------------------------------------------------------


def test_nothing_to_say_about_a_quiet_organization(organization):
    hosts(organization, InstanceState.RUNNING)
    OrderFactory(organization=organization, state=OrderState.SUBMITTED)

    assert messages(organization) == []


def test_a_host_in_error_is_a_danger_alert(organization):
    hosts(organization, InstanceState.ERROR, InstanceState.ERROR)

    (alert,) = tenant_home(organization, with_billing=False).alerts

    assert alert.level == "danger"
    assert alert.message == "2 hosts are in error."
    assert alert.link == reverse("orders:instance_list")


@pytest.mark.parametrize(("hours_ago", "alerted"), [(1, True), (23, True), (25, False)])
def test_a_failed_task_is_news_for_a_day(organization, hours_ago, alerted):
    now = timezone.now()
    TaskFactory(
        organization=organization,
        state=TaskState.FAILED,
        started_at=now - timedelta(hours=hours_ago + 1),
        finished_at=now - timedelta(hours=hours_ago),
    )

    found = messages(organization, now=now)

    assert found == (["1 training task failed in the last 24 hours."] if alerted else [])


@pytest.mark.parametrize(("spent", "alerted"), [(8_900, False), (9_000, True), (12_000, True)])
def test_a_quota_is_an_alert_from_ninety_percent_used(organization, park, spent, alerted):
    QuotaLimitFactory(
        park=park, organization=organization, resource=QuotaResource.MONTHLY_SPEND, limit=10_000
    )
    usage(organization, started_at=timezone.now(), amount_minor=spent)

    found = messages(organization)

    percent = min(100, spent // 100)
    assert found == ([f"Monthly spend is {percent}% used."] if alerted else [])


def test_an_order_awaiting_approval_is_an_info_alert(organization):
    OrderFactory(organization=organization, state=OrderState.AWAITING_APPROVAL)
    OrderFactory(organization=organization, state=OrderState.SUBMITTED)

    (alert,) = tenant_home(organization, with_billing=False).alerts

    assert alert.level == "info"
    assert alert.message == "1 order is waiting for the park's approval."
    assert alert.link == reverse("orders:order_list")


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

    alerts = tenant_home(organization, with_billing=False, now=now).alerts

    assert [alert.level for alert in alerts] == ["danger", "warning", "warning", "info"]
    assert "1 host is in error." in alerts[0].message
    assert "1 training task failed in the last 24 hours." in alerts[1].message
    assert "100% used" in alerts[2].message
    assert "1 order is waiting for the park's approval." in alerts[3].message


def test_another_organizations_trouble_is_not_an_alert(organization, other_organization):
    hosts(other_organization, InstanceState.ERROR)
    OrderFactory(organization=other_organization, state=OrderState.AWAITING_APPROVAL)
    now = timezone.now()
    TaskFactory(
        organization=other_organization,
        state=TaskState.FAILED,
        started_at=now - timedelta(hours=1),
        finished_at=now,
    )

    assert messages(organization) == []


# --- tenant_home: money -----------------------------------------------------------------------


def test_money_is_left_out_without_billing_rights(organization):
    usage(organization, started_at=timezone.now(), amount_minor=4_200)

    home = tenant_home(organization, with_billing=False)

    assert home.spend is None and home.wallet is None


def test_with_billing_rights_the_home_has_todays_and_the_months_spend_and_the_wallet(
    organization,
):
    now = timezone.now()
    usage(organization, started_at=now, amount_minor=4_200)

    home = tenant_home(organization, with_billing=True, now=now)

    assert home.spend.today_minor == 4_200
    assert home.spend.month_minor == 4_200
    assert home.spend.currency == organization.park.currency
    assert home.wallet == wallet_for(organization)


# --- today_spend and wallet_for ---------------------------------------------------------------


def test_today_starts_at_local_midnight_not_at_midnight_utc(organization):
    """At 10:00 in Shanghai, 00:30 there (16:30 UTC the day before) is today; 23:30 the evening
    before is yesterday."""
    now = datetime(2026, 12, 3, 2, 0, tzinfo=UTC)  # 10:00 in Shanghai
    usage(organization, started_at=datetime(2026, 12, 2, 16, 30, tzinfo=UTC), amount_minor=700)
    usage(organization, started_at=datetime(2026, 12, 2, 15, 30, tzinfo=UTC), amount_minor=50_000)

    with timezone.override(SHANGHAI):
        assert today_spend(organization, now=now) == 700


def test_today_adds_what_open_meters_ran_since_they_were_last_metered(organization):
    """Two hours of ¥25.00 an hour of which one was metered already: ¥25.00 still accrued."""
    now = timezone.now()
    MeterFactory(
        organization=organization,
        started_at=now - timedelta(hours=2),
        metered_until=now - timedelta(hours=1),
        metered_minor=2_500,
        hourly_minor=Decimal(2500),
    )
    MeterFactory(  # closed: all it cost is in its usage records
        organization=organization,
        started_at=now - timedelta(hours=3),
        ended_at=now - timedelta(hours=2),
        metered_until=now - timedelta(hours=2),
        hourly_minor=Decimal(2500),
    )

    assert today_spend(organization, now=now) == 2_500


def test_today_counts_a_meter_closed_since_the_last_metering_pass_to_its_end(organization):
    """Stopped 20 minutes ago after an hour of ¥25.00 an hour, metered to half an hour: the
    other half is owed, though no pass has recorded it yet."""
    now = timezone.now()
    MeterFactory(
        organization=organization,
        started_at=now - timedelta(minutes=80),
        ended_at=now - timedelta(minutes=20),
        metered_until=now - timedelta(minutes=50),
        metered_minor=1_250,
        hourly_minor=Decimal(2500),
    )

    assert today_spend(organization, now=now) == 1_250


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
            meter__metered_until=started + timedelta(hours=1),
        )
    MeterFactory(  # ¥25.00 an hour, half an hour unmetered
        organization=organization,
        instance=instance,
        started_at=now - timedelta(minutes=30),
        hourly_minor=Decimal(2500),
    )

    assert today_spend(organization, now=now) == 2500 + 1250


def test_today_is_the_organizations_own(organization, other_organization):
    now = timezone.now()
    usage(organization, started_at=now, amount_minor=300)
    usage(other_organization, started_at=now, amount_minor=9_999)

    assert today_spend(organization, now=now) == 300


def test_no_usage_and_nothing_running_is_nothing_spent(organization):
    assert today_spend(organization) == 0


def test_wallet_for_is_none_before_the_first_wallet(park):
    assert wallet_for(OrganizationFactory(park=park, wallet=False)) is None


def test_wallet_for_finds_the_organizations_wallet(organization):
    WalletFactory(organization=organization, balance_minor=777)

    assert wallet_for(organization).balance_minor == 777


def test_the_wallet_is_the_organizations(organization, other_organization):
    assert wallet_for(organization).organization == organization
    assert wallet_for(other_organization).organization == other_organization


# --- The page ---------------------------------------------------------------------------------


def page(client, user=None):
    if user is not None:
        client.force_login(user)
    response = client.get("/")
    assert response.status_code == 200
    return response


def template_names(response) -> list[str]:
    return [template.name for template in response.templates]


def stat(html: str, card_id: str) -> str:
    """The figure of one of the home's stat cards, tags stripped."""
    card = re.search(rf'id="{card_id}">(.*?)</div></div>', html, re.S)
    assert card, html
    value = re.search(r'class="stat-value[^"]*"[^>]*>(.*?)</div>', card.group(1), re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", value.group(1))).strip()


def test_a_member_gets_the_console_home_with_its_figures(client, organization, member):
    hosts(organization, InstanceState.RUNNING, InstanceState.STOPPED)
    TaskFactory(organization=organization, state=TaskState.QUEUED)

    response = page(client, member)

    assert "core/tenant_home.html" in template_names(response)
    html = response.content.decode()
    assert stat(html, "home-hosts") == "1 / 2"
    assert stat(html, "home-tasks") == "1"


def test_the_page_shows_figures_and_money_to_billing_readers(client, organization, owner):
    WalletFactory(organization=organization, balance_minor=123_456)
    InstanceFactory(organization=organization, running=True, name="trainer-7")

    html = page(client, owner).content.decode()

    assert 'id="home-hosts"' in html and "trainer-7" in html
    assert 'id="home-spend"' in html and 'id="home-balance"' in html
    assert "¥1,234.56" in html
    assert 'id="nav-billing"' in html


@pytest.mark.parametrize("role", BILLING_READERS)
def test_billing_readers_see_todays_spend_and_the_balance(client, organization, member_of, role):
    WalletFactory(organization=organization, balance_minor=123_456, held_minor=23_456)
    usage(organization, started_at=timezone.now(), amount_minor=4_200)

    html = page(client, member_of(organization, role)).content.decode()

    assert stat(html, "home-spend") == "¥42.00"
    assert stat(html, "home-balance") == "¥1,000.00"  # what is held is not available


@pytest.mark.parametrize("role", NOT_BILLING_READERS)
def test_members_without_billing_rights_see_no_money(client, organization, member_of, role):
    WalletFactory(organization=organization, balance_minor=123_456)

    html = page(client, member_of(organization, role)).content.decode()

    assert 'id="home-hosts"' in html
    assert 'id="home-spend"' not in html and 'id="home-balance"' not in html
    assert "¥1,234.56" not in html


def test_a_member_without_billing_rights_sees_no_money(client, organization, member):
    WalletFactory(organization=organization, balance_minor=123_456)

    html = page(client, member).content.decode()

    assert 'id="home-hosts"' in html
    assert 'id="home-spend"' not in html and 'id="home-balance"' not in html
    assert "¥1,234.56" not in html
    assert 'id="nav-billing"' not in html


def test_the_roles_without_billing_rights_are_the_member_and_the_viewer():
    """The page tests above cover both sides of the matrix."""
    assert set(NOT_BILLING_READERS) == {Role.MEMBER, Role.VIEWER}


def test_a_visitor_still_gets_the_public_landing_page(client, organization):
    response = page(client)

    assert "core/home.html" in template_names(response)
    assert "core/tenant_home.html" not in template_names(response)
    assert 'id="home-hosts"' not in response.content.decode()


def test_a_visitor_gets_the_landing_page(client, park):
    html = page(client).content.decode()

    assert 'id="home-hosts"' not in html


def test_a_user_of_no_organization_gets_the_landing_page_too(client, park):
    response = page(client, UserFactory())

    assert "core/home.html" in template_names(response)


def test_a_signed_in_member_starts_on_the_console_home(client, member):
    client.force_login(member)

    response = client.get(reverse("portal:start"))

    assert response.status_code == 302
    assert response["Location"] == reverse("portal:home") == "/"


def test_signing_in_lands_a_member_on_the_home(client, owner):
    client.force_login(owner)

    assert client.get("/start/")["Location"] == "/"


@pytest.mark.parametrize("role", Role.values)
def test_the_billing_link_is_in_the_nav_only_for_billing_readers(
    client, organization, member_of, role
):
    html = page(client, member_of(organization, role)).content.decode()

    assert ('id="nav-billing"' in html) == can(role, Action.VIEW_BILLING)
