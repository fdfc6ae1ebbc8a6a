"""Tenant isolation: every tenant-facing page and API route that names an object answers 404
when the object belongs to another organization, and every operator route answers 404 to an
operator of another park.

The routes are discovered from the URLconf, so a new route cannot slip past: one whose
parameters this module does not know how to fill fails `test_every_route_is_covered`.
"""

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from apps.tenants.services import create_api_key
from tests.factories import (
    ApiKeyFactory,
    FlavorFactory,
    ImageFactory,
    InstanceFactory,
    InvitationFactory,
    InvoiceFactory,
    MembershipFactory,
    OrderFactory,
    OrganizationFactory,
    ParkFactory,
    ParkOperatorFactory,
    PlacementFactory,
    PortMappingFactory,
    PriceFactory,
    QuotaLimitFactory,
    RegionFactory,
    SecurityGroupFactory,
    SecurityGroupRuleFactory,
    SharedFileSystemFactory,
    TaskFactory,
    UsageRecordFactory,
    UserFactory,
    VolumeFactory,
    WebhookDeliveryFactory,
    WebhookEndpointFactory,
)

TENANT_NAMESPACES = ("tenants", "api", "billing", "tasks", "orders")
OPERATOR_NAMESPACES = ("operations", "tasks_ops")

# Routes whose parameters are not an organization's object, and why they are exempt.
EXEMPT = {
    "tenants:invitation": "a capability URL: the token itself is the secret",
    "api:accelerator-model-detail": "accelerator models are public facts, shared by all parks",
}
OPERATOR_API = "api:operator-"
OPERATOR_BILLING = "billing:ops_"


def discover(namespaces):
    """(route name, parameter names) of every named URL in the given namespaces."""
    found = []

    def walk(patterns, namespace):
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, entry.namespace or namespace)
            elif isinstance(entry, URLPattern) and entry.name and namespace in namespaces:
                params = sorted(entry.pattern.converters) or sorted(entry.pattern.regex.groupindex)
                found.append((f"{namespace}:{entry.name}", tuple(params)))

    walk(get_resolver().url_patterns, None)
    return found


TENANT_ROUTES = [
    r
    for r in discover(TENANT_NAMESPACES)
    if r[1] and r[0] not in EXEMPT and not r[0].startswith((OPERATOR_API, OPERATOR_BILLING))
]
OPERATOR_ROUTES = [r for r in discover(OPERATOR_NAMESPACES) if r[1]] + [
    r
    for r in discover(TENANT_NAMESPACES)
    if r[1] and r[0].startswith((OPERATOR_API, OPERATOR_BILLING))
]


def foreign_catalog():
    """Catalog objects of another park: a tenant sees its own park's catalog only."""
    park = ParkFactory()
    flavor = FlavorFactory(family__park=park)
    region = RegionFactory(park=park)
    return {
        "api:region-detail": {"code": region.code},
        "api:flavor-detail": {"code": flavor.code},
        "api:image-detail": {"code": ImageFactory(park=park).code},
        "api:price-detail": {"pk": PriceFactory(flavor=flavor, region=region).pk},
    }


def foreign_objects(foreign_org):
    """Objects of another organization, by route name and then by parameter name."""
    membership = MembershipFactory(organization=foreign_org)
    invitation = InvitationFactory(organization=foreign_org)
    key = ApiKeyFactory(organization=foreign_org)
    endpoint = WebhookEndpointFactory(organization=foreign_org)
    delivery = WebhookDeliveryFactory(endpoint=endpoint, state="failed")
    instance = InstanceFactory(organization=foreign_org)
    order = OrderFactory(organization=foreign_org, instance=instance)
    invoice = InvoiceFactory(organization=foreign_org)
    task = TaskFactory(organization=foreign_org)
    mapping = PortMappingFactory(instance=instance)
    rule = SecurityGroupRuleFactory(group=SecurityGroupFactory(organization=foreign_org))
    volume = VolumeFactory(organization=foreign_org)
    file_system = SharedFileSystemFactory(organization=foreign_org)
    by_param = {
        "volume_id": volume.pk,
        "task_id": task.pk,
        "invoice_id": invoice.pk,
        "membership_id": membership.pk,
        "invitation_id": invitation.pk,
        "key_id": key.pk,
        "instance_id": instance.pk,
        "order_id": order.pk,
        "kind": "stop",
        "mapping_id": mapping.pk,
        "group_id": rule.group_id,
        "rule_id": rule.pk,
    }
    by_route = {
        "api:membership-detail": {"pk": membership.pk},
        "api:api-key-detail": {"pk": key.pk},
        "api:api-key-revoke": {"pk": key.pk},
        "api:webhook-detail": {"pk": endpoint.pk},
        "api:webhook-deliveries": {"pk": endpoint.pk},
        "api:webhook-redeliver": {"pk": endpoint.pk, "delivery_id": delivery.pk},
        "api:invoice-detail": {"pk": invoice.pk},
        "api:usage-record-detail": {"pk": UsageRecordFactory(organization=foreign_org).pk},
        "api:order-detail": {"pk": order.pk},
        "api:task-detail": {"pk": task.pk},
        "api:task-cancel": {"pk": task.pk},
        "api:order-cancel": {"pk": order.pk},
        "api:instance-port-mapping": {"pk": instance.pk, "mapping_id": mapping.pk},
        **{f"api:security-group-{name}": {"pk": rule.group_id} for name in ("detail", "rules")},
        "api:security-group-rule": {"pk": rule.group_id, "rule_id": rule.pk},
        "api:shared-file-system-detail": {"pk": file_system.pk},
        **{
            f"api:volume-{name}": {"pk": volume.pk}
            for name in ("detail", "attach", "detach", "grow", "snapshot")
        },
        **{
            f"api:instance-{name}": {"pk": instance.pk}
            for name in (
                "detail",
                "stop",
                "start",
                "resize",
                "expand-disk",
                "set-bandwidth",
                "release",
                "port-mappings",
                "security-group",
                "schedule-stop",
                "data-disk",
            )
        },
        **foreign_catalog(),
    }
    return by_route, by_param


