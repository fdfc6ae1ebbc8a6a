"""Quotes, orders and instances: the same services the pages call."""

from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.api.base import LoamAPIMixin
from apps.api.permissions import current_actor, current_organization
from apps.api.serializers.networking import (
    InstanceSecurityGroupSerializer,
    PortMappingInputSerializer,
    PortMappingSerializer,
)
from apps.api.serializers.orders import (
    BandwidthSerializer,
    DataDiskSerializer,
    DiskSerializer,
    HostRequestSerializer,
    InstanceSerializer,
    OrderSerializer,
    QuotaSerializer,
    QuoteSerializer,
    ReleaseSerializer,
    ResizeSerializer,
    StartSerializer,
    StopScheduleSerializer,
    order_data,
)
from apps.api.serializers.storage import VolumeSerializer
from apps.orders import expiry, networking, operations, services
from apps.orders.models import Instance, Order, OrderKind, PortMapping
from apps.orders.selectors import port_mappings_of
from apps.orders.volumes import keep_data_disk
from apps.quotas.models import QuotaLimit
from apps.quotas.services import organization_usage
from apps.tenants.roles import Action
from apps.tenants.selectors import for_organization

MAPPING_ID = OpenApiParameter("mapping_id", OpenApiTypes.INT, OpenApiParameter.PATH)


class QuoteView(LoamAPIMixin, APIView):
    required_actions = {"post": Action.VIEW}

    @extend_schema(request=HostRequestSerializer, responses=QuoteSerializer)
    def post(self, request):
        """What a create order would cost and where it would land; nothing is reserved."""
        organization = current_organization(request)
        serializer = HostRequestSerializer(
            data=request.data, park=organization.park, organization=organization
        )
        serializer.is_valid(raise_exception=True)
        host = serializer.host_request()
        services.validate_host_request(organization, host)
        return Response(
            QuoteSerializer(services.quote(organization=organization, request=host)).data
        )


