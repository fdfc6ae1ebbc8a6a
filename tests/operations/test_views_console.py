"""The console's pages: who sees them, what they show, and their forms and inline (HTMX)
actions, including refusals (a form error or a row's message, never a 500)."""

import json
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone
from django.utils.html import escape

from apps.billing.models import Wallet
from apps.catalog.models import Flavor, FlavorFamily, Image, Price, PriceKind
from apps.catalog.selectors import price_in_force
from apps.core.models import AuditEvent
from apps.orchestration.models import Backend, CapacitySample, Node, Pool
from apps.orders.models import IdlePolicy, Instance, OrderState
from apps.quotas.models import QuotaLimit
from tests.factories import (
    ApprovalPolicyFactory,
    BackendFactory,
    FlavorFactory,
    ImageFactory,
    InstanceFactory,
    NodeFactory,
    OrderFactory,
    OrganizationFactory,
    ParkFactory,
    ParkOperatorFactory,
    PriceFactory,
    QuotaLimitFactory,
    UserFactory,
)
from tests.operations.conftest import devices_of

pytestmark = pytest.mark.django_db


def html(response) -> str:
    return response.content.decode()


@pytest.fixture
def ops(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def elsewhere():
    """Another park with its own operator and one of everything a console page names."""
    park = ParkFactory()
    user = UserFactory()
    ParkOperatorFactory(park=park, user=user)
    organization = OrganizationFactory(park=park)
    node = NodeFactory(pool__backend__park=park)
    flavor = FlavorFactory(family__park=park)
    return {
        "park": park,
        "operator": user,
        "organization": organization,
        "instance": InstanceFactory(organization=organization, running=True),
        "node": node,
        "pool": node.pool,
        "backend": node.pool.backend,
        "flavor": flavor,
        "image": ImageFactory(park=park),
        "price": PriceFactory(
            flavor=flavor,
            region__park=park,
            effective_from=timezone.now() + timedelta(days=1),
        ),
        "limit": QuotaLimitFactory(park=park, organization=organization),
    }


def park_pages(park):
    return [
        f"/ops/parks/{park.pk}/{page}"
        for page in (
            "idle/",
            "catalog/",
            "catalog/images/",
            "catalog/prices/",
            "backends/",
            "pools/",
            "nodes/",
        )
    ]


def pages(console):
    return [
        "/ops/",
        "/ops/organizations/",
        f"/ops/organizations/{console.organization.pk}/",
        f"/ops/organizations/{console.organization.pk}/quotas/",
        "/ops/orders/",
        "/ops/instances/",
        *park_pages(console.park),
    ]


# --- Who sees the console --------------------------------------------------------------------


def test_anonymous_is_sent_to_log_in_and_tenants_are_refused(client, console, owner):
    for path in pages(console):
        response = client.get(path)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], path
    client.force_login(owner)
    for path in pages(console):
        assert client.get(path).status_code == 403, path


def test_the_parks_operator_sees_every_page_in_both_languages(client, ops, console, running):
    running()
    for language in ("en", "zh-hans"):
        client.cookies["django_language"] = language
        for path in pages(console):
            assert ops.get(path).status_code == 200, (language, path)


def test_another_parks_operator_gets_404_for_this_parks_pages(client, console, elsewhere):
    client.force_login(elsewhere["operator"])
    for path in park_pages(console.park) + [
        f"/ops/organizations/{console.organization.pk}/",
        f"/ops/organizations/{console.organization.pk}/quotas/",
    ]:
        assert client.get(path).status_code == 404, path


