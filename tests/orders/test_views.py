"""The tenant's order pages and the operator's approval pages, through the test client.

The world is the demo park (`seed_demo`, its backend made instant): six families of
1/2/4/8-accelerator flavors with their own software stacks, four regions, the demo enterprise
(verified) with its owner, and the park's operator. Provisioning and operation tasks run after
the request's transaction commits; `submit`/`act` capture those callbacks and run them (Celery
is eager), as a worker would right after the response.

Demo prices: a flavor costs its list price per card × count × the region level's factor, cloud
disk ¥0.35 per GB-month and bandwidth ¥23 per Mbps-month (both per 720 h).
"""

import base64
import io
import re
import struct
import uuid
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone, translation

from apps.billing.models import Meter, Wallet
from apps.billing.selectors import instance_cost
from apps.catalog.models import Flavor
from apps.core.money import format_money
from apps.operations import demo
from apps.orchestration.models import Accelerator, Backend, Node
from apps.orchestration.services import drain_node
from apps.orders import services
from apps.orders.forms import InstanceOrderForm
from apps.orders.models import (
    ApprovalPolicy,
    Instance,
    InstanceState,
    Order,
    OrderKind,
    OrderState,
    fingerprint,
)
from apps.orders.services import HostRequest, fail_instance
from apps.orders.validation import validate_hostname, validate_ssh_public_key
from apps.quotas.models import QuotaResource
from apps.tenants.models import Membership, Organization, Park, Role, VerificationState
from tests.agents.conftest import HOST_KEY
from tests.factories import (
    InstanceFactory,
    MembershipFactory,
    OrderFactory,
    OrganizationFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def ed25519_key(seed: int = 0, comment: str = "tester@laptop") -> str:
    """A well-formed OpenSSH ed25519 public key line."""
    blob = (
        struct.pack(">I", 11)
        + b"ssh-ed25519"
        + struct.pack(">I", 32)
        + bytes((seed + i) % 256 for i in range(32))
    )
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


SSH_KEY = ed25519_key()
CUDA, CANN, DTK, NEUWARE = (
    "ubuntu2204-cuda124",
    "openeuler2203-cann80",
    "kylin-v10-dtk2404",
    "ubuntu2004-neuware3",
)
DISK_GB_MONTH = demo.DISK_GB_MONTH_MINOR  # 35 fen
BANDWIDTH_MBPS_MONTH = demo.BANDWIDTH_MBPS_MONTH_MINOR  # 2300 fen


# --- The world -------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def english_pages(client):
    client.cookies["django_language"] = "en"


@pytest.fixture
def demo_park(db, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", "--no-life", stdout=io.StringIO())
    Backend.objects.update(config={})  # the simulator answers at once
    return Park.objects.get(slug=demo.PARK["slug"])


@pytest.fixture
def demo_org(demo_park):
    return Organization.objects.get(park=demo_park, slug=demo.ENTERPRISE["slug"])


@pytest.fixture
def demo_owner(demo_org):
    return Membership.objects.get(organization=demo_org, role=Role.OWNER).user


@pytest.fixture
def demo_operator(demo_park):
    return demo_park.operators.get().user


@pytest.fixture
def tenant(client, demo_owner):
    client.force_login(demo_owner)
    return client


@pytest.fixture
def demo_member(demo_org):
    """demo_member(role) -> a new user with that role in the demo enterprise."""

    def make(role):
        user = UserFactory()
        MembershipFactory(organization=demo_org, user=user, role=role)
        return user

    return make


@pytest.fixture
def submit(client, django_capture_on_commit_callbacks):
    """submit(**fields) POSTs the order form (valid defaults: one h200.1x in Shanghai) and runs
    what the request scheduled once it committed."""

    def post(*, follow=False, **fields):
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post("/instances/new/", order_data(**fields))
        if follow and response.status_code == 302:
            return client.get(response["Location"])
        return response

    return post


@pytest.fixture
def act(client, django_capture_on_commit_callbacks):
    """act(instance, kind, **fields) POSTs an operation, runs its task, and (unless
    follow=False) returns the page it redirects to, as the browser then shows it."""

    def post(instance, kind, *, follow=True, **fields):
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(f"/instances/{instance.pk}/actions/{kind}/", fields)
        if not follow:
            return response
        assert response.status_code == 302, response.status_code
        assert response["Location"] == f"/instances/{instance.pk}/"
        return client.get(response["Location"])

    return post


@pytest.fixture
def running(tenant, submit):
    """running(**fields) -> a running demo instance ordered through the form."""

    def make(**fields) -> Instance:
        response = submit(**fields)
        assert response.status_code == 302, html_of(response)
        instance = Instance.objects.get(pk=instance_id_of(response))
        assert instance.state == "running", instance.error_message
        tenant.get(response["Location"])  # as the browser does: the "ordered" message is shown
        return instance

    return make


def order_data(**fields) -> dict:
    values = {
        "flavor": "h200.1x",
        "image": CUDA,
        "region": "sh-center",
        "name": "gpu-host",
        "system_disk_gb": 100,
        "data_disk_gb": 0,
        "bandwidth_mbps": 10,
        "count": 1,
        "ssh_public_key": SSH_KEY,
        "idempotency_key": uuid.uuid4().hex,
    }
    values.update(fields)
    return {k: v for k, v in values.items() if v is not None}


def text_of(markup: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", markup)).strip()


def html_of(response) -> str:
    return response.content.decode()


def instance_id_of(response) -> int:
    match = re.fullmatch(r"/instances/(\d+)/", response["Location"])
    assert match, response["Location"]
    return int(match.group(1))


def select_options(html: str, name: str) -> list[str]:
    match = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, re.S)
    assert match, name
    return re.findall(r'<option value="([^"]*)"', match.group(1))


def messages_of(response, level: str | None = None) -> list[str]:
    """The flash messages the page shows; `level` ("success", "info", "warning", "error")
    keeps those of one kind. Wording is the app's to change, so tests mostly check the kind
    and the facts a message names."""
    if not response.context:
        return []
    return [str(m) for m in response.context["messages"] if level is None or m.level_tag == level]


def english(text) -> str:
    with translation.override("en"):
        return str(text)


def label(form_class, field: str) -> str:
    return english(form_class.base_fields[field].label)


def refusal(check, value) -> str:
    """The message a validator gives for `value`."""
    with translation.override("en"), pytest.raises(ValidationError) as excinfo:
        check(value)
    return excinfo.value.messages[0]


def state_of(html: str) -> str:
    match = re.search(r'class="badge state-badge[^"]*" data-state="(\w+)"', html)
    assert match, "no state badge"
    return match.group(1)


# --- The order form --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flavor", "images"),
    [
        ("h200.1x", ["debian-12", "pytorch", CUDA]),
        ("a100.8x", ["debian-12", "pytorch", CUDA]),
        ("l40s.2x", ["debian-12", "pytorch", CUDA]),
        ("ascend910b.1x", [CANN]),
        ("k100ai.4x", [DTK]),
        ("mlu370x8.1x", [NEUWARE]),
    ],
)
def test_order_page_offers_only_compatible_images(tenant, flavor, images):
    response = tenant.get("/instances/new/", {"flavor": flavor})

    assert response.status_code == 200
    html = html_of(response)
    assert select_options(html, "image") == images
    assert re.search(rf'<option value="{re.escape(flavor)}" selected>', html)
    assert 'name="system_disk_gb" value="100"' in html
    assert 'id="order-form-wrapper"' in html  # the full page


def test_order_page_for_htmx_is_the_form_alone(tenant):
    """Choosing another flavor re-renders only the form, with that flavor's images."""
    response = tenant.get("/instances/new/", {"flavor": "ascend910b.2x"}, HTTP_HX_REQUEST="true")

    html = html_of(response)
    assert "<html" not in html
    assert 'id="order-form"' in html
    assert select_options(html, "image") == [CANN]


def test_order_page_offers_the_parks_flavors_and_regions(tenant):
    html = html_of(tenant.get("/instances/new/"))

    flavors = select_options(html, "flavor")
    assert len(flavors) == 24 and "h200.8x" in flavors and "mlu370x8.1x" in flavors
    assert set(select_options(html, "region")) == {
        "",  # let the scheduler choose
        "js-nanjing",
        "js-suzhou-edge",
        "sh-center",
        "zj-hangzhou",
    }


def test_viewer_may_not_order(client, demo_member, submit):
    client.force_login(demo_member("viewer"))

    assert client.get("/instances/new/").status_code == 403
    assert client.post("/instances/quote/", order_data()).status_code == 403
    assert submit().status_code == 403
    assert not Instance.objects.exists()


def test_billing_role_may_not_order_but_a_member_may(client, demo_member):
    client.force_login(demo_member("billing"))
    assert client.get("/instances/new/").status_code == 403

    client.force_login(demo_member("member"))
    assert client.get("/instances/new/").status_code == 200


def test_visitor_is_sent_to_log_in(client, demo_park):
    response = client.get("/instances/new/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/instances/new/")


# --- The live quote --------------------------------------------------------------------------


def quote(client, **fields):
    response = client.post("/instances/quote/", order_data(**fields))
    assert response.status_code == 200
    return html_of(response)


def figures(html: str) -> dict:
    """The quote's figures: the itemised hour, the month, the second and where it runs."""
    block = re.search(r'<dl[^>]*id="quote-figures"[^>]*>(.*?)</dl>', html, re.S)
    assert block, html
    month, second, region = [
        text_of(v) for v in re.findall(r"<dd[^>]*>(.*?)</dd>", block.group(1), re.S)
    ]

    def cell(id_):
        return text_of(re.search(rf'id="{id_}">(.*?)</td>', html, re.S).group(1))

    return {
        "hour": cell("quote-hourly"),
        "compute": cell("quote-compute"),
        "disk": cell("quote-disk"),
        "bandwidth": cell("quote-bandwidth"),
        "month": month,
        "second": second,
        "region": region,
    }


def test_quote_gives_hour_second_month_and_region(tenant):
    html = quote(
        tenant, flavor="h200.1x", region="sh-center", data_disk_gb=200, bandwidth_mbps=10, count=2
    )

    # Per host: 3800 fen + 200 GB × 35 / 720 + 10 Mbps × 2300 / 720, for two hosts.
    hourly = 2 * (
        Decimal(3800)
        + Decimal(200 * DISK_GB_MONTH) / 720
        + Decimal(10 * BANDWIDTH_MBPS_MONTH) / 720
    )
    shown = figures(html)
    assert shown["hour"] == format_money(hourly, "CNY") == "¥76.83"  # to the fen
    assert shown["second"] == format_money(hourly / 3600, "CNY", places=4) == "¥0.0213"
    assert shown["month"] == format_money(hourly * 720, "CNY") == "¥55,320.00"
    assert shown["region"] == "上海算力中心 (Center)"
    # Itemised per host: compute, 200 GB of cloud disk, 10 Mbps; then × 2 hosts.
    assert shown["compute"] == "¥38.00"
    assert shown["disk"] == format_money(Decimal(200 * DISK_GB_MONTH) / 720, "CNY") == "¥0.10"
    assert shown["bandwidth"] == format_money(Decimal(10 * BANDWIDTH_MBPS_MONTH) / 720, "CNY")
    assert "× 2" in html
    assert 'id="quote-problems"' not in html


def test_quote_counts_system_disk_above_the_flavors_as_cloud_disk(tenant):
    html = quote(tenant, system_disk_gb=172, bandwidth_mbps=0)
    shown = figures(html)

    # 72 GB more than the flavor's 100 GB: 72 × 35 / 720 = 3.5 fen an hour, half up.
    assert shown["hour"] == "¥38.04"
    assert shown["disk"] == "¥0.04" and "(72 GB)" in html


def test_quote_without_a_region_lands_where_it_is_cheapest(tenant):
    shown = figures(quote(tenant, flavor="l40s.1x", region="", bandwidth_mbps=0))

    # Nanjing (province, ×0.92) beats the Suzhou edge (×1.15).
    assert shown["region"] == "江苏省节点 · 南京 (Province)"
    assert shown["hour"] == "¥8.28"


def test_quote_without_a_region_skips_a_full_region(tenant):
    Node.objects.filter(pool__region__code="js-nanjing").update(is_drained=True)

    shown = figures(quote(tenant, flavor="l40s.1x", region="", bandwidth_mbps=0))

    assert shown["region"] == "苏州工业园边缘站 (Edge)"
    assert shown["hour"] == "¥10.35"


def problems(html: str) -> list[str]:
    block = re.search(r'<ul[^>]*id="quote-problems">(.*?)</ul>', html, re.S)
    assert block, html
    return [re.sub(r"\s+", " ", p).strip() for p in re.findall(r"<li>(.*?)</li>", block.group(1))]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ssh_public_key", "not a key"),
        ("ssh_public_key", "ssh-ed25519"),
        ("ssh_public_key", "ssh-ed25519 AAAA!!!"),
        ("ssh_public_key", "ssh-rsa " + SSH_KEY.split()[1]),  # the blob says ed25519
        ("ssh_public_key", SSH_KEY + "\n" + ed25519_key(1)),
        ("name", "Bad_Name"),
        ("name", "-starts-with-a-hyphen"),
    ],
)
def test_quote_names_what_the_services_refuse(tenant, field, value):
    check = validate_ssh_public_key if field == "ssh_public_key" else validate_hostname

    html = quote(tenant, **{field: value})

    assert 'id="quote-figures"' in html  # the price does not depend on the name or the key
    assert problems(html) == [refusal(check, value)]


