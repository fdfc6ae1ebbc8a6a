"""move_verification: every allowed step of VERIFICATION_TRANSITIONS moves the organization and
writes an audit event; every other pair is refused and changes nothing."""

import pytest

from apps.core.errors import DomainError, InvalidTransition
from apps.core.models import AuditEvent
from apps.tenants.models import VERIFICATION_TRANSITIONS, Organization, VerificationState
from apps.tenants.services import move_verification
from tests.factories import OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db

ALLOWED = sorted(
    (str(src), str(dst)) for src, targets in VERIFICATION_TRANSITIONS.items() for dst in targets
)
REFUSED = sorted(
    (str(src), str(dst))
    for src in VerificationState.values
    for dst in VerificationState.values
    if dst not in VERIFICATION_TRANSITIONS[src]
)


def events_for(organization):
    return AuditEvent.objects.filter(
        object_type="tenants.organization", object_id=str(organization.pk)
    )


def test_table_covers_every_state():
    assert set(VERIFICATION_TRANSITIONS) == set(VerificationState.values)


@pytest.mark.parametrize(("source", "target"), ALLOWED)
def test_allowed_transition(source, target):
    operator = UserFactory()
    organization = OrganizationFactory(verification_state=source)

    moved = move_verification(organization=organization, to=target, actor=operator)

    assert moved.verification_state == target
    assert Organization.objects.get(pk=organization.pk).verification_state == target
    event = events_for(organization).get()
    assert event.action == f"organization.{target}"
    assert event.data == {"from": source, "to": target}
    assert (event.actor, event.actor_label) == (operator, str(operator))
    assert event.organization_id == organization.pk
    assert event.park_id == organization.park_id


@pytest.mark.parametrize(("source", "target"), REFUSED)
def test_refused_transition(source, target):
    organization = OrganizationFactory(verification_state=source, verification_note="as it was")

    with pytest.raises(InvalidTransition):
        move_verification(organization=organization, to=target, actor=UserFactory(), note="x")

    organization.refresh_from_db()
    assert organization.verification_state == source
    assert organization.verification_note == "as it was"
    assert not events_for(organization).exists()


def test_note_is_saved_and_audited():
    organization = OrganizationFactory(verification_state=VerificationState.SUBMITTED)

    move_verification(
        organization=organization, to=VerificationState.REJECTED, note="licence scan unreadable"
    )

    organization.refresh_from_db()
    assert organization.verification_state == VerificationState.REJECTED
    assert organization.verification_note == "licence scan unreadable"
    event = events_for(organization).get()
    assert event.data == {
        "from": "submitted",
        "to": "rejected",
        "note": "licence scan unreadable",
    }
    assert event.actor_label == "system"


def test_full_round_of_rejection_and_resubmission():
    organization = OrganizationFactory()
    for target in ("submitted", "rejected", "submitted", "verified"):
        move_verification(organization=organization, to=target)
    organization.refresh_from_db()
    assert organization.is_verified
    actions = list(events_for(organization).order_by("id").values_list("action", flat=True))
    assert actions == [
        "organization.submitted",
        "organization.rejected",
        "organization.submitted",
        "organization.verified",
    ]


def test_verifying_without_identity_is_refused_by_the_service():
    # The transition table allows submitted -> verified; the service names what is missing
    # (and the check constraint would still refuse the row).
    organization = OrganizationFactory(
        anonymous=True, verification_state=VerificationState.SUBMITTED
    )

    with pytest.raises(DomainError) as excinfo:
        move_verification(organization=organization, to=VerificationState.VERIFIED)
    assert excinfo.value.code == "verification_incomplete"

    organization.refresh_from_db()
    assert organization.verification_state == VerificationState.SUBMITTED
    assert not events_for(organization).exists()
