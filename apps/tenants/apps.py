from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TenantsConfig(AppConfig):
    name = "apps.tenants"
    verbose_name = _("Tenants")

    def ready(self):
        from apps.tenants import signals  # noqa: F401  (connects the sign-in audit receivers)
