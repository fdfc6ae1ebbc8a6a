from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class QuotasConfig(AppConfig):
    name = "apps.quotas"
    verbose_name = _("Quotas")

    def ready(self):
        from apps.catalog.selectors import ORDER_REFUSALS
        from apps.quotas.services import apply_default_limits, flavor_refusals
        from apps.tenants.services import TIER_ENTERED

        TIER_ENTERED.plug(apply_default_limits)
        ORDER_REFUSALS.plug(flavor_refusals)
