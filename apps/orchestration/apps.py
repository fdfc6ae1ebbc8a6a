from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class OrchestrationConfig(AppConfig):
    name = "apps.orchestration"
    verbose_name = _("Orchestration")
