from decimal import Decimal

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.billing.models import BillingMode
from apps.core.money import MINOR_PER_MAJOR


def to_minor(amount: Decimal, currency: str) -> int:
    return int(amount * MINOR_PER_MAJOR[currency])


class TopUpForm(forms.Form):
    amount = forms.DecimalField(
        label=_("Amount"), min_value=Decimal("0.01"), max_digits=12, decimal_places=2
    )


class UsageGroupForm(forms.Form):
    group = forms.ChoiceField(
        label=_("Group by"),
        required=False,
        choices=[
            ("flavor", _("Flavor")),
            ("vendor", _("Accelerator vendor")),
            ("kind", _("Resource")),
        ],
    )

    def chosen(self) -> str:
        if self.is_valid() and self.cleaned_data["group"]:
            return self.cleaned_data["group"]
        return "flavor"


class BillingTermsForm(forms.Form):
    mode = forms.ChoiceField(label=_("Billing mode"), choices=BillingMode.choices)
    credit_limit = forms.DecimalField(
        label=_("Credit limit"), min_value=0, max_digits=14, decimal_places=2, initial=0
    )


class AdjustmentForm(forms.Form):
    amount = forms.DecimalField(
        label=_("Amount (negative to debit)"), max_digits=14, decimal_places=2
    )
    reason = forms.CharField(label=_("Reason"), max_length=200)
