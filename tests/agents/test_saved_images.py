"""Saved images through the portal and the agent API: a stopped host saved as its
organization's image, ordered again on the server that holds it, billed per GB-month, counted
in the storage quota, deleted only once no host uses it; never seen nor ordered by another
organization."""

from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.db.models import Sum
from django.utils import timezone

from apps.agents.models import AgentHost, AgentServer, SavedImage, SavedImageState
from apps.agents.saved_images import delete_saved_image, save_host_image
from apps.billing import invoicing, metering
from apps.billing.models import Meter, MeterKind, UsageRecord
from apps.catalog.selectors import offered_images
from apps.core.errors import DomainError
from apps.core.models import AuditEvent
from apps.orders.models import Instance, InstanceState
from apps.orders.operations import request_operation
from apps.orders.services import HostRequest, validate_host_request
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.quotas.services import QuotaExceeded, organization_usage
from tests.agents.conftest import SAVED_DIGEST, SAVED_SIZE, SSH_KEY, next_report_sequence
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent
from tests.orders.agent_hosts import order_host as order_host

pytestmark = pytest.mark.django_db


@pytest.fixture
def operate(owner, django_capture_on_commit_callbacks):
    def run(instance, kind):
        with django_capture_on_commit_callbacks(execute=True):
            request_operation(instance=instance, actor=owner, kind=kind)
        instance.refresh_from_db()
        return instance

    return run


@pytest.fixture
def saved(agent_world, agent, order_host, operate, owner):
    """Host "a" ordered, stopped and saved as "my env"; the agent has reported it saved."""
    AgentServer.objects.update(
        images=[{"name": "debian-12", "digest": "sha256:" + "0" * 64}],
        images_reported_at=timezone.now(),
    )
    host_a = operate(order_host("a"), "stop")
    assert host_a.state == InstanceState.STOPPED
    saved = save_host_image(
        organization=agent_world.organization,
        actor=owner,
        instance_id=host_a.pk,
        name="my env",
        description="torch and my tool",
    )
    assert saved.state == SavedImageState.SAVING
    (listed,) = agent.hosts()
    assert listed["save_image"] == saved.image.code and listed["state"] == "stopped"
    agent.converge()
    saved.refresh_from_db()
    return saved


def test_a_saved_host_becomes_the_organizations_image_on_its_server(saved, agent_world):
    assert (saved.state, saved.digest, saved.size_bytes) == (
        SavedImageState.READY,
        SAVED_DIGEST,
        SAVED_SIZE,
    )
    image = saved.image
    assert image.organization == agent_world.organization and image.is_active
    assert image.code.startswith("saved-") and image.description == "torch and my tool"
    server = AgentServer.objects.get()
    assert image.code in server.image_names
    assert AgentHost.objects.get().save_image == ""  # asked once
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"saved_image.requested", "savedimage.ready"} <= actions


def test_its_storage_is_billed_per_gb_month_at_the_regions_disk_price(saved):
    meter = Meter.objects.get(workload=saved.workload)
    # 2.5 GB billed as 3 GB, at 36 a GB-month (the world's disk price), per hour.
    assert (meter.kind, meter.quantity, meter.ended_at) == (MeterKind.IMAGE, 3, None)
    assert meter.hourly_minor == (Decimal(36) * 3 / 720).quantize(Decimal("0.000001"))


def test_a_new_host_from_it_runs_with_it_and_it_cant_be_deleted_while_it_does(
    saved, agent_world, order_host, operate, owner, agent
):
    flavor = agent_world.flavors[1]
    assert saved.image in offered_images(flavor, agent_world.organization)
    agent_world.image = saved.image
    host_b = order_host("b")
    assert host_b.image == saved.image
    assert AgentHost.objects.get(name="b").image == saved.image.code

    with pytest.raises(DomainError) as refused:
        delete_saved_image(
            organization=agent_world.organization, actor=owner, saved_image_id=saved.pk
        )
    assert refused.value.code == "image_in_use" and "b" in refused.value.message

    operate(host_b, "release")
    agent.converge()
    assert Instance.objects.get(pk=host_b.pk).state == InstanceState.RELEASED
    delete_saved_image(organization=agent_world.organization, actor=owner, saved_image_id=saved.pk)
    saved.refresh_from_db()
    assert saved.state == SavedImageState.DELETED and not saved.image.is_active
    assert Meter.objects.get(workload=saved.workload).ended_at is not None
    assert saved.image.code not in AgentServer.objects.get().image_names
    response = agent.client.get("/api/v1/agent/hosts", **agent.headers())
    assert response.json()["saved_images"] == []  # its agent removes the files


