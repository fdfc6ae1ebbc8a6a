"""apps.billing.transfers: bank transfers (对公转账) and VAT invoice requests (发票). The services,
the tenant's and the operators' pages, who may do what, the audit trail, what counts as paid in,
and the races (a confirmation against a confirmation or a cancellation, two requests for what is
left)."""

import re
import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.urls import reverse

from apps.billing import transfers
from apps.billing.models import (
    BANK_TRANSFER_TRANSITIONS,
    VAT_INVOICE_TRANSITIONS,
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
from apps.core.errors import InvalidTransition, PermissionDenied
from apps.core.models import AuditEvent
from apps.core.transitions import transition
from tests.factories import (
    OrganizationFactory,
    ParkFactory,
    ParkOperatorFactory,
    UsageRecordFactory,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

TAXPAYER_ID = "91310000MA1FL3X63G"  # a valid GB 32100-2015 code


def balance(organization) -> int:
    return Wallet.objects.get(organization=organization).balance_minor


def announce(organization, actor, amount_minor=500_000) -> BankTransfer:
    return transfers.announce_bank_transfer(
        organization=organization, actor=actor, amount_minor=amount_minor
    )


def state_of(transfer) -> str:
    return BankTransfer.objects.get(pk=transfer.pk).state


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


def request_invoice(organization, actor, **fields) -> VatInvoiceRequest:
    return transfers.request_vat_invoice(
        organization=organization, actor=actor, **invoice_fields(**fields)
    )


def posted(**fields) -> dict:
    return {
        "action": "request",
        "kind": "general",
        "amount": "1000.00",
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
    assert (event.organization_id, event.actor, event.object_id) == (
        organization.pk,
        actor,
        str(target.pk),
    )
    return event


@pytest.fixture
def tenant(client, owner):
    return as_user(client, owner)


@pytest.fixture
def paying_tenant(client, owner, organization):
    """The owner's client, the organization having paid ¥2,000.00 in."""
    paid_in(organization, 200_000)
    return as_user(client, owner)


@pytest.fixture
def ops(client, operator):
    return as_user(client, operator)


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


def test_a_credited_transfer_cannot_be_cancelled(organization, owner, operator):
    transfer = announce(organization, owner)
    transfers.credit_bank_transfer(
        transfer_id=transfer.pk, operator=operator, received_minor=500_000
    )

    with pytest.raises(transfers.AlreadyDecided):
        transfers.cancel_bank_transfer(
            transfer_id=transfer.pk, organization=organization, actor=owner
        )
    assert state_of(transfer) == BankTransferState.CREDITED


def test_a_tenant_cannot_cancel_through_another_organization(
    organization, owner, other_organization, other_owner
):
    theirs = announce(organization, owner)

    with pytest.raises(BankTransfer.DoesNotExist):
        transfers.cancel_bank_transfer(
            transfer_id=theirs.pk, organization=other_organization, actor=other_owner
        )
    assert state_of(theirs) == BankTransferState.AWAITING


def decided_transfer(organization, owner, operator, state) -> BankTransfer:
    transfer = announce(organization, owner)
    if state == BankTransferState.CREDITED:
        transfers.credit_bank_transfer(
            transfer_id=transfer.pk, operator=operator, received_minor=500_000
        )
    elif state == BankTransferState.REJECTED:
        transfers.reject_bank_transfer(transfer_id=transfer.pk, operator=operator, reason="none")
    else:
        transfers.cancel_bank_transfer(
            transfer_id=transfer.pk, organization=organization, actor=owner
        )
    return BankTransfer.objects.get(pk=transfer.pk)


DECIDED_TRANSFER = [
    BankTransferState.CREDITED,
    BankTransferState.REJECTED,
    BankTransferState.CANCELLED,
]


@pytest.mark.parametrize("target", BankTransferState.values)
@pytest.mark.parametrize("decided", DECIDED_TRANSFER)
def test_a_decided_transfer_moves_no_further(organization, owner, operator, decided, target):
    transfer = decided_transfer(organization, owner, operator, decided)

    with pytest.raises(InvalidTransition), transaction.atomic():
        transition(transfer, target, table=BANK_TRANSFER_TRANSITIONS, actor=operator)

    assert BankTransfer.objects.get(pk=transfer.pk).state == decided


def test_crediting_a_rejected_transfer_is_refused_by_its_table_too(
    organization, owner, operator, monkeypatch
):
    """Past the service's own check (AlreadyDecided), the move itself is refused, and the
    credit booked before it is rolled back with it."""
    transfer = decided_transfer(organization, owner, operator, BankTransferState.REJECTED)
    monkeypatch.setattr(transfers, "_still_awaiting", lambda transfer: None)

    with pytest.raises(InvalidTransition):
        transfers.credit_bank_transfer(
            transfer_id=transfer.pk, operator=operator, received_minor=500_000
        )

    assert BankTransfer.objects.get(pk=transfer.pk).state == BankTransferState.REJECTED
    assert not LedgerEntry.objects.filter(wallet__organization=organization).exists()


def test_each_decision_is_audited_as_the_move_it_made(organization, owner, operator):
    for state in DECIDED_TRANSFER:
        transfer = decided_transfer(organization, owner, operator, state)
        event = AuditEvent.objects.get(action=f"bank_transfer.{state}", object_id=transfer.pk)
        assert (event.data["from"], event.data["to"]) == (BankTransferState.AWAITING, state)
    assert not AuditEvent.objects.filter(action__startswith="banktransfer.").exists()


# --- Bank transfers: who may do what ---------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "page", "announce_status"),
    [
        ("owner", 200, 302),
        ("billing", 200, 302),
        ("admin", 200, 403),  # sees billing, does not move money
        ("member", 403, 403),
        ("viewer", 403, 403),
    ],
)
def test_who_sees_the_page_and_who_may_announce(
    client, organization, member_of, role, page, announce_status
):
    as_user(client, member_of(organization, role))

    assert client.get(reverse("billing:bank_transfers")).status_code == page
    response = client.post(
        reverse("billing:bank_transfers"), {"action": "announce", "amount": "5000.00"}
    )

    assert response.status_code == announce_status
    assert BankTransfer.objects.filter(organization=organization).exists() == (
        announce_status == 302
    )


def test_a_role_without_manage_billing_may_not_cancel(client, organization, owner, admin):
    transfer = announce(organization, owner)
    as_user(client, admin)

    response = client.post(
        reverse("billing:bank_transfers"), {"action": "cancel", "id": transfer.pk}
    )

    assert response.status_code == 403
    assert state_of(transfer) == BankTransferState.AWAITING


def test_an_unknown_action_or_id_is_404(client, owner):
    as_user(client, owner)
    url = reverse("billing:bank_transfers")

    assert client.post(url, {"action": "refund"}).status_code == 404
    assert client.post(url, {"action": "cancel", "id": "x"}).status_code == 404
    assert client.post(url, {"action": "cancel", "id": "999999"}).status_code == 404


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


# --- Bank transfers: the tenant's page -------------------------------------------------------


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


def test_announcing_is_audited_for_the_organization(client, organization, billing):
    as_user(client, billing)

    client.post(reverse("billing:bank_transfers"), {"action": "announce", "amount": "12345.67"})

    transfer = BankTransfer.objects.get(organization=organization)
    assert (transfer.amount_minor, transfer.requested_by) == (1_234_567, billing)
    event = audited("bank_transfer.announced", organization, billing, transfer)
    assert event.data == {"reference": transfer.reference, "amount_minor": 1_234_567}


def test_an_amount_above_the_maximum_is_a_form_error(client, owner):
    as_user(client, owner)

    response = client.post(
        reverse("billing:bank_transfers"), {"action": "announce", "amount": "100000001"}
    )

    assert response.status_code == 422
    assert "Transfer between ¥100.00 and ¥100,000,000.00." in response.content.decode()
    assert not BankTransfer.objects.exists()


def test_the_tenant_cancels_a_transfer_once(client, organization, owner, operator):
    transfer = announce(organization, owner)
    as_user(client, owner)
    url = reverse("billing:bank_transfers")

    client.post(url, {"action": "cancel", "id": transfer.pk})
    again = client.post(url, {"action": "cancel", "id": transfer.pk}, follow=True)

    assert state_of(transfer) == BankTransferState.CANCELLED
    assert "already cancelled" in again.content.decode()
    assert AuditEvent.objects.filter(action="bank_transfer.cancelled").count() == 1
    with pytest.raises(transfers.AlreadyDecided):
        transfers.credit_bank_transfer(
            transfer_id=transfer.pk, operator=operator, received_minor=500_000
        )
    assert not LedgerEntry.objects.filter(wallet__organization=organization).exists()


def test_the_tenant_sees_the_rejection_and_its_reason(client, organization, owner, operator):
    transfer = announce(organization, owner)
    transfers.reject_bank_transfer(
        transfer_id=transfer.pk, operator=operator, reason="Nothing with this code arrived"
    )
    as_user(client, owner)

    html = client.get(reverse("billing:bank_transfers")).content.decode()

    assert 'data-state="rejected"' in html and "Nothing with this code arrived" in html


def test_a_credited_transfer_shows_on_the_billing_page_like_a_top_up(
    client, organization, owner, operator
):
    transfer = announce(organization, owner)
    awaiting = announce(organization, owner, 100_000)
    before = balance(organization)
    transfers.credit_bank_transfer(
        transfer_id=transfer.pk, operator=operator, received_minor=499_000
    )
    as_user(client, owner)

    html = client.get(reverse("billing:overview")).content.decode()

    entry = LedgerEntry.objects.get(wallet__organization=organization)
    assert (entry.kind, entry.amount_minor, entry.balance_after_minor) == (
        EntryKind.TOP_UP,
        499_000,
        before + 499_000,
    )
    assert f"Bank transfer {transfer.reference}" in html  # the ledger's line
    assert 'id="overview-bank-transfers"' in html
    assert awaiting.reference in html and "Awaiting the transfer" in html
    assert "¥4,990.00" in html and "Credited" in html


# --- Bank transfers: the park's operators ----------------------------------------------------


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


def test_another_parks_transfer_is_404_to_an_operator(ops, member_of):
    elsewhere = OrganizationFactory(park=ParkFactory())
    theirs = announce(elsewhere, member_of(elsewhere, "owner"))

    response = ops.post(
        reverse("billing:ops_receivables"),
        {"action": "credit", "id": theirs.pk, "received": "5000"},
    )

    assert response.status_code == 404
    assert BankTransfer.objects.get(pk=theirs.pk).state == BankTransferState.AWAITING


def test_an_operator_rejects_a_transfer_with_a_reason(ops, organization, owner, operator):
    transfer = announce(organization, owner)
    before = balance(organization)

    ops.post(
        reverse("billing:ops_receivables"),
        {"action": "reject_transfer", "id": transfer.pk, "reason": "not on the statement"},
    )

    transfer.refresh_from_db()
    assert (transfer.state, transfer.note, transfer.decided_by) == (
        BankTransferState.REJECTED,
        "not on the statement",
        operator,
    )
    assert transfer.decided_at is not None
    event = AuditEvent.objects.get(action="bank_transfer.rejected")
    assert (event.organization_id, event.actor) == (organization.pk, operator)
    assert event.data["reason"] == "not on the statement"
    assert balance(organization) == before


def test_a_rejection_without_a_reason_is_refused(ops, organization, owner):
    transfer = announce(organization, owner)

    response = ops.post(
        reverse("billing:ops_receivables"),
        {"action": "reject_transfer", "id": transfer.pk, "reason": ""},
        follow=True,
    )

    assert response.status_code == 200
    assert "This field is required." in response.content.decode()
    assert state_of(transfer) == BankTransferState.AWAITING
    assert not AuditEvent.objects.filter(action="bank_transfer.rejected").exists()


@pytest.mark.parametrize("received", ["", "abc", "0", "-10", "1.234"])
def test_a_bad_received_amount_credits_nothing(ops, organization, owner, received):
    transfer = announce(organization, owner)

    response = ops.post(
        reverse("billing:ops_receivables"),
        {"action": "credit", "id": transfer.pk, "received": received},
        follow=True,
    )

    assert response.status_code == 200
    assert 'class="alert alert-danger"' in response.content.decode()
    assert state_of(transfer) == BankTransferState.AWAITING
    assert not LedgerEntry.objects.filter(wallet__organization=organization).exists()


def test_crediting_is_audited_with_what_was_received(ops, organization, owner, operator):
    transfer = announce(organization, owner)

    ops.post(
        reverse("billing:ops_receivables"),
        {"action": "credit", "id": transfer.pk, "received": "5000.00"},
    )

    event = audited("bank_transfer.credited", organization, operator, transfer)
    assert event.data == {
        "from": BankTransferState.AWAITING,
        "to": BankTransferState.CREDITED,
        "reference": transfer.reference,
        "received_minor": 500_000,
    }


def test_an_operator_of_another_park_cannot_credit(client, organization, owner):
    transfer = announce(organization, owner)
    elsewhere = ParkOperatorFactory(park=ParkFactory()).user
    as_user(client, elsewhere)

    response = client.post(
        reverse("billing:ops_receivables"),
        {"action": "credit", "id": transfer.pk, "received": "5000"},
    )

    assert response.status_code == 404
    assert state_of(transfer) == BankTransferState.AWAITING


def test_the_park_billing_page_says_what_is_waiting(ops, organization, owner, park):
    announce(organization, owner)
    announce(organization, owner)

    html = ops.get(reverse("billing:ops_overview")).content.decode()

    assert 'id="receivables-waiting"' in html
    assert "2 bank transfers to match" in html and "0 VAT invoice requests to issue" in html
    assert f"{reverse('billing:ops_receivables')}?park={park.pk}" in html


def test_the_park_billing_page_is_quiet_when_nothing_waits(ops, organization, owner, operator):
    transfer = announce(organization, owner)
    transfers.credit_bank_transfer(
        transfer_id=transfer.pk, operator=operator, received_minor=500_000
    )

    html = ops.get(reverse("billing:ops_overview")).content.decode()

    assert 'id="receivables-waiting"' not in html


def test_the_organization_billing_page_lists_its_transfers(
    ops, organization, owner, other_organization, other_owner
):
    ours = announce(organization, owner)
    theirs = announce(other_organization, other_owner, 200_000)

    html = ops.get(
        reverse("billing:ops_organization", kwargs={"organization_id": organization.pk})
    ).content.decode()

    assert 'id="org-bank-transfers"' in html
    assert ours.reference in html and theirs.reference not in html


# --- Bank transfers: races -------------------------------------------------------------------


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


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_confirmation_racing_a_cancellation_ends_one_way(organization, owner, operator):
    """Whichever commits first wins; the other is refused, and the wallet agrees with the
    transfer's final state."""
    transfer = announce(organization, owner)
    before = balance(organization)
    start, outcomes = threading.Barrier(2), []

    def run(name, decide):
        try:
            start.wait(10)
            decide()
            outcomes.append(name)
        except transfers.AlreadyDecided:
            outcomes.append("refused")
        finally:
            connection.close()

    confirm = threading.Thread(
        target=run,
        args=(
            "credited",
            lambda: transfers.credit_bank_transfer(
                transfer_id=transfer.pk, operator=operator, received_minor=500_000
            ),
        ),
    )
    cancel = threading.Thread(
        target=run,
        args=(
            "cancelled",
            lambda: transfers.cancel_bank_transfer(
                transfer_id=transfer.pk, organization=organization, actor=owner
            ),
        ),
    )
    for thread in (confirm, cancel):
        thread.start()
    for thread in (confirm, cancel):
        thread.join(30)

    assert sorted(outcomes) in (["credited", "refused"], ["cancelled", "refused"])
    final = state_of(transfer)
    assert final in outcomes
    credited = 500_000 if final == BankTransferState.CREDITED else 0
    assert balance(organization) == before + credited
    assert LedgerEntry.objects.filter(wallet__organization=organization).count() == (
        1 if final == BankTransferState.CREDITED else 0
    )


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


def test_an_unknown_invoice_type_is_refused_not_a_database_error(organization, owner):
    paid_in(organization, 100_000)

    with pytest.raises(ValidationError) as refused:
        request_invoice(organization, owner, kind="receipt", amount_minor=10_000)

    assert "kind" in refused.value.message_dict


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


def decided_request(organization, owner, operator, state) -> VatInvoiceRequest:
    paid_in(organization, 100_000)
    request = transfers.request_vat_invoice(
        organization=organization, actor=owner, **invoice_fields()
    )
    if state == VatInvoiceState.ISSUED:
        transfers.issue_vat_invoice(request_id=request.pk, operator=operator, number="2431200")
    elif state == VatInvoiceState.REJECTED:
        transfers.reject_vat_invoice(request_id=request.pk, operator=operator, reason="title")
    else:
        transfers.cancel_vat_invoice(request_id=request.pk, organization=organization, actor=owner)
    return VatInvoiceRequest.objects.get(pk=request.pk)


DECIDED_REQUEST = [VatInvoiceState.ISSUED, VatInvoiceState.REJECTED, VatInvoiceState.CANCELLED]


@pytest.mark.parametrize("target", VatInvoiceState.values)
@pytest.mark.parametrize("decided", DECIDED_REQUEST)
def test_a_decided_invoice_request_moves_no_further(organization, owner, operator, decided, target):
    request = decided_request(organization, owner, operator, decided)

    with pytest.raises(InvalidTransition), transaction.atomic():
        transition(request, target, table=VAT_INVOICE_TRANSITIONS, actor=operator)

    assert VatInvoiceRequest.objects.get(pk=request.pk).state == decided


def test_each_invoice_decision_is_audited_as_the_move_it_made(organization, owner, operator):
    for state in DECIDED_REQUEST:
        request = decided_request(organization, owner, operator, state)
        event = AuditEvent.objects.get(action=f"vat_invoice.{state}", object_id=request.pk)
        assert (event.data["from"], event.data["to"]) == (VatInvoiceState.REQUESTED, state)
    assert not AuditEvent.objects.filter(action__startswith="vatinvoicerequest.").exists()


# --- VAT invoices: what counts as paid in ----------------------------------------------------


def test_only_money_that_arrived_counts(organization, owner, operator):
    paid_in(organization, 100_000)
    paid_in(organization, 900_000, state=PaymentState.PENDING)
    paid_in(organization, 900_000, state=PaymentState.FAILED)
    credited, rejected, awaiting = (
        transfers.announce_bank_transfer(
            organization=organization, actor=owner, amount_minor=300_000
        )
        for _ in range(3)
    )
    transfers.credit_bank_transfer(
        transfer_id=credited.pk, operator=operator, received_minor=250_000
    )
    transfers.reject_bank_transfer(transfer_id=rejected.pk, operator=operator, reason="unknown")

    assert transfers.invoiceable_minor(organization) == 100_000 + 250_000  # as received
    assert awaiting.state == BankTransferState.AWAITING


def test_another_organizations_payments_do_not_count(
    organization, owner, other_organization, other_owner
):
    paid_in(other_organization, 500_000)

    with pytest.raises(ValidationError) as refused:
        request_invoice(organization, owner)

    assert "amount" in refused.value.message_dict
    assert transfers.invoiceable_minor(other_organization) == 500_000


# --- VAT invoices: the tenant's form ---------------------------------------------------------


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


def test_the_invoice_form_starts_from_the_verified_name_and_code(tenant, organization):
    type(organization).objects.filter(pk=organization.pk).update(
        legal_name="示范智能科技有限公司", credit_code=TAXPAYER_ID
    )

    html = tenant.get(reverse("billing:vat_invoices")).content.decode()

    assert 'value="示范智能科技有限公司"' in html and f'value="{TAXPAYER_ID}"' in html


@pytest.mark.parametrize(
    ("taxpayer_id", "error"),
    [
        ("9131000MA1FL3X63", "Ensure this value has at least 18 characters"),
        ("91310000MA1FL3X63O", "is not allowed"),  # no O in the code
        ("913100A0MA1FL3X63G", "must be digits"),
        ("91310000MA1FL3X63H", "should be “G”"),  # the wrong check character
    ],
)
def test_a_bad_taxpayer_id_is_a_form_error(paying_tenant, taxpayer_id, error):
    response = paying_tenant.post(reverse("billing:vat_invoices"), posted(taxpayer_id=taxpayer_id))

    assert response.status_code == 422
    assert error in response.content.decode()
    assert not VatInvoiceRequest.objects.exists()


def test_a_lowercase_taxpayer_id_is_stored_in_capitals(paying_tenant, organization):
    paying_tenant.post(reverse("billing:vat_invoices"), posted(taxpayer_id=TAXPAYER_ID.lower()))

    assert VatInvoiceRequest.objects.get(organization=organization).taxpayer_id == TAXPAYER_ID


def test_an_amount_beyond_what_was_paid_in_is_a_form_error(paying_tenant):
    response = paying_tenant.post(reverse("billing:vat_invoices"), posted(amount="2000.01"))

    assert response.status_code == 422
    assert "at most ¥2,000.00 (paid in, not yet invoiced)" in response.content.decode()
    assert not VatInvoiceRequest.objects.exists()


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"amount": "abc"}, "Enter a number."),
        ({"amount": "0"}, "Ensure this value is greater than or equal to 0.01."),
        ({"kind": "fancy"}, "Select a valid choice."),
        ({"email": "not-an-address"}, "Enter a valid email address."),
        ({"title": ""}, "This field is required."),
    ],
)
def test_bad_input_is_a_form_error(paying_tenant, fields, error):
    response = paying_tenant.post(reverse("billing:vat_invoices"), posted(**fields))

    assert response.status_code == 422
    assert error in response.content.decode()
    assert not VatInvoiceRequest.objects.exists()


