from rest_framework import serializers

from apps.catalog.models import AcceleratorModel, Flavor, Image, Price, Region


class RegionSerializer(serializers.ModelSerializer):
    parent = serializers.SlugRelatedField(slug_field="code", read_only=True, allow_null=True)

    class Meta:
        model = Region
        fields = ["code", "name", "level", "parent", "latency_ms"]
        read_only_fields = fields


class AcceleratorModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = AcceleratorModel
        fields = [
            "slug",
            "vendor",
            "name",
            "memory_gb",
            "fp16_tflops",
            "tdp_w",
            "software_stack",
            "domestic",
            "compute_units",
        ]
        read_only_fields = fields


class FlavorSerializer(serializers.ModelSerializer):
    family = serializers.CharField(source="family.code", read_only=True)
    resource_type = serializers.CharField(source="family.resource_type", read_only=True)
    accelerator_model = serializers.CharField(
        source="family.accelerator_model.slug", read_only=True
    )
    compute_units = serializers.DecimalField(max_digits=10, decimal_places=3, read_only=True)

    class Meta:
        model = Flavor
        fields = [
            "code",
            "family",
            "resource_type",
            "accelerator_model",
            "accelerator_count",
            "vcpu",
            "ram_gb",
            "system_disk_gb",
            "compute_units",
        ]
        read_only_fields = fields


class CatalogFlavorSerializer(serializers.Serializer):
    """A catalog card: the flavor, its cheapest price in force and how many hosts fit now."""

    flavor = FlavorSerializer(read_only=True)
    cheapest_hourly_minor = serializers.SerializerMethodField()
    currency = serializers.SerializerMethodField()
    available_now = serializers.IntegerField(read_only=True)

    def get_cheapest_hourly_minor(self, card) -> int | None:
        return card.cheapest.amount_minor if card.cheapest else None

    def get_currency(self, card) -> str | None:
        return card.cheapest.currency if card.cheapest else None


class ImageSerializer(serializers.ModelSerializer):
    compatible_accelerators = serializers.SlugRelatedField(
        slug_field="slug", many=True, read_only=True
    )

    class Meta:
        model = Image
        fields = [
            "code",
            "name",
            "os",
            "software_stack",
            "stack_version",
            "compatible_accelerators",
        ]
        read_only_fields = fields


class PriceSerializer(serializers.ModelSerializer):
    region = serializers.SlugRelatedField(slug_field="code", read_only=True)
    flavor = serializers.SlugRelatedField(slug_field="code", read_only=True, allow_null=True)

    class Meta:
        model = Price
        fields = ["region", "kind", "flavor", "amount_minor", "currency", "effective_from"]
        read_only_fields = fields