@pytest.mark.parametrize(
    ("page", "fields"),
    [
        ("instances/", {"action": "release", "instance": "instance", "reason": "x"}),
        ("nodes/", {"action": "drain", "node": "node"}),
        ("nodes/", {"action": "undrain", "node": "node"}),
        ("catalog/", {"action": "toggle_flavor", "flavor": "flavor", "on_sale": "0"}),
        ("catalog/images/", {"action": "toggle_image", "image": "image", "available": "0"}),
        ("catalog/prices/", {"action": "withdraw", "price": "price"}),
        ("backends/", {"action": "probe", "backend": "backend"}),
        ("pools/", {"action": "update", "pool": "pool", "pue": "1.5"}),
        ("idle/", {"action": "notify", "instance": "instance"}),
    ],
)
def test_another_parks_objects_are_404_in_this_parks_actions(ops, console, elsewhere, page, fields):
    """Posted to this park's page (or the cross-park list), another park's object is a 404,
    and nothing changes."""
    data = {k: elsewhere[v].pk if v in elsewhere else v for k, v in fields.items()}
    path = "/ops/instances/" if page == "instances/" else f"/ops/parks/{console.park.pk}/{page}"
    before = AuditEvent.objects.count()
    assert ops.post(path, data).status_code == 404
    assert ops.post(path, data, HTTP_HX_REQUEST="true").status_code == 404
    assert AuditEvent.objects.count() == before
    assert Instance.objects.get(pk=elsewhere["instance"].pk).state == "running"
    assert not Node.objects.get(pk=elsewhere["node"].pk).is_drained
    assert Flavor.objects.get(pk=elsewhere["flavor"].pk).is_active
    assert Price.objects.filter(pk=elsewhere["price"].pk).exists()


def test_another_organizations_limit_is_404_in_the_quota_editor(ops, console, elsewhere):
    mine = QuotaLimitFactory(park=console.park, organization=OrganizationFactory(park=console.park))
    for limit in (elsewhere["limit"], mine):  # another park's, or another organization's
        response = ops.post(
            f"/ops/organizations/{console.organization.pk}/quotas/",
            {"action": "set", "limit_id": limit.pk, "value": 99},
        )
        assert response.status_code == 404
        assert QuotaLimit.objects.get(pk=limit.pk).limit == 8


@pytest.mark.parametrize(
    "data",
    [
        {"action": "nonsense"},
        {"action": "drain"},
        {"action": "drain", "node": "abc"},
        {"action": "drain", "node": "999999"},
        {"action": "drain", "node": "-1"},
    ],
)
def test_bad_actions_and_ids_are_404_not_500(ops, console, data):
    assert ops.post(f"/ops/parks/{console.park.pk}/nodes/", data).status_code == 404


# --- The overview ----------------------------------------------------------------------------


def test_overview_shows_what_waits_and_what_fails(ops, console):
    OrderFactory(organization=console.organization, state=OrderState.AWAITING_APPROVAL)
    Backend.objects.filter(pk=console.backend.pk).update(last_error="simulator: unreachable")
    page = html(ops.get("/ops/"))
    assert 'id="awaiting-approval">1<' in page
    assert 'id="failing-backends">1<' in page and "simulator: unreachable" in page
    assert "No capacity samples in this period yet" in page
    assert "echarts.min.js" not in page


def test_overview_charts_the_samples(ops, console):
    now = timezone.now()
    for minutes in (10, 5):
        CapacitySample.objects.create(
            park=console.park,
            pool=console.pool,
            taken_at=now - timedelta(minutes=minutes),
            accelerators_total=16,
            accelerators_allocated=4,
            watts=3640,
        )
    page = html(ops.get("/ops/"))
    assert "/static/vendor/echarts/echarts.min.js" in page
    start = page.index('<script id="capacity-series" type="application/json">')
    data = json.loads(page[start:].split(">", 1)[1].split("</script>", 1)[0])
    assert data["allocated_pct"] == [25.0, 25.0] and data["power_kw"] == [3.64, 3.64]
    assert data["points"] == 2
    assert html(ops.get("/ops/", {"period": "30d"})).count("btn-outline-secondary active") == 1
    assert ops.get("/ops/", {"period": "<script>"}).status_code == 200


