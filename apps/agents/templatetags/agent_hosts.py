"""The instance page's panel for a host on an agent server: live charts of its cards."""

from django import template

from apps.agents.selectors import agent_server_of
from apps.orders.models import InstanceState

register = template.Library()


@register.inclusion_tag("agents/partials/_instance_charts.html")
def agent_host_charts(instance):
    """Charts of the cards `instance` holds, polled from its telemetry endpoint; nothing for a
    host that does not run on an agent server (or is released)."""
    server = None
    if instance.state != InstanceState.RELEASED:
        server = agent_server_of(instance)
    return {"instance": instance, "server": server}
