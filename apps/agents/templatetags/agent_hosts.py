"""The instance pages' pieces for a host on an agent server: live charts of its cards, the
web terminal's button, the buttons that open its web services, and how far the copy of its
saved image to its server is."""

from django import template

from apps.agents.selectors import agent_server_of, awaited_copy_of, host_service_names
from apps.agents.terminal import has_terminal
from apps.orders.hosts import service_url
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


@register.inclusion_tag("agents/partials/_host_services.html")
def host_service_links(instance, may_operate: bool):
    """A button per web service of the host (JupyterLab, TensorBoard), opening it in a new tab
    through the portal: while it runs, for members whose role may start and stop hosts."""
    services = []
    if may_operate and instance.state == InstanceState.RUNNING and instance.image.services:
        given = host_service_names(instance)
        services = [
            {
                "name": service.name,
                "label": service.label,
                "url": service_url(instance.pk, service.name),
            }
            for service in instance.image.services
            if service.name in given
        ]
    return {"services": services}


@register.inclusion_tag("agents/partials/_terminal_button.html", takes_context=True)
def terminal_button(context, instance):
    """The web terminal's button, for a running agent host and a role that may operate it
    (`org_can.order`, the page's own rule for stop and start)."""
    org_can = context.get("org_can") or {}
    return {"instance": instance, "shown": org_can.get("order") and has_terminal(instance)}


@register.inclusion_tag("agents/partials/_image_copy.html")
def image_copy_progress(instance):
    """While a host waits for its saved image to be copied to its server: where and how far."""
    return {"copy": awaited_copy_of(instance), "instance": instance}
