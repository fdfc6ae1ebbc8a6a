"""Bank transfers (对公转账) and VAT invoice requests (发票): the services and their pages."""

import re
import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.urls import reverse

from apps.billing import transfers
from apps.billing.models import (
    BankTransfer,
    BankTransferState,
    EntryKind,
    LedgerEntry,
    Payment,
    PaymentState,
    VatInvoiceKind,
    VatInvoiceRequest,
    VatInvoiceState,
    Wallet,
)
from apps.billing.services import wallet_of
from apps.core.errors import PermissionDenied
from apps.core.models import AuditEvent
from tests.factories import OrganizationFactory, ParkFactory, ParkOperatorFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

TAXPAYER_ID = "91310000MA1FL3X63G"  # a valid GB 32100-2015 code


def balance(organization) -> int:
    return Wallet.objects.get(organization=organization).balance_minor


def announce(organization, actor, amount_minor=500_000) -> BankTransfer:
    return transfers.announce_bank_transfer(
        organization=organization, actor=actor, amount_minor=amount_minor
    )


def paid_in(organization, amount_minor, state=PaymentState.SUCCEEDED) -> None:
    """A Stripe top-up in `state` (one that succeeded is what invoicing counts as paid in)."""
    Payment.objects.create(
        wallet=wallet_of(organization), amount_minor=amount_minor, currency="CNY", state=state
    )


def invoice_fields(**fields) -> dict:
    return {
        "kind": VatInvoiceKind.GENERAL,
        "amount_minor": 100_000,
        "title": "示范智能科技有限公司",
        "taxpayer_id": TAXPAYER_ID,
        "email": "finance@example.com",
        **fields,
    }


def as_user(client, user):
    client.cookies["django_language"] = "en"
    client.force_login(user)
    return client


def audited(action: str, organization, actor, target) -> AuditEvent:
    """The one `action` event, said to be `actor`'s on `target` in `organization`."""
    event = AuditEvent.objects.get(action=action)
    assert (event.organization, event.actor, event.object_id) == (
        organization,
        actor,
        str(target.pk),
    )
    return event


# --- Bank transfers: the services ------------------------------------------------------------


def test_an_announced_transfer_carries_a_reference_to_type_and_credits_nothing(organization, owner):
    before = balance(organization) if Wallet.objects.filter(organization=organization) else 0

    transfer = announce(organization, owner)

    assert re.fullmatch(r"LM[23456789ABCDEFGHJKLMNPQRSTUVWXYZ]{8}", transfer.reference)
    assert transfer.state == BankTransferState.AWAITING
    assert balance(organization) == before
    assert AuditEvent.objects.filter(action="bank_transfer.announced").count() == 1


def test_references_are_unique(organization, owner):
    references = {announce(organization, owner).reference for _ in range(20)}

    assert len(references) == 20


@pytest.mark.parametrize("amount_minor", [0, 9_999, 100_000_000 * 100 + 1])
def test_an_amount_out_of_range_is_refused(organization, owner, amount_minor):
    with pytest.raises(ValidationError) as refused:
        announce(organization, owner, amount_minor)

    assert "amount" in refused.value.message_dict
    assert not BankTransfer.objects.exists()


def test_a_viewer_may_not_announce(organization, viewer):
    with pytest.raises(PermissionDenied):
        announce(organization, viewer)


def test_crediting_books_what_was_received_once(organization, owner, operator):
    transfer = announce(organization, owner)
    before = balance(organization)

    transfers.credit_bank_transfer(
        transfer_id=transfer.pk, operator=operator, received_minor=499_900
    )

    transfer.refresh_from_db()
    assert (transfer.state, transfer.received_minor) == (BankTransferState.CREDITED, 499_900)
    assert balance(organization) == before + 499_900
    entry = LedgerEntry.objects.get(wallet__organization=organization, kind=EntryKind.TOP_UP)
    assert transfer.reference in entry.description
    with pytest.raises(transfers.AlreadyDecided):
        transfers.credit_bank_transfer(
            transfer_id=transfer.pk, operator=operator, received_minor=499_900
        )
    assert balance(organization) == before + 499_900
    assert AuditEvent.objects.filter(action="bank_transfer.credited").count() == 1