def test_another_organization_neither_sees_nor_orders_nor_deletes_it(
    saved, agent_world, other_organization, other_owner
):
    flavor = agent_world.flavors[1]
    assert saved.image not in offered_images(flavor, other_organization)
    assert saved.image not in offered_images(flavor)
    request = HostRequest(
        flavor=flavor, image=saved.image, region=agent_world.region, system_disk_gb=50,
        ssh_public_key=SSH_KEY, name="thief",
    )  # fmt: skip
    other_organization.park = agent_world.park
    with pytest.raises(ValidationError) as refused:
        validate_host_request(other_organization, request)
    assert "image" in refused.value.message_dict
    with pytest.raises(DomainError) as missing:
        delete_saved_image(
            organization=other_organization, actor=other_owner, saved_image_id=saved.pk
        )
    assert missing.value.status == 404


def test_only_a_stopped_host_is_saved(agent_world, order_host, owner):
    host = order_host("a")
    with pytest.raises(DomainError) as refused:
        save_host_image(
            organization=agent_world.organization, actor=owner, instance_id=host.pk, name="x"
        )
    assert refused.value.code == "host_not_stopped"
    assert not SavedImage.objects.exists()


def test_a_save_the_agent_doesnt_make_fails_with_the_reason(
    agent_world, agent, order_host, operate, owner, english_messages
):
    host_a = operate(order_host("a"), "stop")
    saved = save_host_image(
        organization=agent_world.organization, actor=owner, instance_id=host_a.pk, name="x"
    )
    (listed,) = agent.hosts()
    report = {"id": listed["id"], "generation": listed["generation"], "state": "stopped"}
    agent.post("hosts/report", {"sequence": next_report_sequence(), "hosts": [report]})
    saved.refresh_from_db()
    assert saved.state == SavedImageState.FAILED and "too old" in saved.message
    assert not saved.image.is_active and AgentHost.objects.get().save_image == ""
    assert not Meter.objects.filter(workload=saved.workload).exists()


def test_its_storage_is_charged_and_invoiced_under_its_name(saved, agent_world):
    meter = Meter.objects.get(workload=saved.workload)
    day_later = meter.started_at + timedelta(days=1)
    with time_machine.travel(day_later, tick=False):
        metering.meter_organization(agent_world.organization.pk, until=day_later)
        # A day of 3 GB at 36 a GB-month (720 h): 3.6, rounded half up (a record each side of
        # midnight).
        records = UsageRecord.objects.filter(meter=meter)
        assert records.aggregate(Sum("seconds"), Sum("amount_minor")) == {
            "seconds__sum": 86400,
            "amount_minor__sum": 4,
        }
        invoice = invoicing.issue_invoice(
            organization=agent_world.organization, period_end=timezone.now()
        )
    line = invoice.lines.get(kind=MeterKind.IMAGE)
    assert (line.description, line.quantity, line.amount_minor) == ("my env", 3, 4)


def test_it_counts_in_the_storage_quota_and_a_save_past_it_is_refused(
    agent_world, agent, order_host, operate, owner, english_messages
):
    limit = QuotaLimit.objects.create(
        park=agent_world.park,
        organization=agent_world.organization,
        resource=QuotaResource.STORAGE_GB,
        limit=40,
    )
    host_a = operate(order_host("a"), "stop")
    with pytest.raises(QuotaExceeded) as refused:
        save_host_image(
            organization=agent_world.organization, actor=owner, instance_id=host_a.pk, name="x"
        )
    assert refused.value.message.startswith(
        "Saving a needs up to 50 GB of storage (its system disk) until its image's size is known"
    )
    assert "40" in refused.value.message and not SavedImage.objects.exists()

    limit.limit = 60
    limit.save()
    saved = save_host_image(
        organization=agent_world.organization, actor=owner, instance_id=host_a.pk, name="x"
    )
    assert organization_usage(agent_world.organization).storage_gb == 50  # while it is saved
    agent.converge()
    saved.refresh_from_db()
    assert saved.state == SavedImageState.READY
    assert organization_usage(agent_world.organization).storage_gb == 3  # 2.5 GB, as billed
    delete_saved_image(organization=agent_world.organization, actor=owner, saved_image_id=saved.pk)
    assert organization_usage(agent_world.organization).storage_gb == 0
