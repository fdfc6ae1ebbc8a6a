from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AgentsConfig(AppConfig):
    name = "apps.agents"
    verbose_name = _("Host agents")

    def ready(self):
        from apps.agents.hosts import AgentHostStore
        from apps.agents.selectors import held_image_codes, nodes_without_image
        from apps.catalog.selectors import HELD_IMAGES
        from apps.orchestration.agent_store import AGENT_HOST_STORE
        from apps.orchestration.services import NODES_WITHOUT_IMAGE

        AGENT_HOST_STORE.plug(AgentHostStore)
        HELD_IMAGES.plug(held_image_codes)
        NODES_WITHOUT_IMAGE.plug(nodes_without_image)
