"""Volumes (cloud disks) in the API: what is shown, and each use case's input."""

from rest_framework import serializers

from apps.api.serializers.fields import InputSerializer, IntegerField
from apps.catalog.models import Region
from apps.storage.models import Volume
from apps.storage.services import MAX_VOLUME_GB


class VolumeSerializer(serializers.ModelSerializer):
    region = serializers.CharField(source="region.code", read_only=True)
    server = serializers.CharField(source="node.hostname", read_only=True)
    instance = serializers.SerializerMethodField(
        help_text="The id of the host it is attached to; null: detached."
    )
    source = serializers.CharField(
        source="source.public_id", read_only=True, allow_null=True, default=None
    )
    growing = serializers.BooleanField(
        read_only=True,
        help_text="Grown here, not yet on its server: it grows while no running host has it.",
    )
    data_disk_of = serializers.SerializerMethodField(
        help_text="The id of the host that ordered it as its data disk, while that host lives "
        "(it grows with the host's expand-disk, is billed on the host's disk line and goes "
        "when the host is released unless `keep_on_release`); null: a cloud disk of its own."
    )

    class Meta:
        model = Volume
        fields = [
            "id",
            "public_id",
            "name",
            "region",
            "server",
            "size_gb",
            "reported_size_gb",
            "growing",
            "state",
            "reported_message",
            "instance",
            "mount_path",
            "data_disk_of",
            "keep_on_release",
            "source",
            "created_at",
        ]
        read_only_fields = fields

    def get_data_disk_of(self, volume) -> int | None:
        return volume.workload.instance.pk if volume.is_data_disk else None

    def get_instance(self, volume) -> int | None:
        instance = getattr(volume.workload, "instance", None) if volume.workload_id else None
        return instance.pk if instance is not None else None


class VolumeCreateSerializer(InputSerializer):
    name = serializers.CharField(max_length=63)
    size_gb = serializers.IntegerField(min_value=1, max_value=MAX_VOLUME_GB)
    region = serializers.SlugRelatedField(slug_field="code", queryset=Region.objects.none())

    def __init__(self, *args, park=None, **kwargs):
        super().__init__(*args, **kwargs)
        if park is not None:
            self.fields["region"].queryset = Region.objects.filter(park=park)


class VolumeGrowSerializer(InputSerializer):
    size_gb = serializers.IntegerField(min_value=1, max_value=MAX_VOLUME_GB)


class VolumeSnapshotSerializer(InputSerializer):
    name = serializers.CharField(max_length=63)


class VolumeAttachSerializer(InputSerializer):
    instance = IntegerField(min_value=1, help_text="The id of one of your hosts.")
    mount_path = serializers.CharField(max_length=200, help_text="Where it appears: /mnt/data.")


class VolumeAttachedSerializer(VolumeSerializer):
    at_next_start = serializers.BooleanField(
        read_only=True,
        help_text="True: the host runs, and the volume appears in it at its next start.",
    )

    class Meta(VolumeSerializer.Meta):
        fields = [*VolumeSerializer.Meta.fields, "at_next_start"]
        read_only_fields = fields