REQUIRED = "This field is required."
INVALID_CHOICE = "Select a valid choice. That choice is not one of the available choices."


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("name", "", REQUIRED),
        ("name", "x" * 61, "Ensure this value has at most 60 characters (it has 61)."),
        ("system_disk_gb", 10, "Ensure this value is greater than or equal to 20."),
        ("system_disk_gb", "lots", "Enter a whole number."),
        ("data_disk_gb", -1, "Ensure this value is greater than or equal to 0."),
        ("count", 11, "Ensure this value is less than or equal to 10."),
        ("count", 0, "Ensure this value is greater than or equal to 1."),
        ("image", CANN, INVALID_CHOICE),  # a CANN image for an H200 flavor
        ("flavor", "no-such.1x", INVALID_CHOICE),
        ("region", "atlantis", INVALID_CHOICE),
    ],
)
def test_quote_names_the_field_with_bad_input(tenant, field, value, error):
    html = quote(tenant, **{field: value})

    # Priced once the fields that set the price are right; the others are named below it.
    priced = field == "name"
    assert ('id="quote-figures"' in html) is priced
    assert f"{label(InstanceOrderForm, field)}: {error}" in problems(html)


def test_quote_asks_for_a_key_where_only_ssh_reaches_the_host(tenant):
    """The demo's pools are the simulator's, which no web terminal reaches."""
    html = quote(tenant, ssh_public_key="")

    assert 'id="quote-figures"' in html
    assert problems(html) == [
        "Hosts of this flavor are reached over SSH only: paste the public key you will log in with."
    ]


