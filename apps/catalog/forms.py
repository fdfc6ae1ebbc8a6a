from decimal import Decimal
from functools import cache

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import AcceleratorModel, Region, RegionLevel, ResourceType, Vendor
from apps.catalog.selectors import CatalogFilters, resource_types_on_sale

SORT_CHOICES = [
    ("", _("Recommended")),
    ("price", _("Price, lowest first")),
    ("price_per_accelerator", _("Price per card, lowest first")),
    ("price_per_tflops", _("Price per TFLOPS, lowest first")),
    ("price_per_compute_unit", _("Price per compute unit, lowest first")),
    ("performance", _("Performance, highest first")),
    ("accelerator_memory", _("Memory per card, highest first")),
]
VIEW_CHOICES = [("cards", _("Cards")), ("table", _("Table"))]
# Query parameters that change how the list looks, not which flavors it holds.
PRESENTATION_FIELDS = ("sort", "view")


class CatalogFilterForm(forms.Form):
    """The catalog's filters, read from the query string (so a filtered list is a link)."""

    resource_type = forms.ChoiceField(
        label=_("Resource type"),
        required=False,
        choices=[("", _("All"))] + ResourceType.choices,
        help_text=_(
            "Only resource types on sale are listed. Training tasks need no flavor: submit them "
            "on the Training tasks page."
        ),
    )
    vendor = forms.ChoiceField(
        label=_("Vendor"), required=False, choices=[("", _("All vendors"))] + Vendor.choices
    )
    accelerator_model = forms.ModelChoiceField(
        label=_("Accelerator model"),
        required=False,
        queryset=AcceleratorModel.objects.filter(pools__isnull=False).distinct(),
        empty_label=_("All accelerators"),
    )
    accelerator_count = forms.TypedChoiceField(
        label=_("Accelerators per host"),
        required=False,
        coerce=int,
        empty_value=None,
        choices=[("", _("Any"))] + [(n, str(n)) for n in (1, 2, 4, 8)],
    )
    min_accelerator_memory_gb = forms.IntegerField(
        label=_("Accelerator memory ≥ (GB)"), required=False, min_value=0
    )
    min_vcpu = forms.IntegerField(label=_("vCPU ≥"), required=False, min_value=0)
    min_ram_gb = forms.IntegerField(label=_("RAM ≥ (GB)"), required=False, min_value=0)
    region = forms.ModelChoiceField(
        label=_("Region"),
        required=False,
        queryset=Region.objects.all(),
        empty_label=_("All regions"),
    )
    region_level = forms.ChoiceField(
        label=_("Region level"),
        required=False,
        choices=[("", _("All levels"))] + RegionLevel.choices,
    )
    min_price = forms.DecimalField(
        label=_("Price from (per hour)"), required=False, min_value=0, decimal_places=2
    )
    max_price = forms.DecimalField(
        label=_("Price to (per hour)"), required=False, min_value=0, decimal_places=2
    )
    domestic = forms.BooleanField(label=_("Domestic chips only"), required=False)
    available = forms.BooleanField(label=_("Available now"), required=False)
    sort = forms.ChoiceField(label=_("Sort by"), required=False, choices=SORT_CHOICES)
    view = forms.ChoiceField(required=False, choices=VIEW_CHOICES, widget=forms.HiddenInput)

    def __init__(self, *args, park=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.park = park
        if park is not None:
            self.fields["region"].queryset = Region.objects.filter(park=park)
        # Read when the choices are (to render them, or to check a type asked for): the API
        # with no type asked for needs no query for them.
        on_sale = cache(lambda: resource_types_on_sale(park))
        self.fields["resource_type"].choices = lambda: (
            [("", _("All"))]
            + [(value, label) for value, label in ResourceType.choices if value in on_sale()]
        )

    @property
    def has_filters(self) -> bool:
        """Whether any filter (not the sort order or the view) narrows the list."""
        return any(value for name, value in self.data.items() if name not in PRESENTATION_FIELDS)

    @property
    def view_mode(self) -> str:
        """ "table" for the comparison table, else "cards"."""
        return "table" if self.data.get("view") == "table" else "cards"

    def clean(self):
        data = super().clean()
        low, high = data.get("min_price"), data.get("max_price")
        if low is not None and high is not None and low > high:
            self.add_error("max_price", _("The upper price is below the lower one."))
            data.pop("min_price", None)  # an inconsistent range filters nothing
        return data

    def filters(self) -> CatalogFilters:
        self.is_valid()  # an invalid filter is reported; the valid ones still apply
        data = getattr(self, "cleaned_data", {})

        def minor(value):  # prices are typed in yuan, compared in fen
            return int(Decimal(value) * 100) if value is not None else None

        return CatalogFilters(
            resource_type=data.get("resource_type", ""),
            vendor=data.get("vendor", ""),
            accelerator_model=data.get("accelerator_model"),
            accelerator_count=data.get("accelerator_count"),
            min_accelerator_memory_gb=data.get("min_accelerator_memory_gb"),
            min_vcpu=data.get("min_vcpu"),
            min_ram_gb=data.get("min_ram_gb"),
            region=data.get("region"),
            region_level=data.get("region_level", ""),
            min_hourly_minor=minor(data.get("min_price")),
            max_hourly_minor=minor(data.get("max_price")),
            domestic_only=bool(data.get("domestic")),
            available_only=bool(data.get("available")),
            sort=data.get("sort", ""),
            park=self.park,
        )
