from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.response import Response

from apps.api.base import LoamAPIMixin
from apps.api.permissions import current_actor, current_organization
from apps.sharedfs.models import SharedFileSystem
from apps.sharedfs.selectors import capacities_gb
from apps.sharedfs.services import delete_file_system
from apps.tenants.roles import Action
from apps.tenants.selectors import for_organization


class SharedFileSystemSerializer(serializers.ModelSerializer):
    region = serializers.SlugRelatedField(slug_field="code", read_only=True)
    capacity_gb = serializers.SerializerMethodField(
        help_text="The organization's shared storage quota: writing past it fails in the hosts."
    )
    mount_path = serializers.SerializerMethodField()

    class Meta:
        model = SharedFileSystem
        fields = ["id", "region", "name", "state", "used_bytes", "capacity_gb", "mount_path"]
        fields += ["usage_read_at", "created_at"]
        extra_kwargs = {
            "used_bytes": {"help_text": "Bytes stored, as last read."},
            "state": {"help_text": "`deleting` while its files are removed, then it is gone."},
        }

    def get_capacity_gb(self, file_system) -> int:
        organization = file_system.organization
        return capacities_gb(organization.park_id, [organization.pk])[organization.pk]

    def get_mount_path(self, file_system) -> str:
        return "/shared"


@extend_schema_view(
    destroy=extend_schema(
        responses={204: None},
        description="Delete the file system with all its files; billing for it stops now. A "
        "409 while a host of the organization in its region mounts it (its hosts are named). "
        "The next host started in the region makes a new, empty one.",
    ),
)
class SharedFileSystemViewSet(
    LoamAPIMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """The organization's shared file storage (文件存储), one file system per region, made as
    the first host of the organization there starts and mounted at /shared in every host of the
    organization there; billed per GB stored."""

    queryset = SharedFileSystem.objects.none()
    serializer_class = SharedFileSystemSerializer
    http_method_names = ["get", "delete", "head", "options"]
    required_actions = {"list": Action.VIEW, "retrieve": Action.VIEW, "destroy": Action.RELEASE}

    def get_queryset(self):
        organization = current_organization(self.request)
        return (
            for_organization(SharedFileSystem, organization)
            .select_related("region", "organization")
            .order_by("pk")
        )

    def destroy(self, request, pk=None):
        delete_file_system(actor=current_actor(request), file_system=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