def test_quote_says_where_a_flavor_is_not_sold(tenant):
    (problem,) = problems(quote(tenant, flavor="l40s.1x", region="sh-center"))

    assert "l40s.1x" in problem and "上海算力中心" in problem


def test_quote_says_when_nothing_fits(tenant):
    Node.objects.filter(pool__accelerator_model__name="H200 SXM").update(is_drained=True)

    (problem,) = problems(quote(tenant, region=""))

    assert "h200.1x" in problem


def test_quote_is_post_only(tenant):
    assert tenant.get("/instances/quote/").status_code == 405


# --- Submitting ------------------------------------------------------------------------------


def test_submitting_creates_the_instance_and_redirects_to_it(tenant, submit, demo_org):
    response = submit(name="trainer-1", data_disk_gb=200, bandwidth_mbps=20)

    assert response.status_code == 302
    instance = Instance.objects.get(pk=instance_id_of(response))
    assert instance.organization == demo_org
    assert (instance.name, instance.flavor.code, instance.image.code) == (
        "trainer-1",
        "h200.1x",
        CUDA,
    )
    assert (instance.region.code, instance.data_disk_gb, instance.bandwidth_mbps) == (
        "sh-center",
        200,
        20,
    )
    assert instance.state == "running"
    order = instance.orders.get()
    assert (order.kind, order.state) == (OrderKind.CREATE, OrderState.DONE)
    assert Accelerator.objects.filter(allocation__workload__instance=instance).count() == 1

    page = tenant.get(response["Location"])
    assert messages_of(page, "success") and not messages_of(page, "error")
    html = html_of(page)
    assert state_of(html) == "running"
    assert re.search(r"ssh -p 22 root@198\.18\.\d+\.\d+", html)
    assert "h200.1x · 1 × NVIDIA H200 SXM" in html


def test_the_same_idempotency_key_creates_one_instance(tenant, submit):
    key = uuid.uuid4().hex

    first = submit(idempotency_key=key)
    second = submit(idempotency_key=key, name="other-name")

    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"]
    assert Instance.objects.count() == 1
    assert Order.objects.count() == 1
    assert Instance.objects.get().name == "gpu-host"


def test_several_hosts_at_once_go_to_the_list(tenant, submit):
    response = submit(count=3, name="worker")

    assert response.status_code == 302
    assert response["Location"] == "/instances/"
    assert sorted(Instance.objects.values_list("name", flat=True)) == [
        "worker-1",
        "worker-2",
        "worker-3",
    ]
    listing = html_of(tenant.get("/instances/"))
    assert listing.count('data-state="running"') == 3


def test_the_host_list_is_paged_newest_first_and_polls_its_own_page(tenant, submit, monkeypatch):
    monkeypatch.setattr("apps.orders.views.INSTANCES_PER_PAGE", 2)
    submit(count=3, name="worker")
    Instance.objects.filter(name="worker-3").update(state=InstanceState.PROVISIONING)

    first, second = html_of(tenant.get("/instances/")), html_of(tenant.get("/instances/?page=2"))

    assert re.findall(r">(worker-\d)</a>", first) == ["worker-3", "worker-2"]
    assert re.findall(r">(worker-\d)</a>", second) == ["worker-1"]
    assert "Page 1 of 2" in first and 'href="?&page=2"' in first
    # A host being made polls the page it is on; a page of running hosts does not poll.
    assert 'hx-get="/instances/?page=1" hx-trigger="every 2s"' in first
    assert 'hx-trigger="every 2s"' not in second


def test_the_host_list_hides_released_hosts_unless_asked_and_filters_by_region(
    tenant, submit, act, demo_park
):
    submit(count=2, name="kept")
    gone = Instance.objects.get(name="kept-2")
    act(gone, "release")
    other = demo_park.regions.exclude(code="sh-center").first()
    Instance.objects.filter(name="kept-1").update(region=other)

    def names(query=""):
        return re.findall(r">(kept-\d)</a>", html_of(tenant.get(f"/instances/{query}")))

    assert names() == ["kept-1"]
    assert names("?state=") == ["kept-2", "kept-1"]
    assert names("?state=released") == ["kept-2"]
    assert names(f"?state=&region={other.pk}") == ["kept-1"]
    assert names("?region=sh-center-is-not-an-id") == ["kept-1"]  # an invalid filter: ignored
    assert "No host matches these filters." in html_of(tenant.get("/instances/?state=error"))


def row_of(html: str, instance) -> str:
    return html[html.index(f'data-instance="{instance.pk}"') :].split("</tr>")[0]


def test_each_host_row_has_its_actions_and_they_come_back_to_the_filtered_list(
    tenant, running, django_capture_on_commit_callbacks
):
    host = running(name="row-a")
    other = running(name="row-b")
    listing = "/instances/?state=active&page=1"

    row = row_of(html_of(tenant.get(listing)), host)
    assert 'data-action="stop"' in row and 'data-action="release"' in row
    assert 'data-action="start"' not in row
    assert host.ssh_command and f">{host.ssh_command}</code>" in row
    assert 'name="next" value="/instances/?state=active&amp;page=1"' in row

    with django_capture_on_commit_callbacks(execute=True):
        response = tenant.post(
            f"/instances/{host.pk}/actions/stop/", {"next": "/instances/?state=active&page=1"}
        )
    assert response.status_code == 302 and response["Location"] == listing
    host.refresh_from_db()
    assert host.state == "stopped"

    page = html_of(tenant.get(listing))
    row = row_of(page, host)
    assert 'data-action="start"' in row and 'data-action="stop"' not in row
    assert host.ssh_command not in row and "Start it to log in" in row  # no SSH line while stopped
    assert 'data-action="stop"' in row_of(page, other)


