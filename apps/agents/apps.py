from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AgentsConfig(AppConfig):
    name = "apps.agents"
    verbose_name = _("Host agents")

    def ready(self):
        from apps.agents.hosts import AgentHostStore
        from apps.agents.saved_images import saved_image_quota_usage
        from apps.agents.selectors import (
            held_image_codes,
            nodes_awaiting_image,
            nodes_without_image,
        )
        from apps.catalog.selectors import HELD_IMAGES
        from apps.orchestration.agent_store import AGENT_HOST_STORE
        from apps.orchestration.services import NODES_AWAITING_IMAGE, NODES_WITHOUT_IMAGE
        from apps.quotas.services import QUOTA_HOLDERS

        AGENT_HOST_STORE.plug(AgentHostStore)
        HELD_IMAGES.plug(held_image_codes)
        NODES_WITHOUT_IMAGE.plug(nodes_without_image)
        NODES_AWAITING_IMAGE.plug(nodes_awaiting_image)
        QUOTA_HOLDERS.plug(saved_image_quota_usage)
