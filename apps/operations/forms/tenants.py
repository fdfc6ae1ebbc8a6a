from decimal import Decimal

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import AcceleratorModel
from apps.core.money import MINOR_PER_MAJOR, SYMBOLS
from apps.quotas.models import QuotaLimit, QuotaResource

MAX_LIMIT = Decimal(10**12)


def limit_field() -> forms.DecimalField:
    return forms.DecimalField(
        label=_("Limit"),
        min_value=0,
        max_value=MAX_LIMIT,
        max_digits=15,
        decimal_places=2,
        help_text=_("The monthly spend as money, e.g. 5000.00; any other limit as a whole number."),
    )


def stored_limit(value: Decimal, *, resource: str, currency: str) -> int:
    """A limit as the operator typed it, in the unit the quota stores: the monthly spend is typed
    in yuan (two places) and stored in fen; every other resource is a whole number."""
    if resource == QuotaResource.MONTHLY_SPEND:
        return int(value * MINOR_PER_MAJOR[currency])
    if value != value.to_integral_value():
        raise ValidationError(_("Enter a whole number for this limit."), code="not_whole")
    return int(value)


class QuotaChangeForm(forms.Form):
    limit_id = forms.IntegerField(widget=forms.HiddenInput)
    value = limit_field()

    def stored_value(self, limit: QuotaLimit) -> int:
        """The new value of `limit` in its stored unit; ValidationError when it does not fit."""
        return stored_limit(
            self.cleaned_data["value"], resource=limit.resource, currency=limit.park.currency
        )


class QuotaAddForm(forms.Form):
    resource = forms.ChoiceField(label=_("Resource"), choices=())
    accelerator_model = forms.ModelChoiceField(
        label=_("Accelerator model"),
        queryset=AcceleratorModel.objects.order_by("vendor", "name"),
        required=False,
        help_text=_("Only for a limit on one accelerator model."),
    )
    value = limit_field()

    def __init__(self, *args, currency: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.currency = currency
        spend_label = _("Monthly spend (%(symbol)s)") % {"symbol": SYMBOLS[currency]}
        self.fields["resource"].choices = [
            (value, spend_label if value == QuotaResource.MONTHLY_SPEND else label)
            for value, label in QuotaResource.choices
        ]

    def clean(self):
        data = super().clean()
        if data.get("resource") and data.get("value") is not None:
            try:
                data["value"] = stored_limit(
                    data["value"], resource=data["resource"], currency=self.currency
                )
            except ValidationError as error:
                self.add_error("value", error)
        return data