def test_a_special_invoice_needs_its_bank_too(paying_tenant):
    response = paying_tenant.post(
        reverse("billing:vat_invoices"),
        posted(kind="special", address_phone="上海市浦东新区示范路 1 号 021-5555 0000"),
    )

    assert response.status_code == 422
    assert "A special VAT invoice needs the bank and account." in response.content.decode()


def test_a_special_invoice_with_its_details_is_requested(paying_tenant, organization, owner):
    response = paying_tenant.post(
        reverse("billing:vat_invoices"),
        posted(
            kind="special",
            address_phone="上海市浦东新区示范路 1 号 021-5555 0000",
            bank_account="示范银行上海分行 3100 1234",
        ),
    )

    assert response.status_code == 302
    request = VatInvoiceRequest.objects.get(organization=organization)
    assert (request.kind, request.amount_minor, request.requested_by) == (
        VatInvoiceKind.SPECIAL,
        100_000,
        owner,
    )
    assert request.bank_account == "示范银行上海分行 3100 1234"
    event = audited("vat_invoice.requested", organization, owner, request)
    assert event.data == {"kind": "special", "amount_minor": 100_000}


def test_the_form_starts_from_the_organization_and_the_users_email(
    paying_tenant, organization, owner
):
    html = paying_tenant.get(reverse("billing:vat_invoices")).content.decode()

    assert f'value="{organization.legal_name}"' in html  # the registered name, not the short one
    assert f'value="{organization.credit_code}"' in html
    assert f'value="{owner.email}"' in html


