from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class OrchestrationConfig(AppConfig):
    name = "apps.orchestration"
    verbose_name = _("Orchestration")

    def ready(self):
        from django.conf import settings

        from apps.catalog.selectors import FREE_ROOM
        from apps.orchestration.backends.registry import load_drivers
        from apps.orchestration.reservations import task_quota_usage
        from apps.orchestration.selectors import free_room_by_model
        from apps.orchestration.tasks import accelerator_limit_changed
        from apps.quotas.services import ACCELERATOR_LIMIT_CHANGED, QUOTA_HOLDERS

        load_drivers(settings.LOAM_BACKEND_DRIVERS)
        FREE_ROOM.plug(free_room_by_model)
        QUOTA_HOLDERS.plug(task_quota_usage)
        ACCELERATOR_LIMIT_CHANGED.plug(accelerator_limit_changed)
