"""VAT invoice requests (发票) beyond tests/billing/test_transfers.py: the form's errors on the
page, what counts as paid in, who may do what, the audit trail, two requests racing for what
is left, and where tenants and operators see requests on the billing pages."""

import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.urls import reverse

from apps.billing import transfers
from apps.billing.models import (
    BankTransferState,
    Payment,
    PaymentState,
    VatInvoiceKind,
    VatInvoiceRequest,
    VatInvoiceState,
)
from apps.billing.services import wallet_of
from apps.core.models import AuditEvent
from tests.billing.test_transfers import TAXPAYER_ID, as_user, audited, invoice_fields, paid_in

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


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


@pytest.fixture
def tenant(client, owner, organization):
    paid_in(organization, 200_000)
    return as_user(client, owner)


@pytest.fixture
def ops(client, operator):
    return as_user(client, operator)


# --- The tenant's form -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("taxpayer_id", "error"),
    [
        ("9131000MA1FL3X63", "Ensure this value has at least 18 characters"),
        ("91310000MA1FL3X63O", "is not allowed"),  # no O in the code
        ("913100A0MA1FL3X63G", "must be digits"),
        ("91310000MA1FL3X63H", "should be “G”"),  # the wrong check character
    ],
)
def test_a_bad_taxpayer_id_is_a_form_error(tenant, taxpayer_id, error):
    response = tenant.post(reverse("billing:vat_invoices"), posted(taxpayer_id=taxpayer_id))

    assert response.status_code == 422
    assert error in response.content.decode()
    assert not VatInvoiceRequest.objects.exists()


def test_a_lowercase_taxpayer_id_is_stored_in_capitals(tenant, organization):
    tenant.post(reverse("billing:vat_invoices"), posted(taxpayer_id=TAXPAYER_ID.lower()))

    assert VatInvoiceRequest.objects.get(organization=organization).taxpayer_id == TAXPAYER_ID


def test_an_amount_beyond_what_was_paid_in_is_a_form_error(tenant):
    response = tenant.post(reverse("billing:vat_invoices"), posted(amount="2000.01"))

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
def test_bad_input_is_a_form_error(tenant, fields, error):
    response = tenant.post(reverse("billing:vat_invoices"), posted(**fields))

    assert response.status_code == 422
    assert error in response.content.decode()
    assert not VatInvoiceRequest.objects.exists()


def test_a_special_invoice_needs_its_bank_too(tenant):
    response = tenant.post(
        reverse("billing:vat_invoices"),
        posted(kind="special", address_phone="上海市浦东新区示范路 1 号 021-5555 0000"),
    )

    assert response.status_code == 422
    assert "A special VAT invoice needs the bank and account." in response.content.decode()


def test_a_special_invoice_with_its_details_is_requested(tenant, organization, owner):
    response = tenant.post(
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


def test_the_form_starts_from_the_organization_and_the_users_email(tenant, organization, owner):
    html = tenant.get(reverse("billing:vat_invoices")).content.decode()

    assert f'value="{organization.legal_name}"' in html  # the registered name, not the short one
    assert f'value="{organization.credit_code}"' in html
    assert f'value="{owner.email}"' in html
    assert 'name="amount" value="2000"' in html  # what may still be invoiced


# --- What counts as paid in ------------------------------------------------------------------


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


# --- Who may do what -------------------------------------------------------------------------


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


def test_the_tenant_cancels_a_request_and_its_amount_is_free_again(tenant, organization, owner):
    request = request_invoice(organization, owner, amount_minor=200_000)
    url = reverse("billing:vat_invoices")

    tenant.post(url, {"action": "cancel", "id": request.pk})
    again = tenant.post(url, {"action": "cancel", "id": request.pk}, follow=True)

    assert VatInvoiceRequest.objects.get(pk=request.pk).state == VatInvoiceState.CANCELLED
    assert "already cancelled" in again.content.decode()
    assert AuditEvent.objects.filter(action="vat_invoice.cancelled").count() == 1
    assert transfers.invoiceable_minor(organization) == 200_000


def test_an_issued_request_cannot_be_cancelled(tenant, organization, owner, operator):
    request = request_invoice(organization, owner)
    transfers.issue_vat_invoice(request_id=request.pk, operator=operator, number="N1")

    response = tenant.post(
        reverse("billing:vat_invoices"), {"action": "cancel", "id": request.pk}, follow=True
    )

    assert "already issued" in response.content.decode()
    assert VatInvoiceRequest.objects.get(pk=request.pk).state == VatInvoiceState.ISSUED


def test_another_organizations_request_is_404(tenant, other_organization, other_owner):
    paid_in(other_organization, 100_000)
    theirs = request_invoice(other_organization, other_owner)

    response = tenant.post(reverse("billing:vat_invoices"), {"action": "cancel", "id": theirs.pk})

    assert response.status_code == 404
    assert VatInvoiceRequest.objects.get(pk=theirs.pk).state == VatInvoiceState.REQUESTED


# --- The park's operators --------------------------------------------------------------------


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
    assert (event.organization, event.actor) == (organization, operator)
    assert event.data == {"number": "24312000000012345"}
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
    assert (event.organization, event.actor) == (organization, operator)
    assert event.data == {"reason": "The title does not match"}
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


# --- Races -----------------------------------------------------------------------------------


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


def test_an_unknown_invoice_type_is_refused_not_a_database_error(organization, owner):
    Payment.objects.create(
        wallet=wallet_of(organization),
        amount_minor=100_000,
        currency="CNY",
        state=PaymentState.SUCCEEDED,
    )

    with pytest.raises(ValidationError) as refused:
        transfers.request_vat_invoice(
            organization=organization,
            actor=owner,
            kind="receipt",
            amount_minor=10_000,
            title="示范智能科技有限公司",
            taxpayer_id="91310000MA1FL3X63G",
            email="finance@example.com",
        )

    assert "kind" in refused.value.message_dict