def test_a_row_action_never_returns_off_the_site(tenant, running):
    host = running(name="row-c")

    response = tenant.post(
        f"/instances/{host.pk}/actions/stop/", {"next": "https://evil.example/instances/"}
    )

    assert response["Location"] == f"/instances/{host.pk}/"


def test_a_viewer_sees_no_row_actions(client, running, demo_org):
    from tests.factories import MembershipFactory, UserFactory

    host = running(name="row-d")
    viewer = UserFactory()
    MembershipFactory(organization=demo_org, user=viewer, role="viewer")
    client.force_login(viewer)

    row = row_of(html_of(client.get("/instances/")), host)

    assert "data-action=" not in row


def field_errors(html: str) -> list[str]:
    return re.findall(r'<div class="invalid-feedback d-block">(.*?)</div>', html, re.S)


def test_bad_input_is_422_with_field_errors(tenant, submit):
    response = submit(name="Bad Name!", ssh_public_key="ssh-rsa AAAA", system_disk_gb=10)

    assert response.status_code == 422
    html = html_of(response)
    assert "Ensure this value is greater than or equal to 20." in field_errors(html)
    assert 'id="order-form"' in html
    assert not Instance.objects.exists()


def input_tag(html: str, name: str, element: str = "input") -> str:
    match = re.search(rf'<{element}[^>]*name="{name}"[^>]*>', html)
    assert match, name
    return match.group(0)


def test_service_checks_land_on_their_fields(tenant, submit):
    response = submit(name="Bad_Name", ssh_public_key="ssh-ed25519 AAAA")

    assert response.status_code == 422
    errors = " ".join(field_errors(html_of(response)))
    assert "Use 1–63 lowercase letters" in errors
    assert "The key data is not valid base64 of an SSH key" in errors
    assert "is-invalid" in input_tag(html_of(response), "name")
    assert "is-invalid" in input_tag(html_of(response), "ssh_public_key", element="textarea")
    assert not Instance.objects.exists()


def test_an_incompatible_image_is_refused(tenant, submit):
    response = submit(flavor="ascend910b.1x", image=CUDA, region="js-nanjing")

    assert response.status_code == 422
    assert any("Select a valid choice" in e for e in field_errors(html_of(response)))
    assert not Instance.objects.exists()


def test_an_order_over_quota_is_422_with_the_reason(tenant, submit):
    # 3 × 8 H200 cards > the demo enterprise's 16 accelerators.
    response = submit(flavor="h200.8x", count=3)

    assert response.status_code == 422
    html = html_of(response)
    alert = re.search(r'<div class="alert alert-danger" role="alert">(.*?)</div>', html, re.S)
    assert alert, "no form-wide error"
    assert "24" in alert.group(1) and "16" in alert.group(1)  # asked for, and the limit
    assert not Instance.objects.exists()


def test_htmx_submit_with_errors_returns_the_form_alone(tenant):
    response = tenant.post("/instances/new/", order_data(name="Bad Name!"), HTTP_HX_REQUEST="true")

    assert response.status_code == 422
    html = html_of(response)
    assert "<html" not in html
    assert 'id="order-form"' in html


# --- The instance page -----------------------------------------------------------------------


def test_instance_page_shows_the_ssh_command_once_running(tenant, running):
    instance = running()

    html = html_of(tenant.get(f"/instances/{instance.pk}/"))

    address = instance.access["address"]
    assert f"ssh -p 22 root@{address}" in html
    assert html.count('id="ssh-command"') == 1
    assert state_of(html) == "running"
    assert 'hx-trigger="every 2s"' not in html
    assert 'id="instance-actions"' in html


def test_instance_page_shows_the_fingerprints_of_the_keys_its_backend_read(tenant, running):
    instance = running()
    assert 'id="ssh-host-keys"' not in html_of(tenant.get(f"/instances/{instance.pk}/"))
    access = {**instance.access, "ssh_host_keys": [HOST_KEY]}
    Instance.objects.filter(pk=instance.pk).update(access=access)

    html = html_of(tenant.get(f"/instances/{instance.pk}/"))

    assert 'id="ssh-host-keys"' in html
    assert fingerprint(HOST_KEY).startswith("ED25519 SHA256:") and fingerprint(HOST_KEY) in html


def test_a_stopped_hosts_page_hides_its_ssh_command(tenant, running, act):
    instance = running()

    html = html_of(act(instance, "stop"))

    assert state_of(html) == "stopped"
    assert 'id="ssh-command"' not in html
    assert "Stopped: start it to connect over SSH." in html


def provisioning_instance(organization) -> Instance:
    """A demo h200.1x whose backend has not answered yet."""
    flavor = Flavor.objects.get(family__park=organization.park, code="h200.1x")
    return InstanceFactory(
        organization=organization,
        flavor=flavor,
        image=flavor.family.accelerator_model.images.get(code=CUDA),
        region=flavor.prices.get().region,
        state="provisioning",
    )


def test_busy_instance_page_polls_and_has_no_ssh_command(tenant, demo_org):
    instance = provisioning_instance(demo_org)

    html = html_of(tenant.get(f"/instances/{instance.pk}/"))

    assert state_of(html) == "provisioning"
    assert 'id="ssh-command"' not in html
    assert 'id="instance-actions"' not in html
    assert f'hx-get="/instances/{instance.pk}/" hx-trigger="every 2s"' in html


def test_htmx_instance_page_is_the_status_partial(tenant, running, demo_org):
    busy = provisioning_instance(demo_org)
    done = running()

    busy_html = html_of(tenant.get(f"/instances/{busy.pk}/", HTTP_HX_REQUEST="true"))
    done_html = html_of(tenant.get(f"/instances/{done.pk}/", HTTP_HX_REQUEST="true"))

    for html in (busy_html, done_html):
        assert "<html" not in html
        assert "<nav" not in html
        assert 'class="breadcrumb"' not in html
        assert 'id="instance-facts"' in html
    assert 'hx-trigger="every 2s"' in busy_html
    assert 'hx-trigger="every 2s"' not in done_html
    assert state_of(busy_html) == "provisioning"
    assert state_of(done_html) == "running"
    assert "ssh -p 22 root@" in done_html


def test_another_organizations_instance_is_404(tenant, organization):
    elsewhere = InstanceFactory(organization=organization, running=True)

    assert tenant.get(f"/instances/{elsewhere.pk}/").status_code == 404
    assert tenant.post(f"/instances/{elsewhere.pk}/actions/stop/").status_code == 404
    assert tenant.post(f"/instances/{elsewhere.pk}/actions/release/").status_code == 404
    elsewhere.refresh_from_db()
    assert elsewhere.state == "running"


def test_unknown_instance_is_404(tenant, demo_org):
    assert tenant.get("/instances/999999/").status_code == 404


# --- Operations ------------------------------------------------------------------------------


