from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PartnersConfig(AppConfig):
    name = "apps.partners"
    verbose_name = _("Partners")

    def ready(self):
        from apps.catalog.services import PRICE_FLOOR
        from apps.partners.services import check_floor

        PRICE_FLOOR.plug(check_floor)
