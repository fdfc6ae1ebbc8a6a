from rest_framework import serializers, viewsets

from apps.api.base import LoamAPIMixin
from apps.api.permissions import current_organization
from apps.sharedfs.models import SharedFileSystem
from apps.sharedfs.selectors import capacities_gb
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
        fields = ["id", "region", "name", "used_bytes", "capacity_gb", "mount_path"]
        fields += ["usage_read_at", "created_at"]
        extra_kwargs = {"used_bytes": {"help_text": "Bytes stored, as last read."}}

    def get_capacity_gb(self, file_system) -> int:
        organization = file_system.organization
        return capacities_gb(organization.park_id, [organization.pk])[organization.pk]

    def get_mount_path(self, file_system) -> str:
        return "/shared"


class SharedFileSystemViewSet(LoamAPIMixin, viewsets.ReadOnlyModelViewSet):
    """The organization's shared file storage (文件存储), one file system per region, mounted at
    /shared in every host of the organization there; billed per GB stored."""

    queryset = SharedFileSystem.objects.none()
    serializer_class = SharedFileSystemSerializer
    required_actions = {"list": Action.VIEW, "retrieve": Action.VIEW}

    def get_queryset(self):
        organization = current_organization(self.request)
        return (
            for_organization(SharedFileSystem, organization)
            .select_related("region", "organization")
            .order_by("pk")
        )