def test_stop_and_start(tenant, running, act):
    instance = running()

    stopped = act(instance, "stop")

    assert stopped.status_code == 200
    assert messages_of(stopped, "success") and not messages_of(stopped, "error")
    instance.refresh_from_db()
    assert instance.state == "stopped"
    html = html_of(tenant.get(f"/instances/{instance.pk}/"))
    assert state_of(html) == "stopped"
    assert f"/instances/{instance.pk}/actions/start/" in html
    assert f"/instances/{instance.pk}/actions/stop/" not in html

    started = act(instance, "start")

    assert messages_of(started, "success") and not messages_of(started, "error")
    instance.refresh_from_db()
    assert instance.state == "running"


def test_resize_within_the_family(tenant, running, act, demo_org):
    instance = running()

    response = act(instance, "resize", flavor="h200.2x")

    assert messages_of(response, "success") and not messages_of(response, "error")
    instance.refresh_from_db()
    assert instance.flavor.code == "h200.2x"
    assert instance.state == "running"
    assert Accelerator.objects.filter(allocation__workload__instance=instance).count() == 2
    html = html_of(response)
    assert "h200.2x · 2 × NVIDIA H200 SXM" in html
    assert "h200.1x → h200.2x" in html  # the order's details


def test_resize_a_stopped_instance_keeps_it_stopped(tenant, running, act):
    instance = running()
    act(instance, "stop")

    act(instance, "resize", flavor="h200.4x")

    instance.refresh_from_db()
    assert (instance.flavor.code, instance.state) == ("h200.4x", "stopped")


def test_resize_to_another_family_is_refused_with_the_reason(tenant, running, act):
    instance = running()

    response = act(instance, "resize", flavor="a100.1x")

    (refused,) = messages_of(response, "error")
    # The reason names both sizes and the family the instance is bound to.
    assert "a100.1x" in refused and "h200.1x" in refused
    assert Flavor.objects.get(code="h200.1x").family.name in refused
    instance.refresh_from_db()
    assert (instance.flavor.code, instance.state) == ("h200.1x", "running")
    assert not instance.orders.filter(kind=OrderKind.RESIZE).exists()


def test_resize_to_an_unknown_size_is_refused(tenant, running, act):
    instance = running()

    response = act(instance, "resize", flavor="h200.3x")

    assert any("Select a valid choice" in m for m in messages_of(response))
    instance.refresh_from_db()
    assert instance.flavor.code == "h200.1x"


def test_expand_disk(tenant, running, act):
    instance = running(data_disk_gb=200)

    response = act(instance, "expand_disk", data_disk_gb=500)

    assert messages_of(response, "success") and not messages_of(response, "error")
    instance.refresh_from_db()
    assert instance.data_disk_gb == 500
    html = html_of(response)
    assert '<dd class="col-7" id="instance-disk">500 GB</dd>' in html
    assert "200 → 500" in html


def test_an_operation_under_way_shows_its_progress_and_the_page_polls_until_done(
    tenant, running, django_capture_on_commit_callbacks
):
    instance = running(data_disk_gb=200)
    with django_capture_on_commit_callbacks(execute=False) as jobs:
        tenant.post(f"/instances/{instance.pk}/actions/expand_disk/", {"data_disk_gb": 500})

    html = html_of(tenant.get(f"/instances/{instance.pk}/"))

    progress = re.search(r'id="operation-progress"[^>]*>(.*?)</div>', html, re.S).group(1)
    assert "Expand disk in progress: 200 → 500." in text_of(progress)
    assert f'hx-get="/instances/{instance.pk}/" hx-trigger="every 2s"' in html
    for job in jobs:
        job()
    done = html_of(tenant.get(f"/instances/{instance.pk}/"))
    assert 'id="operation-progress"' not in done and 'hx-trigger="every 2s"' not in done
    assert '<dd class="col-7" id="instance-disk">500 GB</dd>' in done


@pytest.mark.parametrize(
    ("size", "names"),
    [
        (100, "200 GB"),  # only grows, from the current size
        (200, "200 GB"),
        (40000, "32768 GB"),  # the largest cloud disk
        ("abc", "Enter a whole number."),
        (0, "Ensure this value is greater than or equal to 1."),
    ],
)
def test_shrinking_the_disk_is_refused(tenant, running, act, size, names):
    instance = running(data_disk_gb=200)

    response = act(instance, "expand_disk", data_disk_gb=size)

    (refused,) = messages_of(response, "error")
    assert names in refused
    assert not messages_of(response, "success")
    instance.refresh_from_db()
    assert instance.data_disk_gb == 200
    assert not instance.orders.filter(kind=OrderKind.EXPAND_DISK).exists()


def test_expanding_past_the_quota_is_refused(tenant, running, act):
    instance = running()

    response = act(instance, "expand_disk", data_disk_gb=20000)

    # 100 GB system disk + 20000 > the demo enterprise's 20000 GB of disk.
    (refused,) = messages_of(response, "error")
    assert english(QuotaResource.DISK_GB.label) in refused and "20,000" in refused
    instance.refresh_from_db()
    assert instance.data_disk_gb == 0


def test_set_bandwidth(tenant, running, act):
    instance = running(bandwidth_mbps=10)

    response = act(instance, "set_bandwidth", bandwidth_mbps=100)

    assert messages_of(response, "success") and not messages_of(response, "error")
    instance.refresh_from_db()
    assert instance.bandwidth_mbps == 100
    assert '<dd class="col-7" id="instance-bandwidth">100 Mbps</dd>' in html_of(response)

    same = act(instance, "set_bandwidth", bandwidth_mbps=100)
    assert messages_of(same, "error") and not messages_of(same, "success")


def test_release(tenant, running, act):
    instance = running()

    response = act(instance, "release")

    assert messages_of(response, "success") and not messages_of(response, "error")
    instance.refresh_from_db()
    assert instance.state == "released"
    assert instance.released_at is not None
    assert not Accelerator.objects.filter(allocation__workload__instance=instance).exists()
    html = html_of(response)
    assert state_of(html) == "released"
    assert 'id="ssh-command"' not in html
    assert 'id="instance-actions"' not in html

    again = act(instance, "release")
    (refused,) = messages_of(again, "error")
    assert "gpu-host" in refused and english(InstanceState.RELEASED.label) in refused


def test_an_operation_from_the_wrong_state_is_refused(tenant, running, act):
    instance = running()
    act(instance, "stop")

    response = act(instance, "stop")

    (refused,) = messages_of(response, "error")
    assert "gpu-host" in refused and english(InstanceState.STOPPED.label) in refused
    assert not messages_of(response, "success")


def test_unknown_operation_is_404(tenant, running):
    instance = running()

    assert tenant.post(f"/instances/{instance.pk}/actions/explode/").status_code == 404
    assert tenant.post(f"/instances/{instance.pk}/actions/create/").status_code == 404
    instance.refresh_from_db()
    assert instance.state == "running"


def test_operations_are_post_only(tenant, running):
    instance = running()

    assert tenant.get(f"/instances/{instance.pk}/actions/stop/").status_code == 405


def test_a_viewer_may_not_operate(client, running, demo_member, act):
    instance = running()
    client.force_login(demo_member("viewer"))

    assert act(instance, "stop", follow=False).status_code == 403
    html = html_of(client.get(f"/instances/{instance.pk}/"))
    assert "/actions/stop/" not in html
    assert "/actions/release/" not in html
    instance.refresh_from_db()
    assert instance.state == "running"


