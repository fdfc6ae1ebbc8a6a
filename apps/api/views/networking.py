"""`/api/v1/security-groups/`: the organization's security groups and their rules, the same
services the console calls (`apps.orders.networking`). A rule change applies to every host of
the group at once."""

from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.api.base import LoamAPIMixin
from apps.api.permissions import current_actor, current_organization
from apps.api.serializers.networking import (
    SecurityGroupInputSerializer,
    SecurityGroupRuleInputSerializer,
    SecurityGroupRuleSerializer,
    SecurityGroupSerializer,
    SecurityGroupUpdateSerializer,
)
from apps.orders import networking
from apps.orders.models import SecurityGroup, SecurityGroupRule
from apps.orders.selectors import security_group_host_counts
from apps.tenants.roles import Action
from apps.tenants.selectors import for_organization

RULE_ID = OpenApiParameter("rule_id", OpenApiTypes.INT, OpenApiParameter.PATH)


def valid(serializer_class, data, **kwargs) -> dict:
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


@extend_schema_view(
    list=extend_schema(
        description="The organization's security groups, the default first (it is made the "
        "first time it is needed: every organization has one)."
    ),
    create=extend_schema(
        request=SecurityGroupInputSerializer,
        responses={201: SecurityGroupSerializer},
        description="A new group, without rules: nothing reaches its hosts until rules allow.",
    ),
    partial_update=extend_schema(
        request=SecurityGroupUpdateSerializer,
        responses=SecurityGroupSerializer,
        description="Rename a group or change its description (the default keeps its name).",
    ),
    destroy=extend_schema(
        responses={204: None},
        description="Delete a group no host uses; the default group and a group in use are a 409.",
    ),
)
class SecurityGroupViewSet(
    LoamAPIMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    queryset = SecurityGroup.objects.none()  # for the schema; requests use get_queryset()
    serializer_class = SecurityGroupSerializer
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    required_actions = {
        "list": Action.VIEW,
        "retrieve": Action.VIEW,
        "create": Action.ORDER,
        "partial_update": Action.ORDER,
        "destroy": Action.ORDER,
        "rules": Action.VIEW,
        "add_rule": Action.ORDER,
        "rule": Action.VIEW,
        "remove_rule": Action.ORDER,
    }
    filterset_fields = ["is_default"]
    ordering_fields = ["name", "created_at"]

    def get_queryset(self):
        organization = current_organization(self.request)
        if self.action == "list" and organization is not None:
            networking.default_security_group(organization)
        return (
            for_organization(SecurityGroup, organization)
            .prefetch_related(Prefetch("rules", queryset=SecurityGroupRule.objects.order_by("pk")))
            .order_by("-is_default", "name", "pk")
        )

    def get_serializer_context(self):
        context = super().get_serializer_context()
        organization = current_organization(self.request)
        context["host_counts"] = (
            security_group_host_counts(organization) if organization is not None else {}
        )
        return context

    def _answer(self, group, status_code=status.HTTP_200_OK):
        group = self.get_queryset().get(pk=group.pk)
        return Response(self.get_serializer(group).data, status=status_code)

    def create(self, request):
        data = valid(SecurityGroupInputSerializer, request.data)
        group = networking.create_security_group(
            organization=current_organization(request), actor=current_actor(request), **data
        )
        return self._answer(group, status.HTTP_201_CREATED)

    def partial_update(self, request, pk=None):
        group = self.get_object()
        data = valid(SecurityGroupUpdateSerializer, request.data)
        group = networking.update_security_group(
            group=group,
            actor=current_actor(request),
            name=data.get("name", group.name),
            description=data.get("description", group.description),
        )
        return self._answer(group)

    def destroy(self, request, pk=None):
        networking.delete_security_group(group=self.get_object(), actor=current_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=SecurityGroupRuleSerializer(many=True))
    @action(detail=True, methods=["get"], pages=True, filter_backends=[])
    def rules(self, request, pk=None):
        """The group's rules, oldest first."""
        rules = self.get_object().rules.order_by("pk")
        page = self.paginate_queryset(rules)
        if page is not None:
            return self.get_paginated_response(SecurityGroupRuleSerializer(page, many=True).data)
        return Response(SecurityGroupRuleSerializer(rules, many=True).data)

    @extend_schema(
        request=SecurityGroupRuleInputSerializer,
        responses={201: SecurityGroupRuleSerializer},
        description="Add a rule: the group's hosts let that traffic in at once. A bad source "
        "(not a CIDR network) or range is a 400 naming the field.",
    )
    @rules.mapping.post
    def add_rule(self, request, pk=None):
        group = self.get_object()
        data = valid(SecurityGroupRuleInputSerializer, request.data)
        rule = networking.add_security_group_rule(group=group, actor=current_actor(request), **data)
        return Response(SecurityGroupRuleSerializer(rule).data, status=status.HTTP_201_CREATED)

    def _rule(self, rule_id) -> SecurityGroupRule:
        return get_object_or_404(SecurityGroupRule, group=self.get_object(), pk=rule_id)

    @extend_schema(responses=SecurityGroupRuleSerializer, parameters=[RULE_ID])
    @action(
        detail=True,
        methods=["get"],
        url_path=r"rules/(?P<rule_id>[0-9]+)",
        url_name="rule",
    )
    def rule(self, request, pk=None, rule_id=None):
        """One rule of the group."""
        return Response(SecurityGroupRuleSerializer(self._rule(rule_id)).data)

    @extend_schema(
        responses={204: None},
        parameters=[RULE_ID],
        description="Remove a rule: the group's hosts stop letting that traffic in at once.",
    )
    @rule.mapping.delete
    def remove_rule(self, request, pk=None, rule_id=None):
        networking.remove_security_group_rule(
            rule=self._rule(rule_id), actor=current_actor(request)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
