"""Every back-office URL lives under /ops/. The scheduling and billing back-office pages moved
there from /tasks/ops/… and /billing/ops/…; their URL names are unchanged, and the old paths
answer a permanent redirect to the new ones with the query string kept."""

from urllib.parse import quote

import pytest
from django.urls import resolve, reverse

from apps.billing import views as billing_views
from apps.orchestration import views as orchestration_views

# route name, its arguments, its new path, its old path, the view that serves it
MOVED = [
    (
        "tasks_ops:scheduling_policy",
        {"park_id": 7},
        "/ops/tasks/policy/7/",
        "/tasks/ops/policy/7/",
        orchestration_views.scheduling_policy,
    ),
    (
        "tasks_ops:decision_detail",
        {"placement_id": 8},
        "/ops/tasks/decisions/8/",
        "/tasks/ops/decisions/8/",
        orchestration_views.decision_detail,
    ),
    ("billing:ops_overview", {}, "/ops/billing/", "/billing/ops/", billing_views.park_billing),
    (
        "billing:ops_organization",
        {"organization_id": 9},
        "/ops/billing/organizations/9/",
        "/billing/ops/organizations/9/",
        billing_views.organization_billing,
    ),
    (
        "billing:ops_invoice",
        {"invoice_id": 10},
        "/ops/billing/invoices/10/",
        "/billing/ops/invoices/10/",
        billing_views.operator_invoice,
    ),
]
IDS = [name for name, *_ in MOVED]

# The tenant pages beside them stay where they were.
UNMOVED = [
    ("tasks:task_list", {}, "/tasks/"),
    ("tasks:task_detail", {"task_id": 3}, "/tasks/3/"),
    ("billing:overview", {}, "/billing/"),
    ("billing:invoice_detail", {"invoice_id": 4}, "/billing/invoices/4/"),
    ("billing:stripe_webhook", {}, "/billing/stripe/webhook/"),
]


@pytest.mark.parametrize(("name", "kwargs", "new", "old", "view"), MOVED, ids=IDS)
def test_the_name_reverses_to_the_new_path_which_the_same_view_serves(name, kwargs, new, old, view):
    assert reverse(name, kwargs=kwargs) == new
    match = resolve(new)
    assert match.func == view
    assert match.view_name == name
    assert match.kwargs == kwargs


@pytest.mark.parametrize(("name", "kwargs", "path"), UNMOVED, ids=[n for n, *_ in UNMOVED])
def test_the_tenant_pages_stay_put(name, kwargs, path):
    assert reverse(name, kwargs=kwargs) == path
    assert resolve(path).view_name == name


@pytest.mark.parametrize(("name", "kwargs", "new", "old", "view"), MOVED, ids=IDS)
def test_the_old_path_is_not_a_named_route(name, kwargs, new, old, view):
    """Unnamed, so nothing reverses to it and the URLconf-driven isolation test skips it."""
    assert resolve(old).url_name is None


@pytest.mark.parametrize(("name", "kwargs", "new", "old", "view"), MOVED, ids=IDS)
def test_the_old_path_redirects_permanently_keeping_the_query_string(
    client, name, kwargs, new, old, view
):
    response = client.get(old)
    assert response.status_code == 301
    assert response["Location"] == new

    response = client.get(old, {"page": "2", "q": "a b"})
    assert response.status_code == 301
    assert response["Location"] == f"{new}?page=2&q=a+b"


@pytest.mark.parametrize(("name", "kwargs", "new", "old", "view"), MOVED, ids=IDS)
def test_a_post_to_the_old_path_redirects_too(client, name, kwargs, new, old, view):
    response = client.post(old, {"action": "preview"})
    assert response.status_code == 301
    assert response["Location"] == new


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "kwargs", "new", "old", "view"), MOVED, ids=IDS)
def test_an_anonymous_visitor_at_the_new_path_is_sent_to_log_in(
    client, name, kwargs, new, old, view
):
    response = client.get(new)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('account_login')}?next={quote(new)}"


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "kwargs", "new", "old", "view"), MOVED, ids=IDS)
def test_an_anonymous_visitor_at_the_old_path_ends_at_log_in_for_the_new_one(
    client, name, kwargs, new, old, view
):
    response = client.get(old, follow=True)
    login = f"{reverse('account_login')}?next={quote(new)}"
    assert response.redirect_chain[:2] == [(new, 301), (login, 302)]


# What a signed-in tenant gets at the new path, as before the move: the scheduling pages look the
# park or placement up among those the user operates (404), the billing pages refuse anyone who
# operates no park (403).
TENANT_STATUS = {
    "tasks_ops:scheduling_policy": 404,
    "tasks_ops:decision_detail": 404,
    "billing:ops_overview": 403,
    "billing:ops_organization": 403,
    "billing:ops_invoice": 403,
}


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "kwargs", "new", "old", "view"), MOVED, ids=IDS)
def test_a_tenant_at_the_new_path_is_refused_as_before(client, owner, name, kwargs, new, old, view):
    client.force_login(owner)
    assert client.get(new).status_code == TENANT_STATUS[name]
