from django.conf import settings
from django.db import transaction

from apps.quotas.models import QuotaLimit
from apps.tenants.models import Organization


@transaction.atomic
def apply_default_limits(*, organization: Organization, tier: str) -> None:
    """Give an organization the park's default limits for its tier ("unverified"/"verified").

    Limits only grow here: an operator's higher limit is kept, and a tier never lowers one.
    """
    for resource, default in settings.LOAM_DEFAULT_QUOTAS[tier].items():
        limit, created = QuotaLimit.objects.select_for_update().get_or_create(
            park=organization.park,
            organization=organization,
            resource=resource,
            accelerator_model=None,
            defaults={"limit": default},
        )
        if not created and limit.limit < default:
            limit.limit = default
            limit.save(update_fields=["limit", "updated_at"])
