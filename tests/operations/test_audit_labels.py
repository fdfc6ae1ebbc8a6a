"""Audit codes as people read them (apps/operations/audit_labels.py) and on the back office's
audit log, which shows the labels and keeps the codes only in a title."""

import ast
import re
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import translation

from apps.agents.models import WantedState
from apps.billing.models import InvoiceState, PaymentState
from apps.core.audit import record_event
from apps.operations.audit_labels import ACTIONS, action_label, actor_label, object_type_label
from apps.orchestration.models import TaskState
from apps.orders.models import InstanceState, OrderState
from apps.tenants.models import VerificationState
from apps.webhooks.models import DeliveryState
from tests.factories import AuditEventFactory


# Every code the app records by name: the string given as `action=` to any call (record_event,
# transition) and as the first argument of the catalog's _audit, read from the source, so a new
# action without a label fails here.
def recorded_actions() -> list[str]:
    codes = set()
    for source in (Path(__file__).resolve().parents[2] / "apps").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if not isinstance(node, ast.Call):
                continue
            if getattr(node.func, "attr", None) == "add_argument":
                continue  # a command's option (argparse's action="store_true"), not an audit
            given = [k.value for k in node.keywords if k.arg == "action"]
            if getattr(node.func, "id", None) == "_audit" and node.args:
                given.append(node.args[0])
            codes |= {g.value for g in given if isinstance(g, ast.Constant)}
    return sorted(codes)


RECORDED_ACTIONS = recorded_actions()


def test_the_source_scan_finds_the_actions_recorded_by_name():
    assert {"agent.server_enrolled", "catalog.flavor_created", "park.operator_added"} <= set(
        RECORDED_ACTIONS
    )


# apps.core.transitions logs "<model_name>.<new state>" for every model moved through it.
TRANSITION_STATES = [
    ("order", OrderState),
    ("instance", InstanceState),
    ("task", TaskState),
    ("organization", VerificationState),
    ("payment", PaymentState),
    ("invoice", InvoiceState),
    ("agenthost", WantedState),
]

# Labels are read in English: tests/operations/conftest.py's autouse `english` fixture.


# --- action_label -----------------------------------------------------------------------------


def test_a_known_action_reads_as_its_label():
    assert action_label("bank_transfer.credited") == "Bank transfer credited"


def test_a_transition_reads_as_the_object_and_its_new_state():
    assert action_label("task.succeeded") == "Training task: Succeeded"
    assert action_label("organization.verified") == "Verification: Verified"


@pytest.mark.parametrize("code", RECORDED_ACTIONS)
def test_every_action_the_app_records_has_a_label(code):
    assert code in ACTIONS
    assert action_label(code) != code


@pytest.mark.parametrize(
    "code",
    [f"{subject}.{state}" for subject, states in TRANSITION_STATES for state in states.values],
)
def test_every_state_of_a_transitioned_model_has_a_label(code):
    assert action_label(code) != code


@pytest.mark.parametrize("state", DeliveryState.values)
def test_webhook_delivery_transitions_have_labels(state):
    assert action_label(f"webhookdelivery.{state}") != f"webhookdelivery.{state}"


@pytest.mark.parametrize(
    "code",
    [
        "something.new",  # an unknown subject
        "task.teleported",  # a known subject, an unknown state
        "instance.",  # a known subject, no state
        "login",  # no dot at all
        "",
    ],
)
def test_an_unknown_code_is_shown_as_it_is(code):
    assert action_label(code) == code


def test_labels_follow_the_readers_language():
    with translation.override("zh-hans"):
        assert action_label("api_key.created") == "已创建 API 密钥"
        assert action_label("task.succeeded").startswith("训练任务：")


# --- actor_label ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("actor", "label"),
    [
        ("system", "System"),
        ("system:scheduler", "System · scheduler"),
        ("system:billing", "System · billing"),
        ("system:idle-policy", "System · idle policy"),
        ("system:park-operator:ops@park.example", "Park operator ops@park.example"),
        ("api-key:ab12", "API key ab12…"),
        ("agent:gpu-node-007", "Host agent on gpu-node-007"),
        ("alice@example.com", "alice@example.com"),
    ],
)
def test_actors_read_as_names(actor, label):
    assert actor_label(actor) == label


@pytest.mark.parametrize(
    "actor",
    ["system:something-new", "api-key:", "agent:", "anonymous:bob@example.com", ""],
)
def test_an_actor_without_a_name_of_its_kind_is_shown_as_it_is(actor):
    assert actor_label(actor) == actor


# --- object_type_label ------------------------------------------------------------------------


def test_a_model_label_reads_as_the_models_name():
    assert object_type_label("orders.instance") == "instance"
    assert object_type_label("orders.order") == "order"


@pytest.mark.parametrize("label", ["nowhere.thing", "orders.nothing", "instance", ""])
def test_an_unknown_object_type_is_shown_as_it_is(label):
    assert object_type_label(label) == label


# --- The audit log page -----------------------------------------------------------------------


def rows(html: str) -> list[str]:
    body = re.search(r"<tbody>(.*?)</tbody>", html, re.S)
    assert body, html
    return re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)


def text(markup: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", markup)).strip()


@pytest.fixture
def events(organization):
    AuditEventFactory(
        organization=organization,
        actor=None,
        actor_label="system:park-operator:ops@park.example",
        action="instance.running",
        object_type="orders.instance",
        object_repr="trainer-7",
    )
    AuditEventFactory(
        organization=organization,
        actor=None,
        actor_label="api-key:ab12",
        action="api_key.created",
        object_type="tenants.apikey",
        object_repr="ci key",
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("events")
@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx-rows"])
def test_the_audit_log_shows_labels_not_codes(client, operator, htmx):
    client.force_login(operator)
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}

    response = client.get(reverse("operations:audit_log"), **headers)

    assert response.status_code == 200
    shown = [text(row) for row in rows(response.content.decode())]
    assert len(shown) == 2
    api_key_row, instance_row = shown  # newest first
    assert "Park operator ops@park.example" in instance_row
    assert "Instance: Running" in instance_row
    assert "trainer-7 (instance)" in instance_row
    assert "API key ab12…" in api_key_row and "API key created" in api_key_row
    for code in ("instance.running", "api_key.created", "system:park-operator", "orders.instance"):
        assert code not in text(response.content.decode())


@pytest.mark.django_db
@pytest.mark.usefixtures("events")
def test_the_code_stays_in_the_actions_title(client, operator):
    client.force_login(operator)

    html = client.get(reverse("operations:audit_log")).content.decode()

    assert '<td title="instance.running">Instance: Running</td>' in html
    assert '<td title="api_key.created">API key created</td>' in html


# --- Actions, actors and object types as words, and on the audit log --------------------------

ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}


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


@pytest.mark.django_db
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