def test_the_amount_starts_from_what_was_used_and_not_yet_invoiced(
    paying_tenant, organization, owner
):
    """¥2,000.00 paid in, ¥300.00 used, ¥100.00 of it invoiced already: the form suggests the
    ¥200.00 used and not invoiced, not the ¥1,900.00 still unspent or uninvoiced (issue 35)."""
    UsageRecordFactory(organization=organization, amount_minor=10_000)
    UsageRecordFactory(organization=organization, amount_minor=20_000)
    transfers.request_vat_invoice(
        organization=organization, actor=owner, **invoice_fields(amount_minor=10_000)
    )
    assert transfers.used_not_invoiced_minor(organization) == 20_000

    html = paying_tenant.get(reverse("billing:vat_invoices")).content.decode()
    assert 'name="amount" value="200"' in html
    assert "what you used and have not had invoiced yet (¥200.00)" in html
    assert "You may ask for up to ¥1,900.00" in html


def test_nothing_used_leaves_the_amount_empty(paying_tenant):
    html = paying_tenant.get(reverse("billing:vat_invoices")).content.decode()
    assert re.search(r'<input type="number" name="amount"(?![^>]*value=)', html)


def test_the_suggestion_never_exceeds_what_was_paid_in(organization, owner):
    paid_in(organization, 5_000)
    UsageRecordFactory(organization=organization, amount_minor=20_000)  # postpaid, in debt
    assert transfers.used_not_invoiced_minor(organization) == 5_000


