"""The ASGI application: HTTP to Django, and the web terminal's WebSocket (signed-in users by
their session, from the site's own pages only). Production serves it with Daphne beside
gunicorn, nginx sending /ws/ here (deploy/nginx/loam.conf); `manage.py runserver` serves both."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# Django first: the consumers import models.
django_application = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from apps.agents.consumers import TerminalConsumer  # noqa: E402

websocket_urlpatterns = [
    path("ws/instances/<int:instance_id>/terminal/", TerminalConsumer.as_asgi()),
]

application = ProtocolTypeRouter(
    {
        "http": django_application,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
