from decimal import Decimal

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.billing.models import BillingMode, VatInvoiceKind
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


class BankTransferForm(forms.Form):
    amount = forms.DecimalField(
        label=_("Amount you will transfer"),
        min_value=Decimal("0.01"),
        max_digits=12,
        decimal_places=2,
        help_text=_("In yuan, as in the transfer."),
    )


class ReceivedForm(forms.Form):
    received = forms.DecimalField(
        label=_("Amount received"), min_value=Decimal("0.01"), max_digits=12, decimal_places=2
    )


class ReasonForm(forms.Form):
    reason = forms.CharField(label=_("Reason"), max_length=200)


class VatInvoiceForm(forms.Form):
    kind = forms.ChoiceField(
        label=_("Invoice type"),
        choices=VatInvoiceKind.choices,
        initial=VatInvoiceKind.GENERAL,
        widget=forms.RadioSelect,
    )
    amount = forms.DecimalField(
        label=_("Amount"), min_value=Decimal("0.01"), max_digits=12, decimal_places=2
    )
    title = forms.CharField(
        label=_("Invoice title"),
        max_length=200,
        help_text=_("The company's registered name (发票抬头)."),
    )
    taxpayer_id = forms.CharField(
        label=_("Taxpayer ID"),
        max_length=18,
        min_length=18,
        help_text=_("The 18-character unified social credit code."),
    )
    address_phone = forms.CharField(
        label=_("Registered address and phone"),
        max_length=200,
        required=False,
        help_text=_("Required for a special VAT invoice."),
    )
    bank_account = forms.CharField(
        label=_("Bank and account"),
        max_length=200,
        required=False,
        help_text=_("Required for a special VAT invoice."),
    )
    email = forms.EmailField(label=_("Email to receive it"))

    def __init__(self, *args, used_not_invoiced: str, invoiceable: str, **kwargs):
        """The two amounts, formatted: the one the amount starts from and the most it may be."""
        super().__init__(*args, **kwargs)
        self.fields["amount"].help_text = _(
            "Filled in with what you used and have not had invoiced yet (%(used)s). You may "
            "ask for up to %(invoiceable)s: what you paid in and was not invoiced."
        ) % {"used": used_not_invoiced, "invoiceable": invoiceable}


class InvoiceNumberForm(forms.Form):
    number = forms.CharField(label=_("Invoice number"), max_length=40)
