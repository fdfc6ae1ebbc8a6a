"""The operator's page of a server's proposed catalog (apps/agents/catalog_views.py) and the use
case it calls (catalog.services.accept_catalog_proposal): accepted, the flavors and prices are
on sale in the server's region and a tenant's host of them lands on the server; proposed again,
they show as on sale; a bad row is a form error and nothing is written."""

import pytest
from django.urls import reverse

from apps.catalog.models import Flavor, FlavorFamily, Image, Price, PriceKind
from apps.catalog.services import (
    ImageToOffer,
    ServerRoom,
    accept_catalog_proposal,
)
from apps.core.models import AuditEvent
from apps.orchestration.models import Allocation
from apps.orchestration.services import plan_placement
from apps.orders.models import Instance
from apps.orders.services import HostRequest, quote, submit_create
from tests.agents.conftest import SSH_KEY
from tests.factories import (
    AcceleratorModelFactory,
    ImageFactory,
    ParkFactory,
    ParkOperatorFactory,
    UserFactory,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

FAMILY = "h200-sxm-1c7g"


@pytest.fixture(autouse=True)
def english_pages(client):
    client.cookies["django_language"] = "en"


@pytest.fixture
def small(agent_world):
    """small-01: two cards, 4 CPUs, 16 GB; the park's a1 flavors (8 vCPU / 64 GB per card)
    do not fit it."""
    server, _credential = agent_world.enrol(
        "small-01", cards=2, cpu_count=4, memory_total_mib=16384
    )
    return server


def url(park, server) -> str:
    return reverse("agents_ops:server_catalog", args=[park.pk, server.pk])


def form_data(**changes) -> dict:
    """What the page posts when the operator accepts the proposal as it is."""
    data = {
        "family_code": FAMILY,
        "family_name": f"NVIDIA H200 SXM · {FAMILY}",
        "flavors-TOTAL_FORMS": "2",
        "flavors-INITIAL_FORMS": "2",
        "flavors-MIN_NUM_FORMS": "0",
        "flavors-MAX_NUM_FORMS": "64",
        "images-TOTAL_FORMS": "0",
        "images-INITIAL_FORMS": "0",
        "images-MIN_NUM_FORMS": "0",
        "images-MAX_NUM_FORMS": "64",
    }
    for index, (count, vcpu, ram, price) in enumerate(((1, 1, 7, "10.00"), (2, 3, 14, "20.00"))):
        data.update(
            {
                f"flavors-{index}-include": "on",
                f"flavors-{index}-code": f"{FAMILY}.{count}x",
                f"flavors-{index}-accelerator_count": str(count),
                f"flavors-{index}-vcpu": str(vcpu),
                f"flavors-{index}-ram_gb": str(ram),
                f"flavors-{index}-system_disk_gb": "100",
                f"flavors-{index}-price": price,
            }
        )
    data.update(changes)
    return data


def test_the_server_list_links_each_server_to_its_proposal(client, agent_world, small):
    client.force_login(agent_world.operator)
    page = client.get(reverse("agents_ops:server_list", args=[agent_world.park.pk]))
    assert url(agent_world.park, small) in page.content.decode()


def test_the_page_proposes_flavors_that_fit_prefilled(client, agent_world, small):
    client.force_login(agent_world.operator)
    page = client.get(url(agent_world.park, small))
    assert page.status_code == 200
    html = page.content.decode()
    flavors = page.context["flavor_forms"]
    assert [form.initial["code"] for form in flavors.forms] == [f"{FAMILY}.1x", f"{FAMILY}.2x"]
    assert [str(form.initial["price"]) for form in flavors.forms] == ["10", "20"]
    assert page.context["image_forms"].forms == []  # debian-12 runs on H200 already
    assert 'data-code="debian-12"' in html
    assert "Propose catalog" in html


def test_accepting_puts_the_server_on_sale_and_a_tenants_host_lands_on_it(
    client, agent_world, small, owner
):
    park, region = agent_world.park, agent_world.region
    # Before: the park's only flavors ask more than the server has.
    assert plan_placement(park=park, flavor=agent_world.flavors[1]).ranked == ()
    client.force_login(agent_world.operator)
    response = client.post(url(park, small), form_data())
    assert response.status_code == 302, response.content.decode()[:3000]
    family = FlavorFamily.objects.get(park=park, code=FAMILY)
    assert family.accelerator_model == agent_world.model
    flavors = {f.accelerator_count: f for f in family.flavors.all()}
    assert {(c, f.code, f.vcpu, f.ram_gb, f.system_disk_gb) for c, f in flavors.items()} == {
        (1, f"{FAMILY}.1x", 1, 7, 100),
        (2, f"{FAMILY}.2x", 3, 14, 100),
    }
    prices = Price.objects.filter(flavor__family=family, kind=PriceKind.FLAVOR_HOUR)
    assert {(p.flavor.accelerator_count, p.region, p.amount_minor) for p in prices} == {
        (1, region, 1000),
        (2, region, 2000),
    }
    actions = set(
        AuditEvent.objects.filter(park_id=park.pk, actor=agent_world.operator).values_list(
            "action", flat=True
        )
    )
    assert {"catalog.family_created", "catalog.flavor_created", "catalog.price_scheduled"} <= (
        actions
    )
    event = AuditEvent.objects.filter(action="catalog.flavor_created").first()
    assert event.data["server"] == small.public_id

    # A tenant's quote and order of the new flavor fit, on small-01's node.
    request = HostRequest(
        flavor=flavors[2],
        image=agent_world.image,
        region=None,
        system_disk_gb=100,
        ssh_public_key=SSH_KEY,
        name="fits",
    )
    plan = plan_placement(park=park, flavor=flavors[2])
    assert [view.node.pk for view in plan.ranked] == [small.node_id]
    quoted = quote(organization=agent_world.organization, request=request)
    assert (quoted.region, quoted.flavor_hourly_minor) == (region, 2000)
    (order,) = submit_create(organization=agent_world.organization, actor=owner, request=request)
    instance = Instance.objects.get(pk=order.instance_id)
    allocation = Allocation.objects.get(workload__instance=instance, released_at__isnull=True)
    assert allocation.node_id == small.node_id
    assert allocation.accelerators.count() == 2


def test_proposing_again_shows_what_was_accepted_as_on_sale(client, agent_world, small):
    client.force_login(agent_world.operator)
    assert client.post(url(agent_world.park, small), form_data()).status_code == 302
    page = client.get(url(agent_world.park, small))
    assert page.status_code == 200
    assert [f.code for f in page.context["on_sale"]] == [f"{FAMILY}.1x", f"{FAMILY}.2x"]
    assert page.context["flavor_pairs"] == []
    assert 'id="nothing-to-accept"' in page.content.decode()
    # Posting the old form again creates nothing twice.
    again = client.post(url(agent_world.park, small), form_data())
    assert again.status_code == 422
    assert FlavorFamily.objects.filter(code=FAMILY).count() == 1
    assert Flavor.objects.filter(family__code=FAMILY).count() == 2


def test_an_image_the_park_lacks_is_created_for_the_cards(client, agent_world, small):
    Image.objects.filter(pk=agent_world.image.pk).update(code="ubuntu")
    client.force_login(agent_world.operator)
    page = client.get(url(agent_world.park, small))
    (form,) = page.context["image_forms"].forms
    assert (form.initial["code"], form.initial["name"]) == (
        "debian-12",
        "Debian 12 (bookworm) · Python 3.11",
    )
    assert 'id="default-image-note"' in page.content.decode()
    data = form_data(
        **{
            "images-TOTAL_FORMS": "1",
            "images-INITIAL_FORMS": "1",
            "images-0-include": "on",
            "images-0-code": "debian-12",
            "images-0-name": "Debian 12 (bookworm)",
        }
    )
    assert client.post(url(agent_world.park, small), data).status_code == 302
    image = Image.objects.get(park=agent_world.park, code="debian-12")
    assert list(image.compatible_accelerators.all()) == [agent_world.model]
    assert (image.os, image.software_stack) == ("Debian 12", agent_world.model.software_stack)


def test_an_image_of_the_cards_stack_is_made_to_run_on_them(agent_world, small):
    other = AcceleratorModelFactory(slug="l40s", software_stack=agent_world.model.software_stack)
    debian = ImageFactory(park=agent_world.park, code="debian-13", compatible_accelerators=[other])
    accept_catalog_proposal(
        park=agent_world.park,
        operator=agent_world.operator,
        region=agent_world.region,
        accelerator_model=agent_world.model,
        family_code="a1",
        family_name="A1",
        room=ServerRoom(accelerators=2, vcpu=4, ram_gb=16),
        flavors=[],
        images=[ImageToOffer(code="debian-13", name="x", os="x", stack_version="x")],
    )
    assert set(debian.compatible_accelerators.all()) == {other, agent_world.model}
    assert AuditEvent.objects.filter(action="catalog.image_extended").count() == 1


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"flavors-1-price": ""}, "price", "above zero"),
        ({"flavors-1-price": "0"}, "price", "above zero"),
        ({"flavors-1-price": "-5"}, "price", "greater than or equal to 0"),
        ({"flavors-1-vcpu": "5"}, "vcpu", "does not fit the server"),
        ({"flavors-1-ram_gb": "17"}, "ram_gb", "does not fit the server"),
        ({"flavors-1-accelerator_count": "4"}, "accelerator_count", "does not fit the server"),
        ({"flavors-1-code": "a1.1x"}, "code", "has a flavor a1.1x already"),
        ({"flavors-1-code": f"{FAMILY}.1x"}, "code", "Two flavors"),
        ({"flavors-1-code": "Not A Code!"}, "code", "Lowercase letters"),
        ({"flavors-1-accelerator_count": "1"}, "accelerator_count", "of 1 accelerators"),
        ({"flavors-1-vcpu": "many"}, "vcpu", "whole number"),
        ({"flavors-1-system_disk_gb": "5"}, "system_disk_gb", "greater than or equal to 20"),
    ],
)
def test_a_bad_row_is_a_form_error_and_nothing_is_written(
    client, agent_world, small, changes, field, message
):
    client.force_login(agent_world.operator)
    response = client.post(url(agent_world.park, small), form_data(**changes))
    assert response.status_code == 422
    form = response.context["flavor_forms"].forms[1]
    assert message in " ".join(form.errors.get(field, [])), form.errors
    assert not FlavorFamily.objects.filter(code=FAMILY).exists()
    assert not Price.objects.filter(flavor__family__code=FAMILY).exists()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"family_code": "a1"}, "The family has a flavor of 1 accelerators"),
        ({"family_code": "not a slug"}, "valid"),
    ],
)
def test_a_bad_family_is_a_form_error(client, agent_world, small, changes, message):
    other = AcceleratorModelFactory(slug="other-model")
    agent_world.park.flavor_families.create(code="taken", name="T", accelerator_model=other)
    client.force_login(agent_world.operator)
    response = client.post(url(agent_world.park, small), form_data(**changes))
    assert response.status_code == 422
    errors = response.context["family_form"].errors
    assert message in str(errors) or message in str(response.context["flavor_forms"].errors)
    response = client.post(url(agent_world.park, small), form_data(family_code="taken"))
    assert response.status_code == 422
    assert "sells another accelerator" in str(response.context["family_form"].errors)
    assert not Flavor.objects.filter(family__code__in=["taken", FAMILY]).exists()