def test_a_rejected_or_cancelled_transfer_cannot_be_credited(organization, owner, operator):
    rejected = announce(organization, owner)
    cancelled = announce(organization, owner)
    transfers.reject_bank_transfer(
        transfer_id=rejected.pk, operator=operator, reason="no such money on the statement"
    )
    transfers.cancel_bank_transfer(transfer_id=cancelled.pk, organization=organization, actor=owner)

    for transfer in (rejected, cancelled):
        with pytest.raises(transfers.AlreadyDecided):
            transfers.credit_bank_transfer(
                transfer_id=transfer.pk, operator=operator, received_minor=500_000
            )
    assert not LedgerEntry.objects.filter(wallet__organization=organization).exists()
    assert BankTransfer.objects.get(pk=rejected.pk).note == "no such money on the statement"


def test_only_the_parks_operators_credit(organization, owner):
    transfer = announce(organization, owner)
    elsewhere = ParkOperatorFactory(park=ParkFactory()).user

    with pytest.raises(PermissionDenied):
        transfers.credit_bank_transfer(
            transfer_id=transfer.pk, operator=elsewhere, received_minor=500_000
        )
    with pytest.raises(PermissionDenied):
        transfers.credit_bank_transfer(transfer_id=transfer.pk, operator=owner, received_minor=1)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_operators_confirming_at_once_credit_once(organization, owner, operator):
    transfer = announce(organization, owner)
    before = balance(organization)
    start, outcomes = threading.Barrier(2), []

    def confirm():
        try:
            start.wait(10)
            transfers.credit_bank_transfer(
                transfer_id=transfer.pk, operator=operator, received_minor=500_000
            )
            outcomes.append("credited")
        except transfers.AlreadyDecided:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=confirm) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sorted(outcomes) == ["credited", "refused"]
    assert balance(organization) == before + 500_000


# --- VAT invoices: the services --------------------------------------------------------------


def test_an_invoice_is_requested_up_to_what_was_paid_in(organization, owner, operator):
    paid_in(organization, 300_000)
    transfer = announce(organization, owner, 200_000)
    transfers.credit_bank_transfer(
        transfer_id=transfer.pk, operator=operator, received_minor=200_000
    )
    assert transfers.invoiceable_minor(organization) == 500_000

    transfers.request_vat_invoice(organization=organization, actor=owner, **invoice_fields())

    assert transfers.invoiceable_minor(organization) == 400_000
    with pytest.raises(ValidationError) as refused:
        transfers.request_vat_invoice(
            organization=organization, actor=owner, **invoice_fields(amount_minor=400_001)
        )
    assert "¥4,000.00" in refused.value.message_dict["amount"][0]


def test_a_cancelled_or_rejected_request_frees_its_amount(organization, owner, operator):
    paid_in(organization, 100_000)
    first = transfers.request_vat_invoice(
        organization=organization, actor=owner, **invoice_fields()
    )
    transfers.cancel_vat_invoice(request_id=first.pk, organization=organization, actor=owner)
    second = transfers.request_vat_invoice(
        organization=organization, actor=owner, **invoice_fields()
    )
    transfers.reject_vat_invoice(request_id=second.pk, operator=operator, reason="wrong title")

    assert transfers.invoiceable_minor(organization) == 100_000


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"taxpayer_id": "12345"}, "taxpayer_id"),
        ({"taxpayer_id": "91310000MA1FL3X63I"}, "taxpayer_id"),  # no I in the code
        ({"taxpayer_id": "91310000MA1FL3X63H"}, "taxpayer_id"),  # the wrong check character
        ({"title": "  "}, "title"),
        ({"kind": VatInvoiceKind.SPECIAL}, "address_phone"),
        ({"kind": VatInvoiceKind.SPECIAL, "address_phone": "上海市 021-0000"}, "bank_account"),
        ({"amount_minor": 0}, "amount"),
    ],
)
def test_a_request_with_missing_or_bad_details_is_refused(organization, owner, fields, field):
    paid_in(organization, 100_000)

    with pytest.raises(ValidationError) as refused:
        transfers.request_vat_invoice(
            organization=organization, actor=owner, **invoice_fields(**fields)
        )

    assert field in refused.value.message_dict
    assert not VatInvoiceRequest.objects.exists()


