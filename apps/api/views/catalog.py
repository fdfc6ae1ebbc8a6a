"""The catalog, for partners: what is sold in the caller's park, at what price, with how much
free now."""

from django.utils.translation import get_language
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import viewsets
from rest_framework.response import Response

from apps.api.base import LoamAPIMixin
from apps.api.permissions import current_organization
from apps.api.serializers.catalog import (
    AcceleratorModelSerializer,
    CatalogFlavorSerializer,
    FlavorSerializer,
    ImageSerializer,
    PriceSerializer,
    RegionSerializer,
)
from apps.catalog.forms import CatalogFilterForm
from apps.catalog.kept_reads import kept
from apps.catalog.models import AcceleratorModel, Flavor, Image, Price, Region
from apps.catalog.selectors import catalog_flavors
from apps.tenants.roles import Action

READ = {"list": Action.VIEW, "retrieve": Action.VIEW}


class ParkScopedViewSet(LoamAPIMixin, viewsets.ReadOnlyModelViewSet):
    required_actions = READ
    park_field = "park"

    def get_queryset(self):
        organization = current_organization(self.request)
        return self.queryset.filter(**{self.park_field: organization.park})


class RegionViewSet(ParkScopedViewSet):
    queryset = Region.objects.select_related("parent").order_by("level", "code")
    serializer_class = RegionSerializer
    lookup_field = "code"


class AcceleratorModelViewSet(LoamAPIMixin, viewsets.ReadOnlyModelViewSet):
    queryset = AcceleratorModel.objects.order_by("vendor", "name")
    serializer_class = AcceleratorModelSerializer
    required_actions = READ
    lookup_field = "slug"


class ImageViewSet(ParkScopedViewSet):
    queryset = Image.objects.filter(is_active=True, organization=None).prefetch_related(
        "compatible_accelerators"
    )
    serializer_class = ImageSerializer
    lookup_field = "code"
    filterset_fields = ["software_stack"]


class PriceViewSet(ParkScopedViewSet):
    queryset = Price.objects.select_related("region", "flavor").order_by("region", "kind")
    serializer_class = PriceSerializer
    park_field = "region__park"
    filterset_fields = ["kind"]


FILTER_PARAMETERS = [
    OpenApiParameter(name, str, description=description)
    for name, description in (
        ("resource_type", "cloud_host, bare_metal, container or training_task"),
        ("vendor", "nvidia, huawei, hygon or cambricon"),
        ("accelerator_model", "an accelerator model id"),
        ("accelerator_count", "1, 2, 4 or 8"),
        ("min_accelerator_memory_gb", "accelerator memory at least (GB)"),
        ("min_vcpu", "vCPU at least"),
        ("min_ram_gb", "RAM at least (GB)"),
        ("region", "a region id"),
        ("region_level", "center, province or edge"),
        ("min_price", "hourly price from, in major units"),
        ("max_price", "hourly price to, in major units"),
        ("domestic", "true: domestic chips only"),
        ("available", "true: only flavors with a host free now"),
        ("sort", "price, price_per_tflops or performance"),
    )
]


class FlavorViewSet(ParkScopedViewSet):
    queryset = Flavor.objects.filter(is_active=True).select_related("family__accelerator_model")
    serializer_class = FlavorSerializer
    park_field = "family__park"
    lookup_field = "code"
    lookup_value_regex = r"[^/]+"  # flavor codes have dots (h200.8x)
    pagination_class = None
    filter_backends = []  # the list filters with the catalog page's form, not the API's filters

    def query_parameters(self):
        names = super().query_parameters()
        if self.action == "list":
            names |= {parameter.name for parameter in FILTER_PARAMETERS}
        return names

    @extend_schema(parameters=FILTER_PARAMETERS, responses=CatalogFlavorSerializer(many=True))
    def list(self, request, *args, **kwargs):
        """Flavors with their cheapest price in force and the hosts that fit now, filtered as
        the catalog page filters (invalid filters are reported and ignored)."""
        # The same for every organization of a park: kept whole per park, filters and language.
        organization = current_organization(request)

        def build():
            form = CatalogFilterForm(request.query_params, park=organization.park)
            cards = catalog_flavors(form.filters())
            return CatalogFlavorSerializer(cards, many=True).data

        filters = tuple(sorted(request.query_params.lists()))
        identity = (organization.park_id, filters, get_language())
        return Response(kept("api-flavors", identity, build))
