"""A cloud disk's bill: its GB at the region's price of a GB of cloud disk a month, metered per
second from its creation to its deletion, reopened at its new size when it grows, and a line of
the invoice named after it. The agent world (tests/orders/agent_hosts.py) prices a GB of cloud
disk at 36 fen a month in its region."""

from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.utils import timezone, translation

from apps.billing import invoicing
from apps.billing.metering import HOURS_PER_MONTH, RATE_PLACES
from apps.billing.models import Meter, MeterKind
from apps.storage import services as storage
from apps.workloads.models import WorkloadKind
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent

pytestmark = pytest.mark.django_db

DISK_GB_MONTH_MINOR = 36


def hourly(gb: int) -> Decimal:
    return (Decimal(DISK_GB_MONTH_MINOR * gb) / HOURS_PER_MONTH).quantize(RATE_PLACES)


def make_volume(agent_world, owner, size_gb: int = 20, name: str = "work"):
    return storage.create_volume(
        organization=agent_world.organization,
        actor=owner,
        region=agent_world.region,
        name=name,
        size_gb=size_gb,
        node=agent_world.servers[0].node,
    )


def meters_of(volume) -> list[tuple]:
    return list(
        Meter.objects.filter(workload_id=volume.billed_as_id)
        .order_by("pk")
        .values_list("kind", "quantity", "hourly_minor", "ended_at")
    )


def test_a_volume_is_billed_its_gb_from_creation_to_deletion(agent_world, agent, owner):
    volume = make_volume(agent_world, owner)
    assert volume.billed_as.kind == WorkloadKind.VOLUME
    assert volume.billed_as.organization == agent_world.organization
    assert meters_of(volume) == [(MeterKind.DISK, 20, hourly(20), None)]

    grown = storage.grow_volume(volume=volume, actor=owner, size_gb=30)
    [(_kind, _gb, _rate, closed), now_open] = meters_of(grown)
    assert closed is not None and now_open == (MeterKind.DISK, 30, hourly(30), None)

    storage.delete_volume(volume=grown, actor=owner)
    assert all(ended is not None for *_rest, ended in meters_of(grown))


def test_a_snapshot_is_billed_as_a_volume_of_its_own(agent_world, agent, owner):
    volume = make_volume(agent_world, owner)
    snapshot = storage.snapshot_volume(volume=volume, actor=owner, name="work-copy")
    assert snapshot.billed_as_id != volume.billed_as_id
    assert meters_of(snapshot) == [(MeterKind.DISK, 20, hourly(20), None)]


def test_a_month_of_a_volume_is_a_line_of_its_invoice_named_after_it(agent_world, agent, owner):
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        make_volume(agent_world, owner, size_gb=73, name="datasets")
    month_later = start.replace(day=1) + timedelta(days=40)
    with time_machine.travel(month_later, tick=False), translation.override("en"):
        invoices = invoicing.issue_due_invoices(now=timezone.now())
    lines = [line for invoice in invoices for line in invoice.lines.all()]
    (line,) = [line for line in lines if line.description == "datasets"]
    assert (line.kind, line.quantity) == (MeterKind.DISK, 73)
    assert line.amount_minor > 0
