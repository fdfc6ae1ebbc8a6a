from drf_spectacular.utils import extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.generics import RetrieveAPIView
from rest_framework.response import Response

from apps.api.base import LoamAPIMixin
from apps.api.permissions import current_actor, current_organization
from apps.api.serializers.tenants import (
    ApiKeySerializer,
    MembershipSerializer,
    OrganizationSerializer,
)
from apps.tenants import services
from apps.tenants.models import ApiKey, Membership
from apps.tenants.roles import Action
from apps.tenants.selectors import for_organization


class OrganizationView(LoamAPIMixin, RetrieveAPIView):
    """The organization the key (or the browser session) acts for."""

    serializer_class = OrganizationSerializer
    required_actions = {"get": Action.VIEW}

    def get_object(self):
        return current_organization(self.request)


class MembershipViewSet(LoamAPIMixin, viewsets.ReadOnlyModelViewSet):
    queryset = Membership.objects.none()  # for the schema; requests use get_queryset()
    serializer_class = MembershipSerializer
    required_actions = {"list": Action.VIEW, "retrieve": Action.VIEW}

    def get_queryset(self):
        return (
            for_organization(Membership, current_organization(self.request))
            .select_related("user")
            .order_by("created_at")
        )


class ApiKeyViewSet(
    LoamAPIMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    queryset = ApiKey.objects.none()  # for the schema; requests use get_queryset()
    serializer_class = ApiKeySerializer
    required_actions = {
        "list": Action.MANAGE_API_KEYS,
        "retrieve": Action.MANAGE_API_KEYS,
        "revoke": Action.MANAGE_API_KEYS,
    }

    def get_queryset(self):
        return for_organization(ApiKey, current_organization(self.request)).order_by("-created_at")

    @extend_schema(request=None, responses=ApiKeySerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        key = services.revoke_api_key(api_key=self.get_object(), actor=current_actor(request))
        return Response(ApiKeySerializer(key).data)
