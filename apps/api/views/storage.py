"""`/api/v1/volumes/`: the organization's cloud disks (云盘), the same services the console calls
(`storage.services`, and `orders.volumes` to attach and detach them). Another organization's
volume or host is a 404."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.api.base import LoamAPIMixin
from apps.api.permissions import current_actor, current_organization
from apps.api.serializers.storage import (
    VolumeAttachedSerializer,
    VolumeAttachSerializer,
    VolumeCreateSerializer,
    VolumeGrowSerializer,
    VolumeSerializer,
    VolumeSnapshotSerializer,
)
from apps.orders.models import Instance
from apps.orders.volumes import attach_volume, detach_volume
from apps.storage import services
from apps.storage.selectors import organization_volumes
from apps.tenants.roles import Action
from apps.tenants.selectors import for_organization


def valid(serializer_class, data, **kwargs) -> dict:
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


@extend_schema_view(
    list=extend_schema(description="The organization's volumes, the newest first."),
    create=extend_schema(
        request=VolumeCreateSerializer,
        responses={201: VolumeSerializer},
        description="A new empty volume in a region, on a server there that keeps volumes; "
        "its GB count in the storage_gb quota and are billed while it exists.",
    ),
    destroy=extend_schema(
        responses={204: None},
        description="Delete a detached volume and its data; an attached one is a 409.",
    ),
)
class VolumeViewSet(
    LoamAPIMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    queryset = organization_volumes(None).none()  # for the schema; requests use get_queryset()
    serializer_class = VolumeSerializer
    http_method_names = ["get", "post", "delete", "head", "options"]
    required_actions = {
        "list": Action.VIEW,
        "retrieve": Action.VIEW,
        "create": Action.ORDER,
        "destroy": Action.RELEASE,
        "grow": Action.ORDER,
        "snapshot": Action.ORDER,
        "attach": Action.ORDER,
        "detach": Action.ORDER,
    }
    filterset_fields = ["state"]
    ordering_fields = ["created_at", "name", "size_gb"]

    def get_queryset(self):
        organization = current_organization(self.request)
        if organization is None:
            return organization_volumes(None).none()
        return organization_volumes(organization).select_related("source", "workload__instance")

    def _answer(self, volume, status_code=status.HTTP_200_OK, serializer=VolumeSerializer):
        return Response(serializer(self.get_queryset().get(pk=volume.pk)).data, status=status_code)

    def create(self, request):
        organization = current_organization(request)
        data = valid(VolumeCreateSerializer, request.data, park=organization.park)
        volume = services.create_volume(
            organization=organization, actor=current_actor(request), **data
        )
        return self._answer(volume, status.HTTP_201_CREATED)

    def destroy(self, request, pk=None):
        services.delete_volume(volume=self.get_object(), actor=current_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=VolumeGrowSerializer, responses=VolumeSerializer)
    @action(detail=True, methods=["post"])
    def grow(self, request, pk=None):
        """Grow the volume (it never shrinks). Its server grows it while no running host has
        it mounted: `growing` says it waits for its host to stop."""
        volume = self.get_object()  # another organization's: a 404 whatever the body
        data = valid(VolumeGrowSerializer, request.data)
        volume = services.grow_volume(volume=volume, actor=current_actor(request), **data)
        return self._answer(volume)

    @extend_schema(request=VolumeSnapshotSerializer, responses={201: VolumeSerializer})
    @action(detail=True, methods=["post"])
    def snapshot(self, request, pk=None):
        """A new volume, a copy of this one on the same server (of a running host's: what a
        power cut would leave)."""
        volume = self.get_object()
        data = valid(VolumeSnapshotSerializer, request.data)
        snapshot = services.snapshot_volume(volume=volume, actor=current_actor(request), **data)
        return self._answer(snapshot, status.HTTP_201_CREATED)

    @extend_schema(request=VolumeAttachSerializer, responses=VolumeAttachedSerializer)
    @action(detail=True, methods=["post"])
    def attach(self, request, pk=None):
        """Attach the volume to a running or stopped host on its server, in its region, at
        `mount_path`; a running host has it from its next start (`at_next_start`)."""
        volume = self.get_object()
        data = valid(VolumeAttachSerializer, request.data)
        instance = get_object_or_404(
            for_organization(Instance, current_organization(request)), pk=data["instance"]
        )
        at_next_start = attach_volume(
            volume=volume,
            instance=instance,
            mount_path=data["mount_path"],
            actor=current_actor(request),
        )
        volume = self.get_queryset().get(pk=volume.pk)
        volume.at_next_start = at_next_start
        return Response(VolumeAttachedSerializer(volume).data)

    @extend_schema(request=None, responses=VolumeSerializer)
    @action(detail=True, methods=["post"])
    def detach(self, request, pk=None):
        """Detach the volume from its host, which must be stopped or released."""
        volume = detach_volume(volume=self.get_object(), actor=current_actor(request))
        return self._answer(volume)
