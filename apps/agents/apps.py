from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AgentsConfig(AppConfig):
    name = "apps.agents"
    verbose_name = _("Host agents")

    def ready(self):
        from apps.agents.hosts import AgentHostStore
        from apps.orchestration.agent_store import AGENT_HOST_STORE

        AGENT_HOST_STORE.plug(AgentHostStore)