def test_the_same_operation_key_runs_once(tenant, running, act):
    instance = running(data_disk_gb=100)

    act(instance, "expand_disk", data_disk_gb=300, idempotency_key="disk-1")
    act(instance, "expand_disk", data_disk_gb=300, idempotency_key="disk-1")

    assert instance.orders.filter(kind=OrderKind.EXPAND_DISK).count() == 1


# --- Orders and quotas -----------------------------------------------------------------------


def test_order_list_shows_the_organizations_orders(tenant, running, act, organization):
    instance = running(name="listed-host")
    act(instance, "resize", flavor="h200.2x")
    OrderFactory(organization=organization)  # another organization's

    html = html_of(tenant.get("/orders/"))

    rows = re.findall(r"<tr><td>(\d+)</td><td>(\w[\w ]*)</td>", html)
    assert [kind for _pk, kind in rows] == ["Resize", "Create"]
    assert html.count("listed-host") == 2
    assert "¥38.32" in html  # the create order's hourly price: 3800 + 10 × 2300 / 720, rounded
    assert "Done" in html


def test_awaiting_order_can_be_cancelled(tenant, submit, demo_park):
    ApprovalPolicy.objects.create(park=demo_park, max_accelerators=1)

    response = submit(flavor="h200.2x", follow=True)

    assert messages_of(response, "info") and not messages_of(response, "success")
    order = Order.objects.get()
    assert order.state == OrderState.AWAITING_APPROVAL
    assert state_of(html_of(response)) == "pending"
    listing = html_of(tenant.get("/orders/"))
    assert f'action="/orders/{order.pk}/cancel/"' in listing
    assert "Awaiting approval" in listing
    page = html_of(tenant.get(f"/instances/{order.instance_id}/"))
    assert 'data-state="pending">Awaiting approval</span>' in page  # one name for one state
    assert 'id="awaiting-approval"' in page
    assert f'action="/orders/{order.pk}/cancel/"' in page

    cancelled = tenant.post(f"/orders/{order.pk}/cancel/", follow=True)

    assert cancelled.redirect_chain == [("/orders/", 302)]
    assert messages_of(cancelled, "success") and not messages_of(cancelled, "error")
    order.refresh_from_db()
    assert order.state == OrderState.CANCELLED
    assert order.instance.state == "released"
    assert f'action="/orders/{order.pk}/cancel/"' not in html_of(cancelled)

    again = tenant.post(f"/orders/{order.pk}/cancel/", follow=True)
    assert messages_of(again, "error") and not messages_of(again, "success")
    order.refresh_from_db()
    assert order.state == OrderState.CANCELLED


def test_a_done_order_has_no_cancel_button_and_cannot_be_cancelled(tenant, running):
    instance = running()
    order = instance.orders.get()

    assert f"/orders/{order.pk}/cancel/" not in html_of(tenant.get("/orders/"))
    response = tenant.post(f"/orders/{order.pk}/cancel/", follow=True)

    assert messages_of(response, "error") and not messages_of(response, "success")
    order.refresh_from_db()
    assert order.state == OrderState.DONE
    instance.refresh_from_db()
    assert instance.state == "running"


def test_another_organizations_order_cannot_be_cancelled(tenant, organization):
    order = OrderFactory(organization=organization, state=OrderState.AWAITING_APPROVAL)

    assert tenant.post(f"/orders/{order.pk}/cancel/").status_code == 404


def test_a_viewer_may_not_cancel(client, demo_member, submit, demo_park, tenant):
    ApprovalPolicy.objects.create(park=demo_park, max_accelerators=1)
    submit(flavor="h200.2x")
    order = Order.objects.get()
    client.force_login(demo_member("viewer"))

    assert "/cancel/" not in html_of(client.get("/orders/"))
    assert client.post(f"/orders/{order.pk}/cancel/").status_code == 403
    order.refresh_from_db()
    assert order.state == OrderState.AWAITING_APPROVAL


def quota_rows(html: str) -> dict[str, str]:
    """Resource -> "used / limit", as the quota page shows them."""
    labels = {english(choice.label): choice.value for choice in QuotaResource}
    pairs = re.findall(r'<span>([^<]+)</span><span class="num">([^<]+)</span>', html, re.S)
    return {labels.get(name, name): figures.strip() for name, figures in pairs}


def test_quota_page_shows_used_and_limit(tenant, running, act):
    empty = quota_rows(html_of(tenant.get("/org/quotas/")))
    assert empty == {
        "accelerators": "0 / 16",
        "compute_units": "0 / 60",
        "vcpu": "0 / 512",
        "ram_gb": "0 / 4,096",
        "disk_gb": "0 / 20,000",
        "instances": "0 / 10",
    }

    instance = running(flavor="h200.2x", data_disk_gb=200)
    rows = quota_rows(html_of(tenant.get("/org/quotas/")))

    assert rows["accelerators"] == "2 / 16"
    assert rows["vcpu"] == "48 / 512"
    assert rows["ram_gb"] == "480 / 4,096"
    assert rows["disk_gb"] == "300 / 20,000"  # 100 GB system disk + 200 GB cloud disk
    assert rows["instances"] == "1 / 10"
    used, limit = rows["compute_units"].split(" / ")
    assert (Decimal(used), limit) == (Decimal("19.78"), "60")  # 2 × 989 TFLOPS / 100

    act(instance, "release")
    rows = quota_rows(html_of(tenant.get("/org/quotas/")))
    assert rows["accelerators"] == "0 / 16"
    assert rows["instances"] == "0 / 10"


def test_quota_page_lists_a_per_model_limit(tenant, running, demo_park, demo_org):
    from apps.catalog.models import AcceleratorModel
    from apps.quotas.models import QuotaLimit

    h200 = AcceleratorModel.objects.get(name="H200 SXM")
    QuotaLimit.objects.create(
        park=demo_park,
        organization=demo_org,
        resource=QuotaResource.MODEL_ACCELERATORS,
        accelerator_model=h200,
        limit=4,
    )
    running(flavor="h200.2x")

    rows = quota_rows(html_of(tenant.get("/org/quotas/")))

    assert rows[str(h200)] == "2 / 4"


# --- The operator's approvals ----------------------------------------------------------------


@pytest.fixture
def waiting(tenant, submit, demo_park):
    """An h200.2x create order of the demo enterprise, waiting for the operators."""
    ApprovalPolicy.objects.create(park=demo_park, max_accelerators=1)
    response = submit(flavor="h200.2x", name="needs-ok")
    assert response.status_code == 302
    order = Order.objects.get(instance_id=instance_id_of(response))
    assert order.state == OrderState.AWAITING_APPROVAL
    return order


@pytest.fixture
def ops(client, demo_operator):
    client.force_login(demo_operator)
    return client


@pytest.fixture
def decide(ops, django_capture_on_commit_callbacks):
    def post(order, **fields):
        with django_capture_on_commit_callbacks(execute=True):
            return ops.post(f"/ops/orders/{order.pk}/decision/", fields, follow=True)

    return post


