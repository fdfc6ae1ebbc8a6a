from decimal import Decimal

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import AcceleratorModel, PriceKind, ResourceType, SoftwareStack
from apps.core.numbers import IdsField


class FamilyForm(forms.Form):
    code = forms.SlugField(label=_("Code"), max_length=40)
    name = forms.CharField(label=_("Name"), max_length=120)
    resource_type = forms.ChoiceField(label=_("Resource type"), choices=ResourceType.choices)
    accelerator_model = forms.ModelChoiceField(
        label=_("Accelerator model"), queryset=AcceleratorModel.objects.order_by("vendor", "name")
    )


class FlavorForm(forms.Form):
    family = forms.ModelChoiceField(label=_("Family"), queryset=None, empty_label=None)
    code = forms.CharField(label=_("Code"), max_length=60, help_text=_("e.g. a100.2x"))
    accelerator_count = forms.IntegerField(label=_("Accelerators"), min_value=1, max_value=64)
    vcpu = forms.IntegerField(label=_("vCPU"), min_value=1, max_value=1024)
    ram_gb = forms.IntegerField(label=_("RAM (GB)"), min_value=1, max_value=16384)
    system_disk_gb = forms.IntegerField(
        label=_("System disk (GB)"), min_value=20, max_value=2048, initial=100
    )
    is_active = forms.BooleanField(label=_("On sale"), required=False, initial=True)

    def __init__(self, *args, families, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["family"].queryset = families


class ImageForm(forms.Form):
    code = forms.SlugField(label=_("Code"), max_length=60)
    name = forms.CharField(label=_("Name"), max_length=120)
    os = forms.CharField(label=_("Operating system"), max_length=60)
    software_stack = forms.ChoiceField(label=_("Software stack"), choices=SoftwareStack.choices)
    stack_version = forms.CharField(label=_("Stack version"), max_length=40)
    compatible_accelerators = IdsField(
        label=_("Runs on"),
        queryset=AcceleratorModel.objects.order_by("vendor", "name"),
        widget=forms.CheckboxSelectMultiple,
    )


class PriceForm(forms.Form):
    region = forms.ModelChoiceField(label=_("Region"), queryset=None, empty_label=None)
    kind = forms.ChoiceField(label=_("Kind"), choices=PriceKind.choices)
    flavor = forms.ModelChoiceField(
        label=_("Flavor"),
        queryset=None,
        required=False,
        empty_label="—",
        help_text=_("For hourly flavor prices only."),
    )
    amount = forms.DecimalField(
        label=_("Amount"),
        min_value=Decimal(0),
        max_value=Decimal(10_000_000),
        decimal_places=2,
        help_text=_(
            "In the park's currency: per hour for a flavor, per 30-day month for disk "
            "(per GB) and bandwidth (per Mbps)."
        ),
    )
    effective_from = forms.DateTimeField(
        label=_("Effective from"),
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text=_("Empty: now."),
    )

    def __init__(self, *args, regions, flavors, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["region"].queryset = regions
        self.fields["flavor"].queryset = flavors

    @property
    def amount_minor(self) -> int:
        return int(self.cleaned_data["amount"] * 100)
