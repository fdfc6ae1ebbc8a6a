"""Bank transfers (对公转账) beyond tests/billing/test_transfers.py: who may do what on the pages,
the tenant's cancel, the operator's rejection and bad input, the audit trail, a confirmation
racing a cancellation, and where tenants and operators see transfers on the billing pages."""

import threading

import pytest
from django.db import connection
from django.urls import reverse

from apps.billing import transfers
from apps.billing.models import BankTransfer, BankTransferState, EntryKind, LedgerEntry
from apps.core.models import AuditEvent
from tests.billing.test_transfers import announce, as_user, audited, balance
from tests.factories import ParkFactory, ParkOperatorFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


def state_of(transfer) -> str:
    return BankTransfer.objects.get(pk=transfer.pk).state


@pytest.fixture
def ops(client, operator):
    return as_user(client, operator)


# --- Who may do what -------------------------------------------------------------------------


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


# --- The tenant ------------------------------------------------------------------------------


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


# --- The park's operators --------------------------------------------------------------------


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
    assert (event.organization, event.actor) == (organization, operator)
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
    assert event.data == {"reference": transfer.reference, "received_minor": 500_000}


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


# --- Races -----------------------------------------------------------------------------------


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