def test_issuing_records_the_number_once(organization, owner, operator):
    paid_in(organization, 100_000)
    request = transfers.request_vat_invoice(
        organization=organization,
        actor=owner,
        **invoice_fields(
            kind=VatInvoiceKind.SPECIAL,
            taxpayer_id=TAXPAYER_ID.lower(),
            address_phone="上海市浦东新区 021-5555",
            bank_account="示范银行 6222",
        ),
    )
    assert request.taxpayer_id == TAXPAYER_ID

    transfers.issue_vat_invoice(
        request_id=request.pk, operator=operator, number="24312000000012345"
    )

    request.refresh_from_db()
    assert (request.state, request.number) == (VatInvoiceState.ISSUED, "24312000000012345")
    with pytest.raises(transfers.AlreadyDecided):
        transfers.reject_vat_invoice(request_id=request.pk, operator=operator, reason="late")
    assert AuditEvent.objects.filter(action="vat_invoice.issued").count() == 1


# --- The tenant's pages ----------------------------------------------------------------------


@pytest.fixture
def tenant(client, owner):
    return as_user(client, owner)


def test_the_transfer_page_shows_the_account_and_the_reference_to_write(tenant, organization):
    response = tenant.post(
        reverse("billing:bank_transfers"), {"action": "announce", "amount": "5000.00"}
    )

    assert response.status_code == 302
    transfer = BankTransfer.objects.get(organization=organization)
    assert transfer.amount_minor == 500_000
    html = tenant.get(reverse("billing:bank_transfers")).content.decode()
    assert "示范区域算力服务有限公司" in html and 'id="bank-account-number"' in html
    assert transfer.reference in html and f'data-copy="#reference-{transfer.pk}"' in html


@pytest.mark.parametrize("amount", ["", "abc", "-5", "12.345"])
def test_a_bad_amount_is_a_form_error(tenant, amount):
    response = tenant.post(
        reverse("billing:bank_transfers"), {"action": "announce", "amount": amount}
    )

    assert response.status_code == 422
    assert 'class="invalid-feedback' in response.content.decode()
    assert not BankTransfer.objects.exists()


def test_another_organizations_transfer_is_404(tenant, other_organization, other_owner):
    theirs = announce(other_organization, other_owner)

    response = tenant.post(reverse("billing:bank_transfers"), {"action": "cancel", "id": theirs.pk})

    assert response.status_code == 404
    assert BankTransfer.objects.get(pk=theirs.pk).state == BankTransferState.AWAITING


def test_an_admin_sees_the_pages_but_may_not_post(client, admin):
    """Admins see billing but do not move money (MANAGE_BILLING is the owners' and billing's)."""
    client.force_login(admin)

    page = client.get(reverse("billing:bank_transfers"))
    assert page.status_code == 200 and 'id="announce-form"' not in page.content.decode()
    response = client.post(
        reverse("billing:bank_transfers"), {"action": "announce", "amount": "5000"}
    )
    assert response.status_code == 403
    assert not BankTransfer.objects.exists()
    assert client.post(reverse("billing:vat_invoices"), {"action": "request"}).status_code == 403


