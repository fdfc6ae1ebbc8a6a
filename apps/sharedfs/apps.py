from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SharedfsConfig(AppConfig):
    name = "apps.sharedfs"
    verbose_name = _("Shared file storage")
