from datetime import date
from decimal import Decimal

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from apps.core.money import MINOR_PER_MAJOR


class _Money:
    """A form with an `amount`-like Decimal field in the park's major units."""

    currency = "CNY"

    def minor(self, field: str) -> int:
        return int(self.cleaned_data[field] * MINOR_PER_MAJOR[self.currency])


class FloorPriceForm(_Money, forms.Form):
    """The partner's floor price per card-hour on one of its pools."""

    pool = forms.ModelChoiceField(label=_("Pool"), queryset=None, empty_label=None)
    floor_price = forms.DecimalField(
        label=_("Floor price per card-hour"),
        min_value=Decimal(0),
        max_value=Decimal(1_000_000),
        decimal_places=2,
        help_text=_("The park never sells an hour of one of this pool's cards for less."),
    )

    def __init__(self, *args, pools, currency, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pool"].queryset = pools
        self.currency = currency


class PartnerForm(forms.Form):
    """Make an organization of the park a partner, or change a partner's share."""

    organization = forms.ModelChoiceField(label=_("Organization"), queryset=None)
    revenue_share_pct = forms.DecimalField(
        label=_("Revenue share (%)"),
        min_value=Decimal(0),
        max_value=Decimal(100),
        max_digits=5,
        decimal_places=2,
        help_text=_("The partner's share of what its pools earn."),
    )

    def __init__(self, *args, organizations, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["organization"].queryset = organizations


class AssignPoolForm(forms.Form):
    pool = forms.ModelChoiceField(label=_("Pool"), queryset=None, empty_label=None)
    partner = forms.ModelChoiceField(
        label=_("Owner"), queryset=None, required=False, empty_label=_("The park itself")
    )

    def __init__(self, *args, pools, partners, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pool"].queryset = pools
        self.fields["partner"].queryset = partners


class SettleForm(forms.Form):
    partner = forms.ModelChoiceField(label=_("Partner"), queryset=None, empty_label=None)
    month = forms.CharField(
        label=_("Month"),
        max_length=7,
        widget=forms.TextInput(attrs={"type": "month", "placeholder": "YYYY-MM"}),
    )

    def __init__(self, *args, partners, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["partner"].queryset = partners

    def clean_month(self):
        value = self.cleaned_data["month"].strip()
        try:
            year, month = (int(part) for part in value.split("-"))
            return date(year, month, 1)
        except (TypeError, ValueError) as exc:
            raise ValidationError(_("Enter a month as YYYY-MM.")) from exc
