"""`/api/v1/webhooks/`: a tenant's webhook endpoints and their delivery logs."""

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.api.base import CleanInputMixin
from apps.api.permissions import OrganizationAction, current_actor, current_organization
from apps.api.serializers.webhooks import (
    WebhookDeliverySerializer,
    WebhookEndpointCreatedSerializer,
    WebhookEndpointInputSerializer,
    WebhookEndpointSerializer,
    WebhookEndpointUpdateSerializer,
)
from apps.tenants.roles import Action
from apps.webhooks import selectors, services
from apps.webhooks.models import WebhookEndpoint


@extend_schema_view(
    create=extend_schema(
        request=WebhookEndpointInputSerializer,
        responses={201: WebhookEndpointCreatedSerializer},
        description="Creates an endpoint. The answer holds its signing secret, shown only once.",
    ),
    partial_update=extend_schema(
        request=WebhookEndpointUpdateSerializer, responses=WebhookEndpointSerializer
    ),
    destroy=extend_schema(responses={204: None}),
)
class WebhookEndpointViewSet(
    CleanInputMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    queryset = WebhookEndpoint.objects.none()  # for the schema; requests use get_queryset()
    serializer_class = WebhookEndpointSerializer
    permission_classes = [OrganizationAction]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    required_actions = {
        "list": Action.VIEW,
        "retrieve": Action.VIEW,
        "deliveries": Action.VIEW,
        "create": Action.MANAGE_API_KEYS,
        "partial_update": Action.MANAGE_API_KEYS,
        "destroy": Action.MANAGE_API_KEYS,
        "redeliver": Action.MANAGE_API_KEYS,
    }

    def get_queryset(self):
        return selectors.endpoints_for(current_organization(self.request))

    def create(self, request):
        data = _valid(WebhookEndpointInputSerializer, request.data)
        endpoint, secret = services.create_endpoint(
            organization=current_organization(request), actor=current_actor(request), **data
        )
        endpoint.secret = secret
        return Response(
            WebhookEndpointCreatedSerializer(endpoint).data, status=status.HTTP_201_CREATED
        )

    def partial_update(self, request, pk=None):
        endpoint = self.get_object()
        data = _valid(WebhookEndpointUpdateSerializer, request.data)
        endpoint = services.update_endpoint(endpoint=endpoint, actor=current_actor(request), **data)
        return Response(WebhookEndpointSerializer(endpoint).data)

    def destroy(self, request, pk=None):
        services.delete_endpoint(endpoint=self.get_object(), actor=current_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=WebhookDeliverySerializer(many=True))
    @action(detail=True, methods=["get"], pages=True, filter_backends=[])
    def deliveries(self, request, pk=None):
        """The endpoint's delivery log, newest first."""
        deliveries = selectors.deliveries_for(self.get_object())
        page = self.paginate_queryset(deliveries)  # paginated wherever the API paginates lists
        if page is not None:
            return self.get_paginated_response(WebhookDeliverySerializer(page, many=True).data)
        return Response(WebhookDeliverySerializer(deliveries, many=True).data)

    @extend_schema(
        request=None,
        responses=WebhookDeliverySerializer,
        parameters=[OpenApiParameter("delivery_id", int, OpenApiParameter.PATH)],
        description="Starts a new attempt series for a delivered or failed delivery.",
    )
    @action(
        detail=True,
        methods=["post"],
        url_path=r"deliveries/(?P<delivery_id>[0-9]+)/redeliver",
        url_name="redeliver",
    )
    def redeliver(self, request, pk=None, delivery_id=None):
        endpoint = self.get_object()
        delivery = selectors.get_delivery(endpoint, delivery_id)
        delivery = services.redeliver(delivery=delivery, actor=current_actor(request))
        return Response(WebhookDeliverySerializer(delivery).data)


def _valid(serializer_class, data) -> dict:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)
