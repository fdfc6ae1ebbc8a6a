"""The back office's words: audit codes as labels, limits and money typed in yuan."""

import pytest
from django.utils import translation

from apps.core.audit import record_event
from apps.operations.audit_labels import action_label, actor_label, object_type_label
from apps.quotas.models import QuotaLimit, QuotaResource

pytestmark = pytest.mark.django_db

ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}


@pytest.fixture(autouse=True)
def english():
    with translation.override("en"):
        yield


@pytest.mark.parametrize(
    ("code", "label"),
    [
        ("api_key.created", "API key created"),
        ("task.succeeded", "Training task: Succeeded"),
        ("instance.running", "Instance: Running"),
        ("task.teleported", "task.teleported"),  # an unknown state stays as it is
        ("something.new", "something.new"),  # an unknown action too
    ],
)
def test_actions_read_as_words(code, label):
    assert action_label(code) == label


@pytest.mark.parametrize(
    ("actor", "label"),
    [
        ("system:scheduler", "System · scheduler"),
        ("system:park-operator:alice", "Park operator alice"),
        ("api-key:ab12cd", "API key ab12cd…"),
        ("agent:gpu-07", "Host agent on gpu-07"),
        ("ops@example.com", "ops@example.com"),
    ],
)
def test_actors_read_as_words(actor, label):
    assert actor_label(actor) == label


def test_object_types_read_as_their_names():
    assert object_type_label("orders.instance") == "instance"
    assert object_type_label("nowhere.thing") == "nowhere.thing"


def test_the_audit_log_shows_labels_and_keeps_codes_in_the_title(client, operator, organization):
    record_event(
        action="task.succeeded",
        actor_label="system:scheduler",
        organization=organization,
        park=organization.park,
    )
    client.force_login(operator)

    html = client.get("/ops/audit/", **ENGLISH).content.decode()

    assert "Training task: Succeeded" in html and 'title="task.succeeded"' in html
    assert "System · scheduler" in html


# --- Limits in yuan ---------------------------------------------------------------------------


@pytest.fixture
def quotas(client, operator, organization):
    client.force_login(operator)
    return f"/ops/organizations/{organization.pk}/quotas/"


@pytest.mark.parametrize(("typed", "stored"), [("5000.00", 500_000), ("12.5", 1250)])
def test_a_monthly_spend_limit_is_typed_in_yuan(client, quotas, organization, typed, stored):
    response = client.post(quotas, {"action": "add", "resource": "monthly_spend", "value": typed})

    assert response.status_code == 302
    limit = QuotaLimit.objects.get(organization=organization, resource=QuotaResource.MONTHLY_SPEND)
    assert limit.limit == stored
    page = client.get(quotas, **ENGLISH).content.decode()
    assert f'value="{stored / 100:.2f}"' in page


def test_a_fraction_of_a_card_is_a_form_error(client, quotas, organization):
    response = client.post(
        quotas, {"action": "add", "resource": "accelerators", "value": "2.5"}, **ENGLISH
    )

    assert response.status_code == 422
    assert "Enter a whole number for this limit." in response.content.decode()
    assert not QuotaLimit.objects.filter(organization=organization).exists()


def test_changing_a_limit_to_a_fraction_is_refused_and_keeps_it(client, quotas, organization):
    limit = QuotaLimit.objects.create(
        park=organization.park, organization=organization, resource="vcpu", limit=64
    )

    response = client.post(
        quotas, {"action": "set", "limit_id": limit.pk, "value": "7.5"}, follow=True, **ENGLISH
    )

    assert "Enter a whole number for this limit." in response.content.decode()
    assert QuotaLimit.objects.get(pk=limit.pk).limit == 64
