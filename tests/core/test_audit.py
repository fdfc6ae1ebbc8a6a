import pytest

from apps.core.audit import record_event
from apps.core.models import AuditEvent
from tests.factories import InstanceFactory, OrganizationFactory, ParkFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_event_takes_organization_and_park_from_its_target():
    instance = InstanceFactory()
    user = UserFactory()
    event = record_event(action="instance.resized", actor=user, target=instance, data={"to": 4})
    event = AuditEvent.objects.get(pk=event.pk)
    assert event.organization_id == instance.organization_id
    assert event.park_id == instance.organization.park_id
    assert event.actor == user and event.actor_label == str(user)
    assert (event.object_type, event.object_id) == ("orders.instance", str(instance.pk))
    assert event.object_repr == str(instance)
    assert event.data == {"to": 4}


def test_event_on_an_organization_or_a_park():
    organization = OrganizationFactory()
    assert record_event(action="x", target=organization).organization_id == organization.pk
    park = ParkFactory()
    event = record_event(action="y", target=park)
    assert (event.park_id, event.organization_id) == (park.pk, None)


def test_event_without_a_user_names_the_system_or_the_given_actor():
    assert record_event(action="sweep").actor_label == "system"
    event = record_event(action="call", actor_label="api-key:ab12cd34", ip_address="10.0.0.1")
    assert (event.actor, event.actor_label, event.ip_address) == (
        None,
        "api-key:ab12cd34",
        "10.0.0.1",
    )


def test_an_organization_deleted_leaves_its_history_as_it_was():
    """The log names its tenants by id: a deletion neither rewrites it (as SET_NULL did) nor
    is blocked by it."""
    organization = OrganizationFactory()
    park_id, organization_id = organization.park_id, organization.pk
    event = record_event(action="organization.submitted", target=organization)
    organization.wallet.delete()  # made with it, and protected
    organization.delete()
    event.refresh_from_db()
    assert (event.park_id, event.organization_id) == (park_id, organization_id)
