from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WorkloadsConfig(AppConfig):
    name = "apps.workloads"
    verbose_name = _("Workloads")
