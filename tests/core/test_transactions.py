import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.core.audit import record_event, recorded_together
from apps.core.models import AuditEvent
from apps.core.transactions import in_transaction
from tests.factories import OrganizationFactory


@in_transaction
def _rename(organization, name, *, fail=False):
    organization.name = name
    organization.save(update_fields=["name"])
    if fail:
        raise RuntimeError("the step failed after writing")


def _statements(captured) -> list[str]:
    return [query["sql"].split()[0].upper() for query in captured.captured_queries]


@pytest.mark.django_db
def test_a_step_in_its_callers_transaction_sets_no_savepoint():
    organization = OrganizationFactory()
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        _rename(organization, "Renamed")
    assert _statements(captured) == ["UPDATE"]
    organization.refresh_from_db()
    assert organization.name == "Renamed"


@pytest.mark.django_db(transaction=True)
def test_a_step_called_alone_is_a_transaction_of_its_own():
    organization = OrganizationFactory(name="Before")
    assert not transaction.get_connection().in_atomic_block
    with pytest.raises(RuntimeError):
        _rename(organization, "Half-written", fail=True)
    organization.refresh_from_db()
    assert organization.name == "Before"


@pytest.mark.django_db(transaction=True)
def test_a_failing_step_fails_its_callers_transaction_as_a_whole():
    organization = OrganizationFactory(name="Before")
    with pytest.raises(RuntimeError), transaction.atomic():
        _rename(organization, "Half-written", fail=True)
    organization.refresh_from_db()
    assert organization.name == "Before"


@pytest.mark.django_db
def test_events_recorded_together_are_written_in_one_insert_in_their_order():
    organization = OrganizationFactory()
    with CaptureQueriesContext(connection) as captured, recorded_together():
        for action in ("order.submitted", "order.approved", "order.fulfilling"):
            event = record_event(action=action, target=organization)
            assert event.pk is None  # not written yet
        assert not AuditEvent.objects.filter(organization=organization).exists()
    assert _statements(captured).count("INSERT") == 1
    written = AuditEvent.objects.filter(organization=organization).order_by("created_at", "id")
    assert [e.action for e in written] == ["order.submitted", "order.approved", "order.fulfilling"]
    assert [e.action for e in AuditEvent.objects.filter(organization=organization)] == [
        "order.fulfilling",
        "order.approved",
        "order.submitted",
    ]  # the log's own order, newest first


@pytest.mark.django_db
def test_events_recorded_together_are_dropped_when_the_block_fails():
    organization = OrganizationFactory()
    with pytest.raises(RuntimeError), recorded_together():
        record_event(action="order.submitted", target=organization)
        raise RuntimeError("refused")
    assert not AuditEvent.objects.filter(organization=organization).exists()
    # Outside the block an event is written at once again.
    assert record_event(action="order.submitted", target=organization).pk is not None