def test_operator_sees_the_waiting_orders(waiting, ops):
    response = ops.get("/ops/orders/")

    assert response.status_code == 200
    html = html_of(response)
    assert f'action="/ops/orders/{waiting.pk}/decision/"' in html
    assert "h200.2x" in html
    assert demo.ENTERPRISE["name"] in html
    assert "¥76.32" in html  # 7600 + 10 × 2300 / 720, rounded


def test_approving_provisions_the_host(waiting, decide):
    response = decide(waiting, decision="approve")

    assert response.redirect_chain == [("/ops/orders/", 302)]
    (decided,) = messages_of(response, "success")
    assert f"#{waiting.pk}" in decided
    waiting.refresh_from_db()
    assert waiting.state == OrderState.DONE
    assert waiting.decided_by is not None
    assert waiting.instance.state == "running"
    assert f"/ops/orders/{waiting.pk}/decision/" not in html_of(response)


def test_approving_without_capacity_fails_the_order_with_the_reason(waiting, decide):
    Node.objects.filter(pool__accelerator_model__name="H200 SXM").update(is_drained=True)

    response = decide(waiting, decision="approve")

    waiting.refresh_from_db()
    assert waiting.state == OrderState.FAILED
    assert waiting.reason
    assert messages_of(response, "warning") == [waiting.reason]
    assert waiting.instance.state == "released"


def test_rejecting_needs_a_reason_and_the_tenant_reads_it(waiting, decide, client, demo_owner):
    refused = decide(waiting, decision="reject", reason="  ")

    assert messages_of(refused, "error") and not messages_of(refused, "success")
    waiting.refresh_from_db()
    assert waiting.state == OrderState.AWAITING_APPROVAL

    response = decide(waiting, decision="reject", reason="Out of budget for H200 this month")

    (decided,) = messages_of(response, "success")
    assert f"#{waiting.pk}" in decided and english(OrderState.REJECTED.label) in decided
    waiting.refresh_from_db()
    assert waiting.state == OrderState.REJECTED
    assert waiting.reason == "Out of budget for H200 this month"
    assert waiting.instance.state == "released"

    client.force_login(demo_owner)
    assert "Out of budget for H200 this month" in html_of(client.get("/orders/"))


def test_an_unknown_decision_is_404(waiting, ops):
    assert ops.post(f"/ops/orders/{waiting.pk}/decision/", {"decision": "maybe"}).status_code == 404
    waiting.refresh_from_db()
    assert waiting.state == OrderState.AWAITING_APPROVAL


def test_another_parks_order_is_404_for_the_operator(ops, organization):
    order = OrderFactory(organization=organization, state=OrderState.AWAITING_APPROVAL)

    assert order.organization.park.slug != demo.PARK["slug"]
    assert ops.post(f"/ops/orders/{order.pk}/decision/", {"decision": "approve"}).status_code == 404
    assert f"/ops/orders/{order.pk}/decision/" not in html_of(ops.get("/ops/orders/"))
    order.refresh_from_db()
    assert order.state == OrderState.AWAITING_APPROVAL


def test_tenants_may_not_decide(waiting, tenant):
    assert tenant.get("/ops/orders/").status_code == 403
    assert (
        tenant.post(f"/ops/orders/{waiting.pk}/decision/", {"decision": "approve"}).status_code
        == 403
    )
    waiting.refresh_from_db()
    assert waiting.state == OrderState.AWAITING_APPROVAL


def test_decisions_are_post_only(waiting, ops):
    assert ops.get(f"/ops/orders/{waiting.pk}/decision/").status_code == 405


# --- The approval policy ---------------------------------------------------------------------


def test_approval_policy_page_shows_the_default(ops, demo_park):
    response = ops.get(f"/ops/parks/{demo_park.pk}/approval-policy/")

    assert response.status_code == 200
    html = html_of(response)
    assert re.search(r'name="unverified_needs_approval"[^>]*checked', html)
    assert re.search(r'<input type="number" name="max_accelerators"(?![^>]*value=)', html)


def test_saving_the_policy_changes_who_needs_approval(ops, demo_park, submit, client, demo_owner):
    url = f"/ops/parks/{demo_park.pk}/approval-policy/"

    saved = ops.post(url, {"max_accelerators": "1", "max_hourly_price": ""}, follow=True)

    assert saved.redirect_chain == [(url, 302)]
    assert messages_of(saved, "success")
    policy = ApprovalPolicy.objects.get(park=demo_park)
    assert (policy.unverified_needs_approval, policy.max_accelerators) == (False, 1)
    assert policy.max_hourly_minor is None
    assert re.search(r'name="max_accelerators" value="1"', html_of(saved))

    client.force_login(demo_owner)
    small, large = submit(flavor="h200.1x", name="small"), submit(flavor="h200.2x", name="large")
    states = dict(Order.objects.values_list("instance__name", "state"))
    assert states == {"small": OrderState.DONE, "large": OrderState.AWAITING_APPROVAL}
    assert small.status_code == large.status_code == 302


def test_the_hourly_price_threshold_is_in_yuan(ops, demo_park, submit, client, demo_owner):
    url = f"/ops/parks/{demo_park.pk}/approval-policy/"
    ops.post(url, {"unverified_needs_approval": "on", "max_hourly_price": "50.00"})
    assert ApprovalPolicy.objects.get(park=demo_park).max_hourly_minor == 5000

    client.force_login(demo_owner)
    submit(flavor="h200.1x", name="cheap")  # ¥38.32 an hour
    submit(flavor="h200.2x", name="dear")  # ¥76.32 an hour

    states = dict(Order.objects.values_list("instance__name", "state"))
    assert states == {"cheap": OrderState.DONE, "dear": OrderState.AWAITING_APPROVAL}


def test_unverified_organizations_wait_when_the_policy_says_so(
    client, demo_park, demo_org, submit, demo_owner, demo_operator
):
    Organization.objects.filter(pk=demo_org.pk).update(
        verification_state=VerificationState.UNVERIFIED
    )

    client.force_login(demo_owner)
    submit(name="first")  # the default policy: unverified organizations wait
    client.force_login(demo_operator)
    # What the browser sends with the box unticked and both limits empty: nobody waits.
    client.post(
        f"/ops/parks/{demo_park.pk}/approval-policy/",
        {"max_accelerators": "", "max_hourly_price": ""},
    )
    client.force_login(demo_owner)
    submit(name="second")

    states = dict(Order.objects.values_list("instance__name", "state"))
    assert states == {"first": OrderState.AWAITING_APPROVAL, "second": OrderState.DONE}


def test_invalid_policy_is_shown_again(ops, demo_park):
    url = f"/ops/parks/{demo_park.pk}/approval-policy/"

    response = ops.post(url, {"max_accelerators": "-1", "max_hourly_price": "abc"})

    assert response.status_code == 200
    html = html_of(response)
    assert "Ensure this value is greater than or equal to 0." in html
    assert "Enter a number." in html
    assert not ApprovalPolicy.objects.filter(park=demo_park).exists()