# --- Organizations ---------------------------------------------------------------------------


def test_organization_list_filters_and_counts(ops, console, running):
    running(2)
    OrganizationFactory(park=console.park, name="Quiet Labs")
    OrganizationFactory(name="Other Park Org")
    page = html(ops.get("/ops/organizations/"))
    assert console.organization.name in page and "Quiet Labs" in page
    assert "Other Park Org" not in page
    rows = html(ops.get("/ops/organizations/", {"q": "quiet"}, HTTP_HX_REQUEST="true"))
    assert "<html" not in rows and "Quiet Labs" in rows and console.organization.name not in rows
    verified = html(ops.get("/ops/organizations/", {"state": "verified"}))
    assert console.organization.name in verified and "Quiet Labs" not in verified
    assert ops.get("/ops/organizations/", {"state": "bogus", "page": "x"}).status_code == 200


def test_organization_page_shows_balance_members_quotas_and_instances(ops, console, owner, running):
    host = running(2, name="busy-host")
    Wallet.objects.filter(organization=console.organization).update(
        balance_minor=123456, held_minor=1000
    )
    page = html(ops.get(f"/ops/organizations/{console.organization.pk}/"))
    assert "¥1,234.56" in page and "¥10.00" in page and "No wallet yet." not in page
    assert owner.email in page and "busy-host" in page and host.flavor.code in page
    assert "2 / 64" in page  # accelerators used / limit
    newcomer = OrganizationFactory(park=console.park, wallet=False)
    assert "No wallet yet." in html(ops.get(f"/ops/organizations/{newcomer.pk}/"))


def test_quota_editor_changes_adds_and_shows_history(ops, console, operator):
    path = f"/ops/organizations/{console.organization.pk}/quotas/"
    limit = QuotaLimit.objects.get(organization=console.organization, resource="accelerators")
    response = ops.post(path, {"action": "set", "limit_id": limit.pk, "value": 24}, follow=True)
    assert QuotaLimit.objects.get(pk=limit.pk).limit == 24
    assert "Limit saved." in html(response)
    response = ops.post(path, {"action": "add", "resource": "vcpu", "value": 128}, follow=True)
    assert QuotaLimit.objects.get(organization=console.organization, resource="vcpu").limit == 128
    history = html(response).split('id="quota-history"', 1)[1]
    assert history.index("vcpu") < history.index("accelerators")  # newest first
    assert operator.username in history


def test_a_limit_below_current_use_is_saved_with_a_warning(ops, console, running):
    """Issue 18: the operator is told the organization already uses more, and that nothing
    running is stopped."""
    running(2)
    running(1)
    path = f"/ops/organizations/{console.organization.pk}/quotas/"
    limit = QuotaLimit.objects.get(organization=console.organization, resource="accelerators")
    page = html(ops.post(path, {"action": "set", "limit_id": limit.pk, "value": 2}, follow=True))
    assert QuotaLimit.objects.get(pk=limit.pk).limit == 2
    assert "Limit saved." in page and "alert-warning" in page
    assert "already uses 3 of Accelerators (all models)" in page
    assert "Nothing running is stopped" in page
    assert Instance.objects.filter(state="running").count() == 2
    # At or above the use: no warning.
    page = html(ops.post(path, {"action": "set", "limit_id": limit.pk, "value": 3}, follow=True))
    assert "Limit saved." in page and "alert-warning" not in page
    # Adding a limit under the use warns too.
    page = html(ops.post(path, {"action": "add", "resource": "vcpu", "value": 8}, follow=True))
    assert "Limit added." in page and "already uses 24 of vCPU" in page


@pytest.mark.parametrize(
    "data",
    [
        {"action": "set", "limit_id": "", "value": "5"},
        {"action": "set", "limit_id": "1", "value": "-3"},
        {"action": "set", "limit_id": "1", "value": "lots"},
    ],
)
def test_quota_editor_bad_input_is_a_message(ops, console, data):
    response = ops.post(f"/ops/organizations/{console.organization.pk}/quotas/", data, follow=True)
    assert response.status_code == 200
    assert "alert-danger" in html(response)