class OrderViewSet(
    LoamAPIMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    queryset = Order.objects.none()
    serializer_class = OrderSerializer
    required_actions = {
        "list": Action.VIEW,
        "retrieve": Action.VIEW,
        "create": Action.ORDER,
        "cancel": Action.ORDER,
    }
    filterset_fields = ["kind", "state", "instance"]
    ordering_fields = ["created_at", "state", "kind"]

    def get_queryset(self):
        return for_organization(Order, current_organization(self.request)).order_by("-created_at")

    @extend_schema(request=HostRequestSerializer, responses={201: OrderSerializer(many=True)})
    def create(self, request):
        """Order hosts (one order per host). Send an Idempotency-Key to retry safely."""
        organization = current_organization(request)
        serializer = HostRequestSerializer(
            data=request.data, park=organization.park, organization=organization
        )
        serializer.is_valid(raise_exception=True)
        orders = services.submit_create(
            organization=organization,
            actor=current_actor(request),
            request=serializer.host_request(),
        )
        return Response([order_data(order) for order in orders], status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=OrderSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel an order that waits for approval; its quota is free again."""
        order = services.cancel_order(order=self.get_object(), actor=current_actor(request))
        return Response(OrderSerializer(order).data)


def _operation(kind, serializer_class=None, **route):
    """The route of one instance operation. The operation is queued, so the answer is a 202 with
    its order (poll it). Documented after `action` wraps the handler: `action` replaces the
    handler's `kwargs`, where an earlier @extend_schema would keep its schema (and be lost)."""

    def run(self, request, pk=None):
        instance = self.get_object()
        params = {}
        if serializer_class is not None:
            kwargs = (
                {"park": instance.organization.park} if serializer_class is ResizeSerializer else {}
            )
            serializer = serializer_class(data=request.data, **kwargs)
            serializer.is_valid(raise_exception=True)
            params = serializer.validated_data
        order = operations.request_operation(
            instance=instance, actor=current_actor(request), kind=kind, params=params
        )
        return Response(OrderSerializer(order).data, status=status.HTTP_202_ACCEPTED)

    run.__name__ = str(kind)  # the router names the route after it
    # The enum's name, not its label: a label read at import is in the default language.
    run.__doc__ = f"Request the {kind.name.lower().replace('_', ' ')} operation; poll the order."
    routed = action(detail=True, methods=["post"], **route)(run)
    return extend_schema(request=serializer_class, responses={202: OrderSerializer})(routed)


class InstanceViewSet(LoamAPIMixin, viewsets.ReadOnlyModelViewSet):
    queryset = Instance.objects.none()
    serializer_class = InstanceSerializer
    required_actions = {
        "list": Action.VIEW,
        "retrieve": Action.VIEW,
        "stop": Action.ORDER,
        "start": Action.ORDER,
        "resize": Action.ORDER,
        "expand_disk": Action.ORDER,
        "set_bandwidth": Action.ORDER,
        "release": Action.RELEASE,
        "port_mappings": Action.VIEW,
        "add_port_mapping": Action.ORDER,
        "port_mapping": Action.VIEW,
        "remove_port_mapping": Action.ORDER,
        "security_group": Action.ORDER,
        "schedule_stop": Action.ORDER,
        "data_disk": Action.RELEASE,
    }
    filterset_fields = ["state"]
    ordering_fields = ["created_at", "name", "state"]

    def get_queryset(self):
        return (
            for_organization(Instance, current_organization(self.request))
            .select_related("flavor", "image", "region", "node", "pool__backend")
            .prefetch_related(Prefetch("orders"))
            .order_by("-created_at")
        )

    stop = _operation(OrderKind.STOP)
    start = _operation(OrderKind.START, StartSerializer)
    release = _operation(OrderKind.RELEASE, ReleaseSerializer)
    resize = _operation(OrderKind.RESIZE, ResizeSerializer)
    expand_disk = _operation(OrderKind.EXPAND_DISK, DiskSerializer, url_path="expand-disk")
    set_bandwidth = _operation(
        OrderKind.SET_BANDWIDTH, BandwidthSerializer, url_path="set-bandwidth"
    )

    @extend_schema(
        request=StopScheduleSerializer,
        responses=InstanceSerializer,
        description="Schedule the host's stop (定时关机) at `at` or `after_hours` from now, or "
        'clear it with `{"at": null}`. It stops then, as with the stop operation, whatever '
        "the park's idle policy says; the schedule is cleared once the host stops. Only a "
        "running or starting host takes one (else 409); a time past, beyond 30 days or "
        "hours outside 1–720 are a 400.",
    )
    @action(detail=True, methods=["post"], url_path="schedule-stop")
    def schedule_stop(self, request, pk=None):
        instance = self.get_object()
        serializer = StopScheduleSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        instance = expiry.schedule_stop(
            instance=instance, actor=current_actor(request), **serializer.validated_data
        )
        return Response(InstanceSerializer(self.get_queryset().get(pk=instance.pk)).data)

    @extend_schema(
        request=DataDiskSerializer,
        responses=VolumeSerializer,
        description="Whether the host's data disk is kept as a cloud disk when the host is "
        "released (by you or by the park's auto-release) or deleted with it, the default; "
        "its cloud disk answers. A host whose data disk is no volume (its server keeps "
        "none), or that is being released, is a 409; keeping one over the storage quota too.",
    )
    @action(detail=True, methods=["post"], url_path="data-disk")
    def data_disk(self, request, pk=None):
        serializer = DataDiskSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        volume = keep_data_disk(
            instance=self.get_object(),
            actor=current_actor(request),
            keep=serializer.validated_data["keep_on_release"],
        )
        return Response(VolumeSerializer(volume).data)

    # --- reaching the host: port mappings and its security group -------------------------------

    @extend_schema(responses=PortMappingSerializer(many=True))
    @action(detail=True, methods=["get"], url_path="port-mappings", pages=True, filter_backends=[])
    def port_mappings(self, request, pk=None):
        """The host's port mappings: each a port of its server's public address (`endpoint`)
        forwarded to a port of the host."""
        mappings = port_mappings_of(self.get_object())
        page = self.paginate_queryset(mappings)
        if page is not None:
            return self.get_paginated_response(PortMappingSerializer(page, many=True).data)
        return Response(PortMappingSerializer(mappings, many=True).data)

    @extend_schema(
        request=PortMappingInputSerializer,
        responses={201: PortMappingSerializer},
        description="Reach a port of the host from outside: its server forwards the lowest free "
        "port of its public range to it, at once (the host need not restart). The host must be "
        "running or stopped, on a backend that forwards ports (else 409); a port out of range, "
        "22 (SSH), one mapped already or one past the limit per host is a 400.",
    )
    @port_mappings.mapping.post
    def add_port_mapping(self, request, pk=None):
        instance = self.get_object()
        serializer = PortMappingInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        mapping = networking.add_port_mapping(
            instance=instance, actor=current_actor(request), **serializer.validated_data
        )
        return Response(PortMappingSerializer(mapping).data, status=status.HTTP_201_CREATED)

    def _mapping(self, mapping_id) -> PortMapping:
        return get_object_or_404(PortMapping, instance=self.get_object(), pk=mapping_id)

    @extend_schema(responses=PortMappingSerializer, parameters=[MAPPING_ID])
    @action(
        detail=True,
        methods=["get"],
        url_path=r"port-mappings/(?P<mapping_id>[0-9]+)",
        url_name="port-mapping",
    )
    def port_mapping(self, request, pk=None, mapping_id=None):
        """One port mapping of the host."""
        return Response(PortMappingSerializer(self._mapping(mapping_id)).data)

    @extend_schema(
        responses={204: None},
        parameters=[MAPPING_ID],
        description="Stop forwarding: its public port is free again.",
    )
    @port_mapping.mapping.delete
    def remove_port_mapping(self, request, pk=None, mapping_id=None):
        networking.remove_port_mapping(
            mapping=self._mapping(mapping_id), actor=current_actor(request)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        request=InstanceSecurityGroupSerializer,
        responses=InstanceSerializer,
        description="Move the host to another security group of the organization: its ingress "
        "rules change at once (409 on a backend that does not apply security groups).",
    )
    @action(detail=True, methods=["post"], url_path="security-group")
    def security_group(self, request, pk=None):
        instance = self.get_object()
        serializer = InstanceSecurityGroupSerializer(
            data=request.data, organization=instance.organization
        )
        serializer.is_valid(raise_exception=True)
        instance = networking.set_instance_security_group(
            instance=instance,
            actor=current_actor(request),
            group=serializer.validated_data["security_group"],
        )
        return Response(InstanceSerializer(self.get_queryset().get(pk=instance.pk)).data)


class QuotaView(LoamAPIMixin, APIView):
    required_actions = {"get": Action.VIEW}

    @extend_schema(responses=QuotaSerializer(many=True))
    def get(self, request):
        """Each limit of the organization with what is used against it."""
        organization = current_organization(request)
        usage = organization_usage(organization)
        limits = (
            QuotaLimit.objects.filter(organization=organization)
            .select_related("accelerator_model")
            .order_by("resource")
        )
        rows = [
            {
                "resource": limit.resource,
                "accelerator_model": limit.accelerator_model.slug
                if limit.accelerator_model
                else None,
                "used": usage.amount(limit) or 0,
                "limit": limit.limit,
            }
            for limit in limits
        ]
        return Response(QuotaSerializer(rows, many=True).data)
