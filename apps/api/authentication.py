from django.contrib.auth.models import AnonymousUser
from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from apps.core.web import client_ip
from apps.tenants.services import authenticate_api_key


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer loam_<prefix>_<secret>`: request.user is the key's creator (or
    anonymous), request.auth the ApiKey, which is what permissions and services check."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        keyword, _sep, secret = header.partition(" ")
        if keyword != self.keyword:
            return None
        secret = secret.strip()
        # A NUL cannot be in a key, and PostgreSQL cannot even look one up.
        key = (
            None
            if "\x00" in secret
            else authenticate_api_key(secret, ip_address=client_ip(request))
        )
        if key is None:
            raise exceptions.AuthenticationFailed(_("Invalid, expired or revoked API key."))
        return (AnonymousUser(), key)

    def authenticate_header(self, request):
        return self.keyword


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "apps.api.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "loam_<prefix>_<secret>"}
