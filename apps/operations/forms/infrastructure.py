import json

from django import forms
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _

from apps.billing.forms import to_minor
from apps.core.widgets import LongSelect, RowCheckboxInput, RowHiddenInput, RowNumberInput
from apps.orchestration.backends.registry import config_examples, driver_names
from apps.orders.expiry import MAX_RELEASE_DAYS
from apps.orders.models import IdlePolicy


class BackendForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=80)
    driver = forms.ChoiceField(label=_("Driver"), choices=())
    config = forms.JSONField(
        label=_("Configuration (JSON)"),
        initial=dict,
        widget=forms.Textarea(attrs={"rows": 8, "class": "font-monospace"}),
        help_text=_("The driver is asked for its capacity with it before anything is saved."),
    )
    region = forms.ModelChoiceField(
        label=_("Region of the reported pools"),
        queryset=None,
        required=False,
        help_text=_("Where the pools the driver reports stand; move them later on the pools page."),
    )

    def __init__(self, *args, regions, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["driver"].choices = [(name, name) for name in driver_names()]
        self.fields["region"].queryset = regions

    @staticmethod
    def config_examples() -> dict[str, str]:
        """Each driver's example configuration, as the JSON an operator adapts."""
        return {name: json.dumps(example, indent=2) for name, example in config_examples().items()}


class RegionChoices:
    """The park's regions as every row of the pools table offers them, read and labelled once
    for the whole table (a ModelChoiceField would query them again for every row it renders,
    and labelling them for each row translated each level 20 times)."""

    def __init__(self, regions):
        regions = list(regions)
        self.by_pk = {region.pk: region for region in regions}
        self.choices = [
            (region.pk, f"{region} · {region.get_level_display()}") for region in regions
        ]


class PoolForm(forms.Form):
    """One row of the pools table; `regions` is a RegionChoices. Its widgets are written out in
    Python (apps.core.widgets): the table has a page of these rows."""

    pool = forms.IntegerField(widget=RowHiddenInput)
    region = forms.TypedChoiceField(label=_("Region"), coerce=int, choices=(), widget=LongSelect)
    pue = forms.DecimalField(
        label=_("PUE"),
        min_value=1,
        max_value=5,
        max_digits=4,
        decimal_places=2,
        widget=RowNumberInput,
    )
    # Typed in yuan (as on the power bill, ¥0.65), stored in fen.
    power_price_per_kwh = forms.DecimalField(
        label=_("Power price per kWh"),
        min_value=0,
        max_value=1000,
        max_digits=6,
        decimal_places=2,
        widget=RowNumberInput,
    )
    carbon_g_per_kwh = forms.IntegerField(
        label=_("Carbon intensity (gCO₂/kWh)"), min_value=0, max_value=5000, widget=RowNumberInput
    )
    is_schedulable = forms.BooleanField(
        label=_("Schedulable"), required=False, widget=RowCheckboxInput
    )

    def __init__(self, *args, regions: RegionChoices, currency: str, html_form: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.currency = currency
        self._regions = regions.by_pk
        self.fields["region"].choices = regions.choices
        if html_form:  # one row of a table: the inputs name the <form> they belong to
            for field in self.fields.values():
                field.widget.attrs["form"] = html_form

    def clean_region(self):
        return self._regions[self.cleaned_data["region"]]

    def clean(self):
        data = super().clean()
        if data.get("power_price_per_kwh") is not None:
            data["power_price_minor_per_kwh"] = to_minor(
                data.pop("power_price_per_kwh"), self.currency
            )
        return data


class IdlePolicyForm(forms.Form):
    threshold_minutes = forms.IntegerField(
        label=capfirst(IdlePolicy._meta.get_field("threshold_minutes").verbose_name),
        min_value=10,
        max_value=10080,
        help_text=IdlePolicy._meta.get_field("threshold_minutes").help_text,
    )
    auto_stop = forms.BooleanField(
        label=capfirst(IdlePolicy._meta.get_field("auto_stop").verbose_name),
        required=False,
        help_text=_("Owners are mailed when an instance is stopped."),
    )
    release_stopped_after_days = forms.IntegerField(
        label=capfirst(IdlePolicy._meta.get_field("release_stopped_after_days").verbose_name),
        min_value=0,
        max_value=MAX_RELEASE_DAYS,
        help_text=IdlePolicy._meta.get_field("release_stopped_after_days").help_text,
    )