def test_quota_editor_add_errors_are_form_errors(ops, console):
    path = f"/ops/organizations/{console.organization.pk}/quotas/"
    response = ops.post(path, {"action": "add", "resource": "accelerators", "value": 3})
    assert response.status_code == 422
    assert "already has this limit" in html(response)
    response = ops.post(path, {"action": "add", "resource": "model_accelerators", "value": 3})
    assert response.status_code == 422 and "Choose the accelerator model." in html(response)
    response = ops.post(path, {"action": "add", "resource": "nope", "value": "x"})
    assert response.status_code == 422


# --- Orders and instances --------------------------------------------------------------------


def test_orders_list_is_the_approval_queue_unless_filtered(ops, console):
    waiting = OrderFactory(organization=console.organization, state=OrderState.AWAITING_APPROVAL)
    done = OrderFactory(organization=console.organization, state=OrderState.DONE)
    queue = html(ops.get("/ops/orders/"))
    assert f'id="order-{waiting.pk}"' in queue and f'id="order-{done.pk}"' not in queue
    every = html(ops.get("/ops/orders/", {"state": ""}))
    assert f'id="order-{waiting.pk}"' in every and f'id="order-{done.pk}"' in every
    assert "No orders match." in html(ops.get("/ops/orders/", {"state": "", "q": "#0"}))
    assert html(ops.get("/ops/orders/", {"q": f"#{waiting.pk}"})).count('class="order-row"') == 1


def test_an_order_is_approved_and_rejected_inline(ops, console, owner, running, commit):
    ApprovalPolicyFactory(park=console.park, max_accelerators=1)
    from apps.orders.services import submit_create

    with commit():
        (big,) = submit_create(
            organization=console.organization, actor=owner, request=console.request(2, "big")
        )
        (other,) = submit_create(
            organization=console.organization, actor=owner, request=console.request(4, "other")
        )
    assert big.state == other.state == OrderState.AWAITING_APPROVAL
    with commit():
        row = ops.post(
            f"/ops/orders/{big.pk}/decision/", {"decision": "approve"}, HTTP_HX_REQUEST="true"
        )
    assert row.status_code == 200
    # The row is answered before the backend runs (after commit): the host is on its way.
    assert html(row).startswith('<tr id="order-') and 'data-state="fulfilling"' in html(row)
    assert Instance.objects.get(pk=big.instance_id).state == "running"

    refused = ops.post(
        f"/ops/orders/{other.pk}/decision/", {"decision": "reject"}, HTTP_HX_REQUEST="true"
    )
    assert refused.status_code == 422 and "Say why the order is rejected." in html(refused)
    rejected = ops.post(
        f"/ops/orders/{other.pk}/decision/",
        {"decision": "reject", "reason": "Too large", "next": "/ops/orders/?state="},
    )
    assert rejected["Location"] == "/ops/orders/?state="
    other.refresh_from_db()
    assert other.state == OrderState.REJECTED and other.reason == "Too large"


def test_instances_list_filters_and_force_releases(ops, console, owner, running, commit):
    host, other = running(name="to-go"), running(name="stays")
    page = html(ops.get("/ops/instances/"))
    assert "to-go" in page and "stays" in page
    assert "stays" not in html(ops.get("/ops/instances/", {"q": "to-go"}))

    missing = ops.post(
        "/ops/instances/", {"action": "release", "instance": host.pk}, HTTP_HX_REQUEST="true"
    )
    assert missing.status_code == 422 and "Say why the instance is released" in html(missing)
    with commit():
        row = ops.post(
            "/ops/instances/",
            {"action": "release", "instance": host.pk, "reason": "Unpaid for 90 days"},
            HTTP_HX_REQUEST="true",
        )
    assert row.status_code == 200 and 'data-state="releasing"' in html(row)
    assert Instance.objects.get(pk=host.pk).state == "released"
    assert Instance.objects.get(pk=other.pk).state == "running"
    assert "Unpaid for 90 days" in mail.outbox[0].body
    released = html(ops.get("/ops/instances/", {"state": "released"}))
    assert "to-go" in released and "stays" not in released


