from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class QuotasConfig(AppConfig):
    name = "apps.quotas"
    verbose_name = _("Quotas")

    def ready(self):
        from apps.quotas.services import apply_default_limits
        from apps.tenants.services import TIER_ENTERED

        TIER_ENTERED.plug(apply_default_limits)