def kwargs_for(route, params, by_route, by_param):
    if route in by_route:
        return by_route[route]
    return {name: by_param[name] for name in params if name in by_param}


def request_route(client, url, **headers):
    """GET, or POST where the route only takes POST: the object lookup must answer either way."""
    response = client.get(url, **headers)
    if response.status_code == 405:
        response = client.post(url, **headers)
    return response


@pytest.mark.django_db
def test_every_route_is_covered(organization):
    by_route, by_param = foreign_objects(organization)
    missing = [
        (route, params)
        for route, params in TENANT_ROUTES
        if set(kwargs_for(route, params, by_route, by_param)) != set(params)
    ]
    assert not missing, f"teach tests/test_isolation.py these routes' parameters: {missing}"
    assert len(TENANT_ROUTES) >= 8 and len(OPERATOR_ROUTES) >= 3


def missing_object_kwargs(params):
    return {name: 987654321 for name in params}


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "params"), TENANT_ROUTES, ids=[r for r, _ in TENANT_ROUTES])
def test_another_tenants_object_is_404(
    client, route, params, organization, other_organization, member_of
):
    """An owner (who may use every route) gets 404. Every other role gets exactly the answer it
    gets for an id that exists nowhere: 404, or 403 where the role may never use the route; so
    no answer tells whether another tenant's object exists."""
    by_route, by_param = foreign_objects(other_organization)
    url = reverse(route, kwargs=kwargs_for(route, params, by_route, by_param))
    nowhere = reverse(route, kwargs=missing_object_kwargs(params))
    for role in ("owner", "admin", "member", "billing", "viewer"):
        client.force_login(member_of(organization, role))
        status = request_route(client, url).status_code
        assert status == request_route(client, nowhere).status_code, (role, url)
        assert status == 404 if role == "owner" else status in (403, 404), (role, url, status)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("route", "params"),
    [r for r in TENANT_ROUTES if r[0].startswith("api:")],
    ids=[r for r, _ in TENANT_ROUTES if r.startswith("api:")],
)
def test_another_tenants_object_is_404_for_an_api_key(
    client, route, params, organization, owner, other_organization
):
    _key, secret = create_api_key(
        organization=organization, actor=owner, name="partner", scope="write"
    )
    by_route, by_param = foreign_objects(other_organization)
    url = reverse(route, kwargs=kwargs_for(route, params, by_route, by_param))
    response = request_route(client, url, HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert response.status_code == 404, (url, response.status_code)
    assert response["Content-Type"].startswith("application/problem+json")


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "params"), OPERATOR_ROUTES, ids=[r for r, _ in OPERATOR_ROUTES])
def test_another_parks_objects_are_404_for_an_operator(client, route, params, operator):
    foreign_park = ParkFactory()
    foreign_org = OrganizationFactory(park=foreign_park)
    ParkOperatorFactory(park=foreign_park, user=UserFactory())
    foreign_order = OrderFactory(organization=foreign_org)
    values = {
        "placement_id": PlacementFactory(instance__organization=foreign_org).pk,
        "invoice_id": InvoiceFactory(organization=foreign_org).pk,
        "organization_id": foreign_org.pk,
        "park_id": foreign_park.pk,
        "order_id": foreign_order.pk,
    }
    by_route = {
        **{
            f"api:operator-organization-{name}": {"pk": foreign_org.pk}
            for name in ("detail", "approve-verification", "reject-verification")
        },
        **{
            f"api:operator-order-{name}": {"pk": foreign_order.pk}
            for name in ("detail", "approve", "reject")
        },
        "api:operator-quota-detail": {
            "pk": QuotaLimitFactory(park=foreign_park, organization=foreign_org).pk
        },
    }
    kwargs = by_route.get(route) or {name: values[name] for name in params if name in values}
    assert set(kwargs) == set(params), f"teach tests/test_isolation.py {route}'s {params}"
    url = reverse(route, kwargs=kwargs)
    client.force_login(operator)
    assert request_route(client, url).status_code == 404, url
