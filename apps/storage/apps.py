from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class StorageConfig(AppConfig):
    name = "apps.storage"
    verbose_name = _("Storage")

    def ready(self):
        from apps.quotas.services import QUOTA_HOLDERS
        from apps.storage.selectors import volume_quota_usage

        QUOTA_HOLDERS.plug(volume_quota_usage)
