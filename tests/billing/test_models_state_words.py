"""A monthly bill and a VAT invoice are both "issued" in English, and two things in Chinese:
a bill is 已出账, a VAT invoice (发票) 已开具 (issue 35)."""

from django.template import Context, Template
from django.utils import translation

from apps.billing.models import InvoiceState, VatInvoiceState
from apps.operations.audit_labels import action_label


def test_an_issued_bill_and_an_issued_vat_invoice_have_their_own_chinese_names():
    with translation.override("zh-hans"):
        assert str(InvoiceState.ISSUED.label) == "已出账"
        assert str(VatInvoiceState.ISSUED.label) == "已开具"
        assert action_label("invoice.issued") == "账单已出账"
        assert action_label("vat_invoice.issued") == "发票已开具"
    with translation.override("en"):
        assert str(InvoiceState.ISSUED.label) == str(VatInvoiceState.ISSUED.label) == "Issued"


def test_a_join_tokens_issue_date_is_not_a_bills_state():
    template = Template('{% load i18n %}{% translate "Issued" context "join token issue date" %}')
    with translation.override("zh-hans"):
        assert template.render(Context()) == "签发时间"