# --- Catalog ---------------------------------------------------------------------------------


def test_catalog_forms_create_and_refuse(ops, console):
    path = f"/ops/parks/{console.park.pk}/catalog/"
    response = ops.post(
        path,
        {
            "action": "create_family",
            "code": "h1big",
            "name": "H1 big",
            "resource_type": "cloud_host",
            "accelerator_model": console.model.pk,
        },
    )
    assert response.status_code == 302
    family = FlavorFamily.objects.get(park=console.park, code="h1big")
    fields = {
        "action": "create_flavor",
        "family": family.pk,
        "code": "h1big.8x",
        "accelerator_count": 8,
        "vcpu": 96,
        "ram_gb": 1024,
        "system_disk_gb": 200,
        "is_active": "on",
    }
    assert ops.post(path, fields).status_code == 302
    assert Flavor.objects.get(code="h1big.8x").family == family

    again = ops.post(path, fields)
    assert again.status_code == 422 and "already exists" in html(again)
    bad = ops.post(path, {**fields, "code": "Not A Code", "accelerator_count": "eight"})
    assert bad.status_code == 422 and "Enter a whole number." in html(bad)
    foreign = ops.post(path, {**fields, "family": FlavorFactory().family_id, "code": "z"})
    assert foreign.status_code == 422  # another park's family is not a choice


def test_a_flavor_is_withdrawn_inline(ops, console):
    flavor = console.flavors[4]
    row = ops.post(
        f"/ops/parks/{console.park.pk}/catalog/",
        {"action": "toggle_flavor", "flavor": flavor.pk, "on_sale": "0"},
        HTTP_HX_REQUEST="true",
    )
    assert row.status_code == 200 and "Put on sale" in html(row)
    assert not Flavor.objects.get(pk=flavor.pk).is_active


