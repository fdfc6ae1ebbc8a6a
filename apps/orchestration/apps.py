from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class OrchestrationConfig(AppConfig):
    name = "apps.orchestration"
    verbose_name = _("Orchestration")

    def ready(self):
        from apps.catalog.selectors import FREE_ROOM
        from apps.orchestration.selectors import free_room_by_model

        FREE_ROOM.plug(free_room_by_model)