def test_leaving_every_row_out_is_refused(client, agent_world, small):
    client.force_login(agent_world.operator)
    data = form_data()
    del data["flavors-0-include"], data["flavors-1-include"]
    response = client.post(url(agent_world.park, small), data)
    assert response.status_code == 422
    assert "at least one" in str(response.context["family_form"].non_field_errors())


@pytest.mark.parametrize(
    "changes",
    [
        {"flavors-TOTAL_FORMS": "3"},
        {"flavors-TOTAL_FORMS": "1"},
        {"flavors-TOTAL_FORMS": "x"},
        {"images-TOTAL_FORMS": "5000"},
    ],
)
def test_a_tampered_formset_is_a_form_error(client, agent_world, small, changes):
    client.force_login(agent_world.operator)
    data = form_data(**changes)
    if changes.get("flavors-TOTAL_FORMS") == "x":
        del data["images-TOTAL_FORMS"]
    response = client.post(url(agent_world.park, small), data)
    assert response.status_code == 422
    assert not FlavorFamily.objects.filter(code=FAMILY).exists()


def test_a_server_without_cards_is_proposed_nothing(client, agent_world):
    server, _credential = agent_world.enrol("cpu-only", cards=0)
    client.force_login(agent_world.operator)
    page = client.get(url(agent_world.park, server))
    assert page.status_code == 200
    assert 'id="no-cards"' in page.content.decode()


@pytest.mark.parametrize("who", ["other_operator", "owner", "member", "anonymous"])
def test_only_the_parks_operators_see_its_servers_proposals(
    client, agent_world, small, who, owner, member
):
    other_park = ParkFactory()
    users = {
        "owner": owner,
        "member": member,
        "other_operator": ParkOperatorFactory(park=other_park, user=UserFactory()).user,
    }
    if who != "anonymous":
        client.force_login(users[who])
    for method in ("get", "post"):
        response = getattr(client, method)(url(agent_world.park, small), form_data())
        expected = {"other_operator": (404,), "anonymous": (302,)}.get(who, (403,))
        assert response.status_code in expected
        if who == "other_operator":
            # Its own park's number with this server: still not its server.
            mine = reverse("agents_ops:server_catalog", args=[other_park.pk, small.pk])
            assert getattr(client, method)(mine, form_data()).status_code == 404
    assert not FlavorFamily.objects.filter(code=FAMILY).exists()


def test_an_unknown_server_is_a_404(client, agent_world, small):
    client.force_login(agent_world.operator)
    missing = reverse("agents_ops:server_catalog", args=[agent_world.park.pk, small.pk + 1000])
    assert client.get(missing).status_code == 404