# --- VAT invoices: who may do what -----------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "page", "request_status"),
    [
        ("owner", 200, 302),
        ("billing", 200, 302),
        ("admin", 200, 403),
        ("member", 403, 403),
        ("viewer", 403, 403),
    ],
)
def test_who_sees_the_page_and_who_may_request(
    client, organization, member_of, role, page, request_status
):
    paid_in(organization, 200_000)
    as_user(client, member_of(organization, role))

    assert client.get(reverse("billing:vat_invoices")).status_code == page
    response = client.post(reverse("billing:vat_invoices"), posted())

    assert response.status_code == request_status
    assert VatInvoiceRequest.objects.exists() == (request_status == 302)


def test_the_tenant_cancels_a_request_and_its_amount_is_free_again(
    paying_tenant, organization, owner
):
    request = request_invoice(organization, owner, amount_minor=200_000)
    url = reverse("billing:vat_invoices")

    paying_tenant.post(url, {"action": "cancel", "id": request.pk})
    again = paying_tenant.post(url, {"action": "cancel", "id": request.pk}, follow=True)

    assert VatInvoiceRequest.objects.get(pk=request.pk).state == VatInvoiceState.CANCELLED
    assert "already cancelled" in again.content.decode()
    assert AuditEvent.objects.filter(action="vat_invoice.cancelled").count() == 1
    assert transfers.invoiceable_minor(organization) == 200_000


