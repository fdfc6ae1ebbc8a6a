"""The agent API, `/api/v1/agent/` (docs/agent-protocol.md): what `loam-agent` calls.

JSON in and out; every error is application/problem+json (RFC 9457, `apps.api.exceptions`)
whose `detail` says what to do, since the agent shows it to the server's operator. Enrolment
is authorized by its join token; every other call by the server's credential
(`Authorization: Bearer <credential>`), 401 when it is unknown or revoked. CSRF does not apply
(no cookies), and neither do the partner API's throttles. These endpoints are for the agent
only and are left out of the partner API's OpenAPI schema.
"""

from django.contrib.auth.models import AnonymousUser
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.agents import image_copies, selectors, services
from apps.agents.serializers import (
    EnrolSerializer,
    HeartbeatSerializer,
    HostReportsSerializer,
)
from apps.api.exceptions import flatten_errors, problem
from apps.api.parsers import DepthLimitedJSONParser
from apps.core.web import client_ip


class AgentCredentialAuthentication(BaseAuthentication):
    """`Authorization: Bearer <credential>`: request.auth is the AgentServer."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = get_authorization_header(request).decode("latin-1")
        keyword, _sep, secret = header.partition(" ")
        if keyword != self.keyword or not secret.strip():
            raise AuthenticationFailed(
                _(
                    "Send this server's credential as “Authorization: Bearer <credential>”. A "
                    "server without one enrols first: “loam-agent enrol --token <join token>”."
                )
            )
        server = services.authenticate_server(secret.strip())
        if server is None:
            raise AuthenticationFailed(
                _(
                    "This server's credential is unknown or was revoked. Ask the park's operator "
                    "for a join token and run “loam-agent enrol --force --token <join token>”."
                )
            )
        return (AnonymousUser(), server)

    def authenticate_header(self, request):
        return self.keyword


def invalid(errors) -> Response:
    """400 naming every field that is wrong, in `detail` (what the agent shows) and `errors`."""
    flat = flatten_errors(errors if isinstance(errors, dict) else {"non_field_errors": errors})
    fields = "; ".join(f"{field}: {' '.join(messages)}" for field, messages in flat.items())
    return problem(
        status_code=400,
        code="invalid",
        title="Bad Request",
        detail=_("Fix these fields and send the request again — %(fields)s") % {"fields": fields},
        errors=flat,
    )


@extend_schema(exclude=True)
class AgentView(APIView):
    authentication_classes = [AgentCredentialAuthentication]
    permission_classes = []  # the authentication refuses every request without a credential
    throttle_classes = []  # each server calls every few seconds by design
    parser_classes = [DepthLimitedJSONParser]
    renderer_classes = [JSONRenderer]


class EnrolView(AgentView):
    """POST: a join token and the server's facts for the server's id and credential."""

    authentication_classes = []  # the join token is the authority

    def post(self, request):
        serializer = EnrolSerializer(data=request.data)
        if not serializer.is_valid():
            return invalid(serializer.errors)
        data = serializer.validated_data
        server, credential = services.enrol_server(
            token=data["join_token"],
            server=dict(data["server"]),
            readers=[dict(reader) for reader in data["readers"]],
            cards=[dict(card) for card in data["cards"]],
            images=[dict(image) for image in data["images"]] if "images" in data else None,
            ip_address=client_ip(request),
        )
        return Response(
            {"server_id": server.public_id, "credential": credential},
            status=status.HTTP_201_CREATED,
        )


class HeartbeatView(AgentView):
    """POST: the server's inventory and each card's figures, every few seconds."""

    def post(self, request):
        serializer = HeartbeatSerializer(data=request.data)
        if not serializer.is_valid():
            return invalid(serializer.errors)
        data = serializer.validated_data
        services.record_heartbeat(
            server=request.auth,
            agent_version=data["agent_version"],
            taken_at=data["taken_at"],
            readers=[dict(reader) for reader in data["readers"]],
            cards=[dict(card) for card in data["cards"]],
            samples=[dict(sample) for sample in data["samples"]],
            network={key: data[key] for key in ("public_address", "public_ports") if key in data},
            images=[dict(image) for image in data["images"]] if "images" in data else None,
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


def _matches(if_none_match: str, etag: str) -> bool:
    tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return etag in tags or "*" in tags


class HostsView(AgentView):
    """GET: the hosts the portal wants on this server, with an ETag (304 while unchanged)."""

    def get(self, request):
        server = request.auth
        etag = selectors.hosts_etag(server)
        if _matches(request.headers.get("If-None-Match", ""), etag):
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        return Response(
            {
                "hosts": selectors.desired_hosts(server),
                "saved_images": selectors.kept_saved_images(server),
                "image_transfers": image_copies.image_transfers(server),
                "volumes": selectors.listed_volumes(server),
            },
            headers={"ETag": etag, "Cache-Control": "no-cache"},
        )


class HostReportView(AgentView):
    """POST: what each host on this server actually is. A report older than one applied
    already is a 204 too: the agent has nothing to fix, and a newer report said it all."""

    def post(self, request):
        serializer = HostReportsSerializer(data=request.data)
        if not serializer.is_valid():
            return invalid(serializer.errors)
        if "volumes" in serializer.validated_data:
            services.record_volume_reports(
                server=request.auth,
                reports=[dict(report) for report in serializer.validated_data["volumes"]],
            )
        services.record_host_reports(
            server=request.auth,
            sequence=serializer.validated_data["sequence"],
            reports=[dict(report) for report in serializer.validated_data["hosts"]],
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
