import threading

import pytest
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.core.audit import record_event, recorded_together
from apps.core.models import AuditEvent
from apps.core.transactions import in_transaction, lock_all, locked_update_or_create
from apps.orchestration.services import register_node
from apps.orders.models import ApprovalPolicy
from apps.tenants.models import Organization
from tests.factories import OrganizationFactory, PoolFactory


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
        assert not AuditEvent.objects.filter(organization_id=organization.pk).exists()
    assert _statements(captured).count("INSERT") == 1
    written = AuditEvent.objects.filter(organization_id=organization.pk).order_by(
        "created_at", "id"
    )
    assert [e.action for e in written] == ["order.submitted", "order.approved", "order.fulfilling"]
    assert [e.action for e in AuditEvent.objects.filter(organization_id=organization.pk)] == [
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
    assert not AuditEvent.objects.filter(organization_id=organization.pk).exists()
    # Outside the block an event is written at once again.
    assert record_event(action="order.submitted", target=organization).pk is not None


def _row_locks(captured) -> list[str]:
    return [
        query["sql"][query["sql"].upper().index(" FOR ") :]
        for query in captured.captured_queries
        if " FOR " in query["sql"].upper()
    ]


@pytest.mark.postgres
@pytest.mark.django_db
@pytest.mark.parametrize("existing", [False, True])
def test_registering_a_node_locks_it_for_no_key_update_only(existing):
    """A plain FOR UPDATE (what Django's update_or_create takes) waits for the FOR KEY SHARE
    locks of every foreign key check on the node, and they for it."""
    pool = PoolFactory()
    if existing:
        register_node(pool=pool, hostname="n0", accelerators=2, vcpu=8, ram_gb=32)
    with CaptureQueriesContext(connection) as captured:
        node = register_node(pool=pool, hostname="n0", accelerators=2, vcpu=16, ram_gb=64)
    locks = _row_locks(captured)
    assert locks and all(taken.upper().startswith(" FOR NO KEY UPDATE") for taken in locks)
    node.refresh_from_db()
    assert (node.vcpu_total, node.ram_gb_total, node.accelerators.count()) == (16, 64, 2)


@pytest.mark.django_db
def test_an_update_or_create_under_lock_writes_only_what_changed():
    organization = OrganizationFactory()
    policy, created = locked_update_or_create(
        ApprovalPolicy, park=organization.park, defaults={"max_accelerators": 4}
    )
    assert created
    with CaptureQueriesContext(connection) as captured:
        same, created = locked_update_or_create(
            ApprovalPolicy, park=organization.park, defaults={"max_accelerators": 4}
        )
    assert not created and same.pk == policy.pk
    assert "UPDATE" not in _statements(captured)
    changed, _ = locked_update_or_create(
        ApprovalPolicy, park=organization.park, defaults={"max_accelerators": 8}
    )
    changed.refresh_from_db()
    assert changed.max_accelerators == 8


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_lock_all_holds_its_rows_against_other_lockers_until_the_transaction_ends():
    """Written out, it still takes FOR NO KEY UPDATE on exactly its rows: another locker of one
    of them is refused (NOWAIT), a foreign-key check's FOR KEY SHARE is not, nor a row it did
    not name; and outside a transaction it is refused, as the ORM's select_for_update is."""
    first, second, other = (OrganizationFactory() for _ in range(3))
    with pytest.raises(transaction.TransactionManagementError):
        lock_all(Organization, [first.pk])
    seen = {}

    def another_connection():
        try:
            with connection.cursor() as cursor:
                for name, pk, taken in (
                    ("update", second.pk, "NO KEY UPDATE"),
                    ("key share", second.pk, "KEY SHARE"),
                    ("other row", other.pk, "NO KEY UPDATE"),
                ):
                    with transaction.atomic():
                        try:
                            cursor.execute(
                                "SELECT id FROM tenants_organization WHERE id = %s "
                                f"FOR {taken} NOWAIT",
                                [pk],
                            )
                            seen[name] = "taken"
                        except OperationalError:
                            seen[name] = "refused"
        finally:
            connection.close()

    with transaction.atomic():
        lock_all(Organization, [second, first.pk])  # rows or ids, in any order
        thread = threading.Thread(target=another_connection)
        thread.start()
        thread.join(10)
    assert seen == {"update": "refused", "key share": "taken", "other row": "taken"}
