from django.db import transaction
from django.utils.translation import gettext as _

from apps.core.errors import DomainError
from apps.core.transitions import transition
from apps.tenants.models import VERIFICATION_TRANSITIONS, Organization, VerificationState


@transaction.atomic
def move_verification(*, organization: Organization, to: str, actor=None, note: str = ""):
    if to == VerificationState.VERIFIED and not (
        organization.legal_name and organization.credit_code
    ):
        raise DomainError(
            _("An organization needs its legal name and credit code before it can be verified."),
            code="verification_incomplete",
        )
    return transition(
        organization,
        to,
        table=VERIFICATION_TRANSITIONS,
        field="verification_state",
        actor=actor,
        changes={"verification_note": note},
        audit_data={"note": note} if note else None,
    )
