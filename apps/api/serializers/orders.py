import copy

from django.utils.translation import gettext as _
from rest_framework import serializers

from apps.api.serializers.fields import InputSerializer, IntegerField
from apps.api.serializers.networking import organization_group
from apps.catalog.models import Flavor, Image, Region
from apps.catalog.selectors import visible_images
from apps.orchestration.models import TaskPreference
from apps.orders.expiry import MAX_AFTER_HOURS, MIN_AFTER_HOURS
from apps.orders.models import Instance, Order
from apps.orders.selectors import flavor_and_image
from apps.orders.services import (
    MAX_BANDWIDTH_MBPS,
    MAX_COUNT,
    MAX_DATA_DISK_GB,
    MAX_SYSTEM_DISK_GB,
    HostRequest,
)


class _CatalogCode(serializers.SlugRelatedField):
    """The code of a flavor, an image or a region of the serializer's park
    (`HostRequestSerializer.on_sale`); the flavor and the image as the serializer read them
    together (`read_together`), where it could."""

    def get_queryset(self):
        return self.parent.on_sale(self.field_name, self.queryset)

    def to_internal_value(self, data):
        code, found = self.parent.read_together().get(self.field_name, (None, None))
        if code is None or code != data:
            return super().to_internal_value(data)  # DRF's own lookup, and its refusals
        if found is None:
            self.fail("does_not_exist", slug_name=self.slug_field, value=data)
        return found