def test_an_issued_request_cannot_be_cancelled(paying_tenant, organization, owner, operator):
    request = request_invoice(organization, owner)
    transfers.issue_vat_invoice(request_id=request.pk, operator=operator, number="N1")

    response = paying_tenant.post(
        reverse("billing:vat_invoices"), {"action": "cancel", "id": request.pk}, follow=True
    )

    assert "already issued" in response.content.decode()
    assert VatInvoiceRequest.objects.get(pk=request.pk).state == VatInvoiceState.ISSUED


def test_another_organizations_request_is_404(paying_tenant, other_organization, other_owner):
    paid_in(other_organization, 100_000)
    theirs = request_invoice(other_organization, other_owner)

    response = paying_tenant.post(
        reverse("billing:vat_invoices"), {"action": "cancel", "id": theirs.pk}
    )

    assert response.status_code == 404
    assert VatInvoiceRequest.objects.get(pk=theirs.pk).state == VatInvoiceState.REQUESTED


# --- VAT invoices: the park's operators ------------------------------------------------------


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


def test_issuing_is_audited_and_shown_to_the_tenant(client, organization, owner, operator):
    paid_in(organization, 100_000)
    request = request_invoice(organization, owner)
    as_user(client, operator).post(
        reverse("billing:ops_receivables"),
        {"action": "issue", "id": request.pk, "number": "24312000000012345"},
    )

    request.refresh_from_db()
    assert (request.state, request.decided_by) == (VatInvoiceState.ISSUED, operator)
    event = AuditEvent.objects.get(action="vat_invoice.issued")
    assert (event.organization_id, event.actor) == (organization.pk, operator)
    assert event.data == {"from": "requested", "to": "issued", "number": "24312000000012345"}
    as_user(client, owner)
    for page in ("billing:vat_invoices", "billing:overview"):
        html = client.get(reverse(page)).content.decode()
        assert "24312000000012345" in html and "Issued" in html


