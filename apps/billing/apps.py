from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BillingConfig(AppConfig):
    name = "apps.billing"
    verbose_name = _("Billing")

    def ready(self):
        from apps.billing.selectors import committed_spend
        from apps.quotas.services import COMMITTED_SPEND

        COMMITTED_SPEND.plug(committed_spend)