class HostRequestSerializer(InputSerializer):
    """Input of a quote or a create order. Codes, not ids: what partners see in the catalog."""

    flavor = _CatalogCode(slug_field="code", queryset=Flavor.objects.none())
    image = _CatalogCode(slug_field="code", queryset=Image.objects.none())
    region = _CatalogCode(
        slug_field="code",
        queryset=Region.objects.none(),
        required=False,
        allow_null=True,
        help_text="Empty or null: the scheduler chooses.",
    )
    preference = serializers.ChoiceField(
        choices=TaskPreference.choices,
        required=False,
        default=TaskPreference.BALANCED,
        help_text="What the scheduler favours among the hosts with room.",
    )
    name = serializers.CharField(max_length=60, required=False, default="gpu-host")
    system_disk_gb = serializers.IntegerField(
        min_value=20, max_value=MAX_SYSTEM_DISK_GB, required=False
    )
    data_disk_gb = serializers.IntegerField(
        min_value=0, max_value=MAX_DATA_DISK_GB, required=False, default=0
    )
    bandwidth_mbps = serializers.IntegerField(
        min_value=0, max_value=MAX_BANDWIDTH_MBPS, required=False, default=0
    )
    count = serializers.IntegerField(min_value=1, max_value=MAX_COUNT, required=False, default=1)
    ssh_public_key = serializers.CharField(required=False, allow_blank=True, default="")
    security_group = IntegerField(
        min_value=1,
        required=False,
        allow_null=True,
        help_text="The id of one of the organization's security groups; empty or null: its "
        "default group.",
    )

    def __init__(self, *args, park=None, organization=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.park, self.organization = park, organization
        self._together = None

    def get_fields(self):
        """Each field a shallow copy of the declared one, where DRF's deep copy built every
        field again on every request (a tenth of a quote's CPU, bench/order_profile.py). None
        of them holds anything a request changes, nor a field of its own (a list's child) that
        would stay bound to the declared one (tests/api/views/test_orders.py checks)."""
        return {name: copy.copy(field) for name, field in self._declared_fields.items()}

    def on_sale(self, name: str, none):
        """What the field `name` looks its code up in (`none` without a park)."""
        if self.park is None:
            return none
        if name == "flavor":
            return Flavor.objects.filter(is_active=True, family__park=self.park).select_related(
                "family__accelerator_model"
            )
        if name == "image":
            return Image.objects.filter(
                visible_images(self.organization), is_active=True, park=self.park
            )
        return Region.objects.filter(park=self.park)

    def read_together(self) -> dict:
        """{"flavor": (its code, the flavor or None), "image": (…)}, read in one statement
        (`flavor_and_image`) when both codes are text; else empty, and each field looks its
        own code up."""
        if self._together is None:
            self._together = {}
            flavor, image = self.initial_data.get("flavor"), self.initial_data.get("image")
            if self.park is not None and isinstance(flavor, str) and isinstance(image, str):
                found = flavor_and_image(
                    park=self.park,
                    organization=self.organization,
                    flavor_code=flavor,
                    image_code=image,
                )
                if found is not None:
                    self._together = {"flavor": (flavor, found[0]), "image": (image, found[1])}
        return self._together

    def validate_security_group(self, value):
        return None if value is None else organization_group(self.organization, value)

    def host_request(self) -> HostRequest:
        return HostRequest.from_data(self.validated_data)


class QuoteSerializer(serializers.Serializer):
    currency = serializers.CharField()
    region = serializers.CharField(source="region.code")
    count = serializers.IntegerField()
    hourly_minor = serializers.DecimalField(max_digits=20, decimal_places=6)
    per_second_minor = serializers.DecimalField(max_digits=20, decimal_places=6)
    monthly_minor = serializers.DecimalField(max_digits=20, decimal_places=6)
    flavor_hourly_minor = serializers.IntegerField()
    disk_hourly_minor = serializers.DecimalField(max_digits=20, decimal_places=6)
    bandwidth_hourly_minor = serializers.DecimalField(max_digits=20, decimal_places=6)


class OrderSerializer(serializers.ModelSerializer):
    instance = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = Order
        fields = [
            "id",
            "kind",
            "state",
            "instance",
            "parameters",
            "quote",
            "hourly_minor",
            "currency",
            "reason",
            "created_at",
            "updated_at",
            "decided_at",
        ]
        read_only_fields = fields


# DRF's own rendering of a moment (in the site's time zone, ISO 8601), as OrderSerializer's.
_MOMENT = serializers.DateTimeField(read_only=True)


def order_data(order: Order) -> dict:
    """What OrderSerializer answers for `order`, without building a ModelSerializer's fields
    from the model on every call, which took most of an order's response time (the order
    endpoint answers with it; tests/api/test_orders.py checks it is OrderSerializer's)."""

    def moment(value):
        return None if value is None else _MOMENT.to_representation(value)

    return {
        "id": order.pk,
        "kind": str(order.kind),
        "state": str(order.state),
        "instance": order.instance_id,
        "parameters": order.parameters,
        "quote": order.quote,
        "hourly_minor": order.hourly_minor,
        "currency": order.currency,
        "reason": order.reason,
        "created_at": moment(order.created_at),
        "updated_at": moment(order.updated_at),
        "decided_at": moment(order.decided_at),
    }


class InstanceSerializer(serializers.ModelSerializer):
    flavor = serializers.CharField(source="flavor.code", read_only=True)
    image = serializers.CharField(source="image.code", read_only=True)
    region = serializers.CharField(source="region.code", read_only=True)
    node = serializers.CharField(source="node.hostname", read_only=True, allow_null=True)
    security_group = serializers.PrimaryKeyRelatedField(
        read_only=True,
        allow_null=True,
        help_text="The id of its security group; null: the organization's default group.",
    )
    simulated = serializers.BooleanField(
        source="is_simulated",
        read_only=True,
        help_text="True in a demo park: the host is simulated and does not exist.",
    )

    class Meta:
        model = Instance
        fields = [
            "id",
            "name",
            "state",
            "simulated",
            "flavor",
            "image",
            "region",
            "node",
            "system_disk_gb",
            "data_disk_gb",
            "bandwidth_mbps",
            "access",
            "security_group",
            "error_message",
            "stop_at",
            "without_cards",
            "created_at",
            "updated_at",
            "released_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "stop_at": {"help_text": "When its scheduled stop is due; null: none scheduled."},
            "without_cards": {
                "help_text": "True while it runs without its cards (无卡模式), at the region's "
                "no-card price."
            },
        }


class ResizeSerializer(InputSerializer):
    flavor = serializers.SlugRelatedField(slug_field="code", queryset=Flavor.objects.none())

    def __init__(self, *args, park=None, **kwargs):
        super().__init__(*args, **kwargs)
        if park is not None:
            self.fields["flavor"].queryset = Flavor.objects.filter(
                is_active=True, family__park=park
            )


class StartSerializer(InputSerializer):
    without_cards = serializers.BooleanField(
        default=False,
        help_text="Start without its cards (无卡模式开机): a small share of CPU and memory on its "
        "own server, at the region's no-card price per hour, to move data or fix its "
        "environment. A region that sets no such price is a 422; a host not stopped a 409.",
    )


class ReleaseSerializer(InputSerializer):
    keep_data_disk = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Keep its data disk as a cloud disk of its own (billed and counted in the "
        "storage quota from the release on, attachable to another host) instead of deleting "
        "it with the host, which is the default. Absent or null: the choice set with "
        "`data-disk`, else deleted. Only a data disk its server keeps as a volume can be "
        "kept (else a 409); keeping one over the storage quota is a 409.",
    )


class DataDiskSerializer(InputSerializer):
    keep_on_release = serializers.BooleanField(
        help_text="True: its data disk is kept as a cloud disk when the host is released, "
        "by you or by the park's auto-release; false: deleted with it (the default)."
    )


class DiskSerializer(InputSerializer):
    data_disk_gb = serializers.IntegerField(min_value=1, max_value=MAX_DATA_DISK_GB)


class StopScheduleSerializer(InputSerializer):
    """One of `at` (null: clear the schedule) or `after_hours`."""

    at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="When to stop, ISO 8601 (without an offset: the park's time zone), within "
        "30 days; null: clear the scheduled stop.",
    )
    after_hours = serializers.IntegerField(
        min_value=MIN_AFTER_HOURS,
        max_value=MAX_AFTER_HOURS,
        required=False,
        help_text="Stop this many hours from now.",
    )

    def validate(self, data):
        if "at" in data and "after_hours" in data:
            raise serializers.ValidationError(_("Give either at or after_hours, not both."))
        if "at" not in data and "after_hours" not in data:
            raise serializers.ValidationError(
                _("Give at (a time, or null to clear) or after_hours.")
            )
        return data


class BandwidthSerializer(InputSerializer):
    bandwidth_mbps = serializers.IntegerField(min_value=0, max_value=MAX_BANDWIDTH_MBPS)


class QuotaSerializer(serializers.Serializer):
    resource = serializers.CharField()
    accelerator_model = serializers.CharField(allow_null=True)
    used = serializers.DecimalField(max_digits=20, decimal_places=3)
    limit = serializers.IntegerField()
