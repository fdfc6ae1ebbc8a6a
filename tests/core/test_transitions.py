import threading

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.core.errors import InvalidTransition
from apps.core.models import AuditEvent
from apps.core.transitions import write_moved
from apps.orders.models import Instance, InstanceState
from apps.orders.services import move_instance
from tests.factories import InstanceFactory


@pytest.mark.django_db
def test_refusal_names_the_states_in_the_users_language():
    from django.utils import translation

    instance = InstanceFactory(state=InstanceState.PENDING)
    with translation.override("zh-hans"):
        with pytest.raises(InvalidTransition) as excinfo:
            move_instance(instance=instance, to=InstanceState.STOPPED)
        pending, stopped = str(InstanceState.PENDING.label), str(InstanceState.STOPPED.label)
    assert pending != "Pending"  # the catalog translates it
    assert f"“{pending}”" in excinfo.value.message and f"“{stopped}”" in excinfo.value.message
    assert "pending" not in excinfo.value.message


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_transition_waits_for_a_concurrent_one_and_sees_its_result():
    """Two workers move the same instance: the second blocks on the row lock, then sees the
    first one's state and is refused instead of overwriting it."""
    instance = InstanceFactory(state=InstanceState.PROVISIONING)
    first_locked, release_first = threading.Event(), threading.Event()
    outcome = {}

    def first():
        try:
            with transaction.atomic():
                move_instance(instance=instance, to=InstanceState.RUNNING)
                first_locked.set()
                release_first.wait(5)
        finally:
            connection.close()

    def second():
        first_locked.wait(5)
        try:
            move_instance(instance=instance, to=InstanceState.RUNNING)
            outcome["second"] = "moved"
        except InvalidTransition:
            outcome["second"] = "refused"
        finally:
            connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    first_locked.wait(5)
    threads[1].join(0.5)
    assert threads[1].is_alive(), "the second transition should be waiting on the row lock"
    release_first.set()
    for t in threads:
        t.join(10)
    instance.refresh_from_db()
    assert instance.state == InstanceState.RUNNING
    assert outcome["second"] == "refused"  # RUNNING -> RUNNING is not a move


def _sql(queries) -> list[str]:
    return [q["sql"] for q in queries]


@pytest.mark.django_db
def test_the_re_read_row_keeps_the_related_rows_already_loaded():
    from django.test.utils import CaptureQueriesContext

    from apps.core.models import AuditEvent

    instance = InstanceFactory(state=InstanceState.PROVISIONING)
    organization = instance.organization  # loaded, with its park
    organization.park  # noqa: B018

    with CaptureQueriesContext(connection) as queries:
        moved = move_instance(instance=instance, to=InstanceState.RUNNING)

    assert moved.organization is organization
    reads_of_organizations = [s for s in _sql(queries) if 'FROM "tenants_organization"' in s]
    assert reads_of_organizations == []
    assert AuditEvent.objects.filter(
        action="instance.running", organization_id=organization.pk
    ).exists()


@pytest.mark.django_db
def test_a_row_this_transaction_holds_moves_without_being_read_again():
    from django.test.utils import CaptureQueriesContext

    from apps.core.models import AuditEvent
    from apps.orders.models import OrderState
    from apps.orders.services import move_order
    from tests.factories import OrderFactory

    order = OrderFactory(state=OrderState.SUBMITTED)
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        moved = move_order(order=order, to=OrderState.APPROVED, held=True)
        with pytest.raises(InvalidTransition):  # the table still decides
            move_order(order=moved, to=OrderState.SUBMITTED, held=True)

    assert moved is order and order.state == OrderState.APPROVED
    assert not [s for s in _sql(queries) if "FOR NO KEY UPDATE" in s]
    order.refresh_from_db()
    assert order.state == OrderState.APPROVED
    event = AuditEvent.objects.get(action="order.approved", object_id=str(order.pk))
    assert event.data == {"from": OrderState.SUBMITTED, "to": OrderState.APPROVED}


@pytest.mark.django_db
def test_a_move_left_unwritten_is_written_with_the_rows_next_change():
    """`write=False` records the move at once and writes it with the row's next change, in one
    UPDATE: the row in the database keeps its state until then."""
    instance = InstanceFactory(state=InstanceState.PENDING)
    with transaction.atomic():
        moved = move_instance(
            instance=instance, to=InstanceState.PROVISIONING, held=True, write=False
        )
        assert moved.state == InstanceState.PROVISIONING
        stored = Instance.objects.values_list("state", flat=True).get(pk=instance.pk)
        assert stored == InstanceState.PENDING
        moved.name = "renamed"
        with CaptureQueriesContext(connection) as captured:
            write_moved(moved, "name")
    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["UPDATE"]
    instance.refresh_from_db()
    assert (instance.state, instance.name) == (InstanceState.PROVISIONING, "renamed")
    assert AuditEvent.objects.filter(
        action="instance.provisioning", object_id=str(instance.pk)
    ).exists()


@pytest.mark.django_db
def test_a_row_with_a_move_unwritten_is_not_read_back_over_it():
    """Re-reading the row for the next move would lose the move made in memory: refused."""
    instance = InstanceFactory(state=InstanceState.PENDING)
    with transaction.atomic():
        moved = move_instance(
            instance=instance, to=InstanceState.PROVISIONING, held=True, write=False
        )
        with pytest.raises(RuntimeError, match="write_moved"):
            move_instance(instance=moved, to=InstanceState.ERROR, error_message="boom")


@pytest.mark.django_db
def test_a_move_to_a_state_whose_meters_read_the_row_back_is_always_written():
    instance = InstanceFactory(state=InstanceState.PROVISIONING)
    with transaction.atomic(), pytest.raises(ValueError, match="write it"):
        move_instance(instance=instance, to=InstanceState.RUNNING, held=True, write=False)