def test_images_and_prices_pages(ops, console):
    images = f"/ops/parks/{console.park.pk}/catalog/images/"
    data = {
        "action": "create_image",
        "code": "ubuntu24",
        "name": "Ubuntu 24.04",
        "os": "Ubuntu 24.04",
        "software_stack": "cuda",
        "stack_version": "12.6",
        "compatible_accelerators": [console.model.pk],
    }
    assert ops.post(images, data).status_code == 302
    image = Image.objects.get(code="ubuntu24")
    assert ops.post(images, {**data, "code": "cann", "software_stack": "cann"}).status_code == 422
    ops.post(images, {"action": "toggle_image", "image": image.pk, "available": "0"})
    assert not Image.objects.get(pk=image.pk).is_active

    prices = f"/ops/parks/{console.park.pk}/catalog/prices/"
    later = (timezone.localtime() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    response = ops.post(
        prices,
        {
            "action": "schedule",
            "region": console.region.pk,
            "kind": "flavor_hour",
            "flavor": console.flavors[1].pk,
            "amount": "12.50",
            "effective_from": later,
        },
    )
    assert response.status_code == 302
    price = Price.objects.get(amount_minor=1250)
    scheduled = html(ops.get(prices, {"when": "scheduled"}))
    assert "¥12.50" in scheduled and "Scheduled" in scheduled
    assert "¥12.50" not in html(ops.get(prices))  # not in force yet
    rows = html(ops.get(prices, {"when": ""}, HTTP_HX_REQUEST="true"))
    assert "<html" not in rows and "¥12.50" in rows
    past = ops.post(
        prices,
        {
            "action": "schedule",
            "region": console.region.pk,
            "kind": "disk_gb_month",
            "amount": "0.30",
            "effective_from": "2020-01-01T00:00",
        },
    )
    assert past.status_code == 422 and "past usage keeps the rate" in html(past)
    assert ops.post(prices, {"action": "schedule", "amount": "abc"}).status_code == 422
    ops.post(prices, {"action": "withdraw", "price": price.pk})
    assert not Price.objects.filter(pk=price.pk).exists()


def test_the_operator_sets_a_regions_no_card_price(ops, console):
    """The price a host started without its cards (无卡模式) pays, one per region."""
    prices = f"/ops/parks/{console.park.pk}/catalog/prices/"
    now = timezone.localtime().strftime("%Y-%m-%dT%H:%M")
    data = {"action": "schedule", "region": console.region.pk, "kind": "no_card_hour"}
    response = ops.post(prices, {**data, "amount": "0.80", "effective_from": now})

    assert response.status_code == 302
    price = price_in_force(region=console.region, kind=PriceKind.NO_CARD_HOUR)
    assert price.amount_minor == 80 and price.flavor is None
    per_flavor = {**data, "flavor": console.flavors[1].pk, "amount": "1", "effective_from": now}
    assert ops.post(prices, per_flavor).status_code == 422


# --- Backends, pools, nodes ------------------------------------------------------------------


def test_register_a_backend_from_the_form(ops, console):
    path = f"/ops/parks/{console.park.pk}/backends/"
    config = {
        "pools": [
            {
                "name": "edge-h1",
                "accelerator_model": "test-h1",
                "nodes": [{"hostname": "e1", "accelerators": 2, "vcpu": 32, "ram_gb": 256}],
            }
        ]
    }
    data = {
        "action": "register",
        "name": "edge",
        "driver": "simulator",
        "config": json.dumps(config),
        "region": console.region.pk,
    }
    assert ops.post(path, data).status_code == 302
    assert Pool.objects.get(backend__name="edge").nodes.get().hostname == "e1"

    broken = ops.post(path, {**data, "name": "b2", "config": "{not json"})
    assert broken.status_code == 422 and "Enter a valid JSON." in html(broken)
    refused = ops.post(path, {**data, "name": "b3", "config": '{"pools": [{"name": "x"}]}'})
    assert refused.status_code == 422 and "The driver refused this configuration" in html(refused)
    no_region = ops.post(path, {**data, "name": "b4", "region": ""})
    assert no_region.status_code == 422 and "Choose the region" in html(no_region)
    assert not Backend.objects.filter(name__in=["b2", "b3", "b4"]).exists()


def test_registering_a_cluster_registered_elsewhere_is_a_form_error(ops, console, remote_driver):
    BackendFactory(name="hpc", endpoint="http://head:6820")
    config = {"pools": [], "url": "http://HEAD:6820/"}
    data = {"action": "register", "name": "again", "driver": "remote", "region": ""}

    refused = ops.post(
        f"/ops/parks/{console.park.pk}/backends/", {**data, "config": json.dumps(config)}
    )

    assert refused.status_code == 422
    assert "http://head:6820 is already registered, as backend “hpc” of park" in html(refused)
    assert not Backend.objects.filter(name="again").exists()


def test_check_a_backend_now(ops, console):
    response = ops.post(
        f"/ops/parks/{console.park.pk}/backends/",
        {"action": "probe", "backend": console.backend.pk},
        follow=True,
    )
    assert "sim answered." in html(response)
    assert Node.objects.filter(pool=console.pool, last_seen_at__isnull=False).count() == 2


def test_pool_attributes_are_edited_in_place(ops, console):
    path = f"/ops/parks/{console.park.pk}/pools/"
    data = {
        "action": "update",
        "pool": console.pool.pk,
        "region": console.region.pk,
        "pue": "1.18",
        "power_price_per_kwh": "0.55",  # yuan, as on the power bill
        "carbon_g_per_kwh": "420",
    }
    assert ops.post(path, data).status_code == 302
    pool = Pool.objects.get(pk=console.pool.pk)
    assert (str(pool.pue), pool.carbon_g_per_kwh, pool.is_schedulable) == ("1.18", 420, False)
    assert pool.power_price_minor_per_kwh == 55
    assert 'value="0.55"' in html(ops.get(path))
    bad = ops.post(path, {**data, "pue": "0.5"})
    assert bad.status_code == 422 and "greater than or equal to 1" in html(bad)


def test_drain_and_undrain_inline(ops, console, running):
    host = running()
    path = f"/ops/parks/{console.park.pk}/nodes/"
    row = ops.post(
        path,
        {"action": "drain", "node": host.node_id, "reason": "fan noise"},
        HTTP_HX_REQUEST="true",
    )
    assert row.status_code == 200 and 'data-drained="true"' in html(row)
    assert "no new placements" in html(row)
    assert Instance.objects.get(pk=host.pk).state == "running"
    drained = html(ops.get(path, {"drained": "true"}))
    assert drained.count('class="node-row"') == 1
    ops.post(path, {"action": "undrain", "node": host.node_id})
    assert not Node.objects.get(pk=host.node_id).is_drained


# --- Idle capacity ---------------------------------------------------------------------------


def test_idle_page_lists_idle_hosts_and_notifies_owners(ops, console, running, telemetry):
    host, busy = running(name="sleepy"), running(name="busy")
    telemetry({host.node.hostname: {str(i): 0 for i in devices_of(host)}}, idle_for=240)
    path = f"/ops/parks/{console.park.pk}/idle/"
    page = html(ops.get(path))
    rows = page.split('id="idle-rows"')[1]
    assert "sleepy" in rows and "busy" not in rows
    # A page loads a few columns of each host: those its row shows.
    for shown in (host.organization.name, host.flavor.code, host.node.hostname):
        assert escape(shown) in rows
    notice = ops.post(path, {"action": "notify", "instance": host.pk}, HTTP_HX_REQUEST="true")
    assert notice.status_code == 200 and "told it is idle" in html(notice)
    assert AuditEvent.objects.filter(action="instance.idle_notice").count() == 1
    refused = ops.post(path, {"action": "notify", "instance": busy.pk}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 422 and "is not idle now" in html(refused)


def test_idle_policy_form(ops, console):
    path = f"/ops/parks/{console.park.pk}/idle/"
    assert 'name="release_stopped_after_days" value="15"' in html(ops.get(path))
    saved = ops.post(
        path,
        {
            "action": "policy",
            "threshold_minutes": "90",
            "auto_stop": "on",
            "release_stopped_after_days": "0",
        },
    )
    assert saved.status_code == 302
    policy = IdlePolicy.objects.get(park=console.park)
    assert (policy.threshold_minutes, policy.auto_stop) == (90, True)
    assert policy.release_stopped_after_days == 0  # never released
    bad = ops.post(
        path, {"action": "policy", "threshold_minutes": "5", "release_stopped_after_days": "-1"}
    )
    assert bad.status_code == 422 and "greater than or equal to 10" in html(bad)
    assert "greater than or equal to 0" in html(bad)
    assert ops.get(path, {"min_minutes": "-4"}).status_code == 200


# --- The audit log ---------------------------------------------------------------------------


def test_audit_log_filters_by_object_name_or_id(ops, console, operator):
    from apps.orchestration.services import drain_node

    node_a, node_b = console.nodes
    drain_node(node=node_a, operator=operator)
    drain_node(node=node_b, operator=operator)
    by_name = html(ops.get("/ops/audit/", {"target": "node-a", "action": "node."}))
    assert by_name.count("node.drained") == 1 and "node-a" in by_name
    by_id = html(ops.get("/ops/audit/", {"target": str(node_b.pk), "action": "node."}))
    assert "node-b" in by_id and "node-a" not in by_id
