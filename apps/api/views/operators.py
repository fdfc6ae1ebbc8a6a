"""Operator routes: a park's operators read and decide on their park's organizations, orders
and quotas (platform superusers on all parks)."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import BasePermission
from rest_framework.response import Response

from apps.api import idempotency
from apps.api.base import LoamAPIMixin
from apps.api.serializers.fields import BIGINT_MAX, InputSerializer, IntegerField
from apps.api.serializers.orders import OrderSerializer
from apps.api.serializers.tenants import OrganizationSerializer
from apps.orders import services as order_services
from apps.orders.models import Order
from apps.quotas.models import QuotaLimit
from apps.quotas.selectors import below_usage_warning
from apps.quotas.services import set_limit
from apps.tenants import services as tenant_services
from apps.tenants.models import ApiKey, Organization
from apps.tenants.selectors import is_operator, organizations_for_operator, parks_operated_by


class IsOperator(BasePermission):
    message = "Only park operators may use the operator API (with a signed-in session)."

    def has_permission(self, request, view):
        return not isinstance(request.auth, ApiKey) and is_operator(request.user)


class ReasonSerializer(InputSerializer):
    reason = serializers.CharField(max_length=1000)


class QuotaLimitSerializer(serializers.ModelSerializer):
    organization = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True, help_text="Null: the limit applies to the whole park."
    )
    accelerator_model = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text="Null: not one accelerator model's limit.",
    )

    class Meta:
        model = QuotaLimit
        fields = ["id", "organization", "resource", "accelerator_model", "limit", "updated_at"]
        read_only_fields = ["id", "organization", "resource", "accelerator_model", "updated_at"]
        extra_kwargs = {"limit": {"min_value": 0}}


class QuotaLimitChangedSerializer(QuotaLimitSerializer):
    warning = serializers.CharField(
        allow_null=True,
        help_text="Set when the new limit is below what is used already: nothing running is "
        "stopped; new demand is refused until use falls below it.",
    )

    class Meta(QuotaLimitSerializer.Meta):
        fields = [*QuotaLimitSerializer.Meta.fields, "warning"]


class QuotaLimitChangeSerializer(InputSerializer):
    """A PATCH changes the one thing an operator may change: the limit (required)."""

    limit = IntegerField(min_value=0)


# Documented by hand: a PATCH body's fields would all be shown optional, and this one is not.
LIMIT_CHANGE = {
    "type": "object",
    "properties": {"limit": {"type": "integer", "minimum": 0, "maximum": BIGINT_MAX}},
    "required": ["limit"],
}


class OperatorOrganizationViewSet(LoamAPIMixin, viewsets.ReadOnlyModelViewSet):
    permission_classes = [IsOperator]
    idempotency_scope = idempotency.USER
    serializer_class = OrganizationSerializer
    queryset = Organization.objects.none()
    filterset_fields = ["verification_state"]

    def get_queryset(self):
        return organizations_for_operator(self.request.user).order_by("name")

    @extend_schema(request=None, responses=OrganizationSerializer)
    @action(detail=True, methods=["post"], url_path="approve-verification")
    def approve_verification(self, request, pk=None):
        organization = tenant_services.approve_verification(
            organization=self.get_object(), operator=request.user
        )
        return Response(OrganizationSerializer(organization).data)

    @extend_schema(request=ReasonSerializer, responses=OrganizationSerializer)
    @action(detail=True, methods=["post"], url_path="reject-verification")
    def reject_verification(self, request, pk=None):
        organization = self.get_object()  # another park's: 404 before any input check
        serializer = ReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        organization = tenant_services.reject_verification(
            organization=organization,
            operator=request.user,
            reason=serializer.validated_data["reason"],
        )
        return Response(OrganizationSerializer(organization).data)


class OperatorOrderViewSet(LoamAPIMixin, viewsets.ReadOnlyModelViewSet):
    permission_classes = [IsOperator]
    idempotency_scope = idempotency.USER
    serializer_class = OrderSerializer
    queryset = Order.objects.none()
    filterset_fields = ["state", "kind"]

    def get_queryset(self):
        return Order.objects.filter(
            organization__park__in=parks_operated_by(self.request.user)
        ).order_by("-created_at")

    @extend_schema(request=None, responses=OrderSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        order = order_services.approve_order(order=self.get_object(), operator=request.user)
        return Response(OrderSerializer(order).data)

    @extend_schema(request=ReasonSerializer, responses=OrderSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        order = self.get_object()  # another park's: 404 before any input check
        serializer = ReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        order = order_services.reject_order(
            order=order,
            operator=request.user,
            reason=serializer.validated_data["reason"],
        )
        return Response(OrderSerializer(order).data)


class OperatorQuotaViewSet(
    LoamAPIMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    permission_classes = [IsOperator]
    idempotency_scope = idempotency.USER
    serializer_class = QuotaLimitSerializer
    queryset = QuotaLimit.objects.none()
    filterset_fields = ["organization", "resource"]
    http_method_names = ["get", "patch", "head", "options"]

    def get_queryset(self):
        return (
            QuotaLimit.objects.filter(park__in=parks_operated_by(self.request.user))
            .select_related("accelerator_model")
            .order_by("organization", "resource")
        )

    @extend_schema(
        request={"application/json": LIMIT_CHANGE}, responses=QuotaLimitChangedSerializer
    )
    def partial_update(self, request, pk=None):
        """Change one limit of the park (audited with the old and new value)."""
        limit = self.get_object()  # another park's: 404 before any input check
        serializer = QuotaLimitChangeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        limit = set_limit(
            limit=limit, operator=request.user, value=serializer.validated_data["limit"]
        )
        changed = self.get_queryset().get(pk=limit.pk)
        changed.warning = below_usage_warning(changed)
        return Response(QuotaLimitChangedSerializer(changed).data)