def test_issuing_without_a_number_is_refused(ops, organization, owner):
    paid_in(organization, 100_000)
    request = request_invoice(organization, owner)

    response = ops.post(
        reverse("billing:ops_receivables"),
        {"action": "issue", "id": request.pk, "number": ""},
        follow=True,
    )

    assert 'class="alert alert-danger"' in response.content.decode()
    assert VatInvoiceRequest.objects.get(pk=request.pk).state == VatInvoiceState.REQUESTED


def test_a_rejection_is_audited_and_its_reason_shown_to_the_tenant(
    client, organization, owner, operator
):
    paid_in(organization, 100_000)
    request = request_invoice(organization, owner)
    as_user(client, operator).post(
        reverse("billing:ops_receivables"),
        {"action": "reject_invoice", "id": request.pk, "reason": "The title does not match"},
    )

    event = AuditEvent.objects.get(action="vat_invoice.rejected")
    assert (event.organization_id, event.actor) == (organization.pk, operator)
    assert event.data == {
        "from": "requested",
        "to": "rejected",
        "reason": "The title does not match",
    }
    as_user(client, owner)
    html = client.get(reverse("billing:vat_invoices")).content.decode()
    assert 'data-state="rejected"' in html and "The title does not match" in html


def test_the_operator_pages_show_requests(ops, organization, owner, park):
    paid_in(organization, 100_000)
    request_invoice(organization, owner, amount_minor=60_000)

    overview = ops.get(reverse("billing:ops_overview")).content.decode()
    organization_page = ops.get(
        reverse("billing:ops_organization", kwargs={"organization_id": organization.pk})
    ).content.decode()

    assert "1 VAT invoice request to issue" in overview
    assert 'id="org-vat-invoices"' in organization_page and "¥600.00" in organization_page


def test_a_tenant_cannot_open_the_operators_page(tenant):
    assert tenant.get(reverse("billing:ops_receivables")).status_code in (403, 404)


# --- VAT invoices: races ---------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_requests_for_what_is_left_at_once_make_one(organization, owner, billing):
    """Each request counts what is left under the wallet's row lock: two people asking for the
    whole amount at the same moment cannot both get it."""
    paid_in(organization, 100_000)
    start, outcomes = threading.Barrier(2), []

    def ask(actor):
        try:
            start.wait(10)
            request_invoice(organization, actor, amount_minor=100_000)
            outcomes.append("requested")
        except ValidationError:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(actor,)) for actor in (owner, billing)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sorted(outcomes) == ["refused", "requested"]
    assert VatInvoiceRequest.objects.filter(organization=organization).count() == 1
    assert transfers.invoiceable_minor(organization) == 0