def test_another_parks_policy_is_404(ops, park):
    assert ops.get(f"/ops/parks/{park.pk}/approval-policy/").status_code == 404
    assert ops.post(f"/ops/parks/{park.pk}/approval-policy/", {}).status_code == 404
    assert not ApprovalPolicy.objects.filter(park=park).exists()


def test_tenants_may_not_see_the_policy(tenant, demo_park):
    assert tenant.get(f"/ops/parks/{demo_park.pk}/approval-policy/").status_code == 403


# --- The instance page: what it costs, resizing, failures, drained hosts ---------------------


def test_instance_page_shows_uptime_cost_so_far_and_the_locked_price(tenant, running):
    instance = running()
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Meter.objects.filter(workload__instance=instance).update(started_at=an_hour_ago)

    html = html_of(tenant.get(f"/instances/{instance.pk}/"))

    cost = instance_cost(instance)
    # An hour of h200.1x (¥38.00) and 10 Mbps (10 × ¥23 / 720 h), none of it metered yet.
    assert cost.so_far_minor == 3800 + round(Decimal(10 * BANDWIDTH_MBPS_MONTH) / 720)
    assert format_money(cost.so_far_minor, "CNY") in text_of(
        re.search(r'id="instance-cost">(.*?)</dd>', html, re.S).group(1)
    )
    assert "1\xa0hour" in re.search(r'id="instance-uptime">(.*?)</dd>', html, re.S).group(1)
    assert "¥38.00 per hour while running" in html
    assert "Bandwidth ¥23.00 per Mbps a month" in html


def test_a_stopped_host_is_not_running_and_costs_its_disk_alone(tenant, running, act):
    instance = running(data_disk_gb=200, bandwidth_mbps=0)

    html = html_of(act(instance, "stop"))

    assert "Not running" in re.search(r'id="instance-uptime">(.*?)</dd>', html, re.S).group(1)
    assert instance_cost(instance).hourly_minor == round(Decimal(200 * DISK_GB_MONTH) / 720)


def test_a_simulated_host_says_so_to_its_tenant_on_every_page(client, running, demo_operator):
    """A demo park's hosts do not exist: the tenant who ordered one is told on its page and in
    the list, not only the park's operators (they also see it beside the physical host)."""
    instance = running()
    detail = html_of(client.get(f"/instances/{instance.pk}/"))
    assert "this host is simulated and does not exist" in detail
    assert "badge-simulated" in html_of(client.get("/instances/"))

    MembershipFactory(organization=instance.organization, user=demo_operator, role=Role.MEMBER)
    client.force_login(demo_operator)
    html = html_of(client.get(f"/instances/{instance.pk}/"))
    assert html.count("badge-simulated") == 2


def test_resize_offers_the_family_alone_with_each_price_change(tenant, running):
    instance = running()

    html = html_of(tenant.get(f"/instances/{instance.pk}/"))

    assert select_options(html, "flavor") == ["h200.2x", "h200.4x", "h200.8x"]
    assert "h200.2x · 2 × H200 SXM · ¥76.00/h (+¥38.00)" in html
    assert "The host restarts to take the new size" in html


def test_a_failed_create_says_nothing_was_charged_and_offers_to_order_again(tenant, demo_org):
    instance = provisioning_instance(demo_org)
    Instance.objects.filter(pk=instance.pk).update(ssh_public_key=SSH_KEY, data_disk_gb=300)
    fail_instance(instance_id=instance.pk, message="no free H200 on the backend")
    instance.refresh_from_db()

    html = html_of(tenant.get(f"/instances/{instance.pk}/"))

    assert "This host could not be created." in html
    assert "Charged for it: ¥0.00." in html
    assert "no free H200 on the backend" in html
    assert f'href="/instances/new/?again={instance.pk}"' in html
    form = html_of(tenant.get(f"/instances/new/?again={instance.pk}"))
    assert f'value="{instance.name}"' in form
    assert SSH_KEY.split()[1] in form
    assert re.search(r'name="data_disk_gb" value="300"', form)


def test_ordering_again_ignores_another_organizations_host(tenant, demo_park):
    other = OrganizationFactory(park=demo_park)
    theirs = provisioning_instance(other)
    Instance.objects.filter(pk=theirs.pk).update(name="their-secret-host")

    form = html_of(tenant.get(f"/instances/new/?again={theirs.pk}"))

    assert "their-secret-host" not in form


def test_draining_a_node_mails_the_owners_of_its_hosts(
    running, demo_operator, demo_owner, mailoutbox, django_capture_on_commit_callbacks
):
    instance = running()
    mailoutbox.clear()

    with django_capture_on_commit_callbacks(execute=True):
        drain_node(node=instance.node, operator=demo_operator, reason="fan replacement")

    (mail,) = mailoutbox
    assert mail.to == [demo_owner.email]
    assert instance.name in mail.subject
    assert "fan replacement" in mail.body and instance.node.hostname in mail.body
    assert Instance.objects.get(pk=instance.pk).state == InstanceState.RUNNING


# --- The quote beside the form: funds, the first hour held, quota left ------------------------


def test_the_quote_shows_the_balance_and_what_ordering_holds(tenant, demo_org):
    Wallet.objects.filter(organization=demo_org).update(balance_minor=10_000_000)

    html = quote(tenant, flavor="h200.1x", region="sh-center", bandwidth_mbps=0, count=3)

    assert "¥100,000.00" in re.search(r'id="quote-balance">(.*?)<', html).group(1)
    # The first hour of each of the three hosts, each rounded to the fen as its order is.
    assert re.search(r'id="quote-hold">(.*?)<', html).group(1) == "¥114.00"
    assert 'id="quote-short"' not in html
    assert 'data-quota="instances"' in html


def test_a_wallet_that_cannot_pay_the_first_hour_offers_a_top_up(tenant, demo_org):
    Wallet.objects.filter(organization=demo_org).update(balance_minor=1_000)

    html = quote(tenant, flavor="h200.1x", region="sh-center", bandwidth_mbps=0)

    assert 'id="quote-short"' in html
    assert 'href="/billing/#top-up"' in html


def test_a_member_without_billing_rights_sees_no_balance(client, demo_member):
    client.force_login(demo_member("member"))

    html = quote(client, flavor="h200.1x", region="sh-center")

    assert 'id="quote-balance"' not in html
    assert 'id="quote-hold"' in html


def test_hold_is_the_rounded_first_hour_of_each_host(demo_org):
    one = services.quote(
        organization=demo_org,
        request=HostRequest(
            flavor=Flavor.objects.get(family__park=demo_org.park, code="h200.1x"),
            image=None,
            region=demo_org.park.regions.get(code="sh-center"),
            system_disk_gb=100,
            data_disk_gb=33,
            bandwidth_mbps=1,
            count=3,
        ),
    )

    single = replace(one, count=1)
    assert one.hold_minor == 3 * single.hourly_minor_rounded
