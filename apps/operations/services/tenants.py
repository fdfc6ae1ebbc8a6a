"""Operators and their tenants' quotas. Changing a limit is `apps.quotas.services.set_limit`
(the operator API's too); a limit an organization does not have yet is added here, recorded
the same way (`quota.changed`, from nothing), so the quota history reads one action."""

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from apps.core.audit import record_event
from apps.core.transactions import lock
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.tenants.access import require_operator
from apps.tenants.models import Organization


@transaction.atomic
def add_quota_limit(
    *, organization: Organization, operator, resource: str, value: int, accelerator_model=None
) -> QuotaLimit:
    require_operator(
        operator, organization.park, _("Only this park's operators may change its quotas.")
    )
    if resource == QuotaResource.MODEL_ACCELERATORS and accelerator_model is None:
        raise ValidationError({"accelerator_model": _("Choose the accelerator model.")})
    if resource != QuotaResource.MODEL_ACCELERATORS:
        accelerator_model = None
    lock(Organization, organization.pk)
    limit = QuotaLimit(
        park=organization.park,
        organization=organization,
        resource=resource,
        accelerator_model=accelerator_model,
        limit=value,
    )
    limit.full_clean(validate_constraints=False)
    exists = QuotaLimit.objects.filter(
        organization=organization, resource=resource, accelerator_model=accelerator_model
    ).exists()
    if exists:
        raise ValidationError(
            _("The organization already has this limit: change it in the table above.")
        )
    try:
        with transaction.atomic():
            limit.save()
    except IntegrityError:
        raise ValidationError(_("The organization already has this limit.")) from None
    record_event(
        action="quota.changed",
        actor=operator,
        target=organization,
        data={
            "resource": resource,
            "accelerator_model": accelerator_model.slug if accelerator_model else None,
            "from": None,
            "to": value,
        },
    )
    return limit
