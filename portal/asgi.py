"""The ASGI application: HTTP to Django, and the web terminal's WebSocket (signed-in users by
their session, from the site's own pages only: not another site's, nor the hosts' web services'
origin, which shares the portal's name and cookies). Production serves it with Daphne beside
gunicorn, nginx sending /ws/ here (deploy/nginx/loam.conf); `manage.py runserver` serves both."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# Django first: the consumers import models.
django_application = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import (  # noqa: E402
    AllowedHostsOriginValidator,
    WebsocketDenier,
)
from django.conf import settings  # noqa: E402
from django.urls import path  # noqa: E402

from apps.agents.consumers import TerminalConsumer  # noqa: E402

websocket_urlpatterns = [
    path("ws/instances/<int:instance_id>/terminal/", TerminalConsumer.as_asgi()),
]


class RefuseServicesOrigin:
    """A script a host serves on LOAM_SERVICES_URL (another port of the portal's name, so
    `AllowedHostsOriginValidator` lets it by) must not open a terminal as the member viewing it."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        origin = dict(scope.get("headers", ())).get(b"origin", b"").decode("latin-1")
        if settings.LOAM_SERVICES_URL and origin.rstrip("/") == settings.LOAM_SERVICES_URL:
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": django_application,
        "websocket": RefuseServicesOrigin(
            AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)