def test_requesting_an_invoice_from_the_page(tenant, organization, owner):
    paid_in(organization, 200_000)

    page = tenant.get(reverse("billing:vat_invoices")).content.decode()
    assert "¥2,000.00" in page  # what may be invoiced
    response = tenant.post(
        reverse("billing:vat_invoices"),
        {
            "action": "request",
            "kind": "general",
            "amount": "1500.00",
            "title": organization.name,
            "taxpayer_id": TAXPAYER_ID,
            "email": owner.email,
        },
    )

    assert response.status_code == 302
    request = VatInvoiceRequest.objects.get(organization=organization)
    assert (request.amount_minor, request.state) == (150_000, VatInvoiceState.REQUESTED)


def test_a_special_invoice_without_its_details_is_a_form_error(tenant, organization, owner):
    paid_in(organization, 200_000)

    response = tenant.post(
        reverse("billing:vat_invoices"),
        {
            "action": "request",
            "kind": "special",
            "amount": "100",
            "title": organization.name,
            "taxpayer_id": TAXPAYER_ID,
            "email": owner.email,
        },
    )

    assert response.status_code == 422
    html = response.content.decode()
    assert "A special VAT invoice needs the registered address." in html
    assert not VatInvoiceRequest.objects.exists()


# --- The operators' page ---------------------------------------------------------------------


@pytest.fixture
def ops(client, operator):
    return as_user(client, operator)


def test_an_operator_credits_a_transfer_from_the_page(ops, organization, owner, park):
    transfer = announce(organization, owner)
    page = ops.get(reverse("billing:ops_receivables")).content.decode()
    assert transfer.reference in page and 'value="5000.00"' in page
    before = balance(organization)

    response = ops.post(
        reverse("billing:ops_receivables"),
        {"action": "credit", "id": transfer.pk, "received": "4999.50"},
    )

    assert response.status_code == 302
    assert balance(organization) == before + 499_950
    again = ops.post(
        reverse("billing:ops_receivables"),
        {"action": "credit", "id": transfer.pk, "received": "4999.50"},
        follow=True,
    )
    assert "already credited" in again.content.decode()
    assert balance(organization) == before + 499_950


def test_an_operator_issues_and_rejects_invoices_from_the_page(ops, organization, owner):
    paid_in(organization, 300_000)
    one, two = (
        transfers.request_vat_invoice(organization=organization, actor=owner, **invoice_fields())
        for _ in range(2)
    )

    ops.post(reverse("billing:ops_receivables"), {"action": "issue", "id": one.pk, "number": "N1"})
    ops.post(
        reverse("billing:ops_receivables"),
        {"action": "reject_invoice", "id": two.pk, "reason": "duplicate"},
    )

    assert VatInvoiceRequest.objects.get(pk=one.pk).number == "N1"
    assert VatInvoiceRequest.objects.get(pk=two.pk).state == VatInvoiceState.REJECTED


def test_another_parks_transfer_is_404_to_an_operator(ops, member_of):
    elsewhere = OrganizationFactory(park=ParkFactory())
    theirs = announce(elsewhere, member_of(elsewhere, "owner"))

    response = ops.post(
        reverse("billing:ops_receivables"),
        {"action": "credit", "id": theirs.pk, "received": "5000"},
    )

    assert response.status_code == 404
    assert BankTransfer.objects.get(pk=theirs.pk).state == BankTransferState.AWAITING


def test_a_tenant_cannot_open_the_operators_page(tenant):
    assert tenant.get(reverse("billing:ops_receivables")).status_code in (403, 404)


def test_the_invoice_form_starts_from_the_verified_name_and_code(tenant, organization):
    type(organization).objects.filter(pk=organization.pk).update(
        legal_name="示范智能科技有限公司", credit_code=TAXPAYER_ID
    )

    html = tenant.get(reverse("billing:vat_invoices")).content.decode()

    assert 'value="示范智能科技有限公司"' in html and f'value="{TAXPAYER_ID}"' in html
