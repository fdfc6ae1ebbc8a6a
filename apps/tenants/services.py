from django.db import transaction

from apps.core.transitions import transition
from apps.tenants.models import VERIFICATION_TRANSITIONS, Organization


@transaction.atomic
def move_verification(*, organization: Organization, to: str, actor=None, note: str = ""):
    return transition(
        organization,
        to,
        table=VERIFICATION_TRANSITIONS,
        field="verification_state",
        actor=actor,
        changes={"verification_note": note},
        audit_data={"note": note} if note else None,
    )
