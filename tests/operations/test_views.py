"""The operator back office: who may see it, the isolation between parks, deciding on
verifications, the audit log and the park's security policy."""

import re

import pytest
from django.core.files.base import ContentFile
from django.test import Client

from apps.tenants.models import Park, VerificationState
from tests.factories import (
    AuditEventFactory,
    OrganizationFactory,
    ParkFactory,
    ParkOperatorFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

PDF = b"%PDF-1.4 licence scan\n%%EOF\n"


@pytest.fixture(autouse=True)
def english(client):
    client.cookies["django_language"] = "en"


@pytest.fixture
def submitted(park, settings, tmp_path):
    """An organization of the park waiting for review, with its licence uploaded."""
    settings.MEDIA_ROOT = tmp_path
    organization = OrganizationFactory(
        park=park, name="Awaiting Review Ltd", verification_state=VerificationState.SUBMITTED
    )
    organization.licence.save("scan.pdf", ContentFile(PDF), save=True)
    return organization


@pytest.fixture
def elsewhere(db):
    """A second park with its own operator, a submitted organization and an audit event."""
    park = ParkFactory(name="Elsewhere Park")
    operator = UserFactory()
    ParkOperatorFactory(park=park, user=operator)
    organization = OrganizationFactory(
        park=park, name="Elsewhere Org", verification_state=VerificationState.SUBMITTED
    )
    AuditEventFactory(organization=organization, action="elsewhere.happened")
    return park, operator, organization


def pages(park, organization):
    return [
        "/ops/",
        "/ops/verifications/",
        f"/ops/organizations/{organization.pk}/",
        f"/ops/organizations/{organization.pk}/licence/",
        "/ops/audit/",
        f"/ops/parks/{park.pk}/security/",
    ]


def html_of(response) -> str:
    return response.content.decode()


# --- Who may see the back office -------------------------------------------------------------


def test_anonymous_is_sent_to_login(client, park, submitted):
    for path in pages(park, submitted):
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith(f"/accounts/login/?next={path}"), path


def test_tenant_owner_is_403(client, park, submitted, member_of):
    client.force_login(member_of(submitted, "owner"))
    for path in pages(park, submitted):
        assert client.get(path).status_code == 403, path


def test_operator_of_the_park_sees_every_page(client, park, operator, submitted):
    AuditEventFactory(organization=submitted, action="organization.submitted")
    client.force_login(operator)
    for path in pages(park, submitted):
        assert client.get(path).status_code == 200, path

    licence = client.get(f"/ops/organizations/{submitted.pk}/licence/")
    assert b"".join(licence.streaming_content) == PDF
    queue = html_of(client.get("/ops/verifications/"))
    assert "Awaiting Review Ltd" in queue
    assert "1 organization awaits verification." in html_of(client.get("/ops/"))
    assert "organization.submitted" in html_of(client.get("/ops/audit/"))


def test_operator_of_another_park_gets_404_for_this_parks_objects(
    client, park, submitted, elsewhere
):
    _other_park, other_operator, _other_org = elsewhere
    client.force_login(other_operator)

    assert client.get(f"/ops/organizations/{submitted.pk}/").status_code == 404
    assert client.get(f"/ops/organizations/{submitted.pk}/licence/").status_code == 404
    assert client.get(f"/ops/parks/{park.pk}/security/").status_code == 404
    response = client.post(f"/ops/organizations/{submitted.pk}/", {"decision": "approve"})
    assert response.status_code == 404
    response = client.post(f"/ops/parks/{park.pk}/security/", {"require_mfa_for_owners": "on"})
    assert response.status_code == 404
    submitted.refresh_from_db()
    assert submitted.verification_state == VerificationState.SUBMITTED
    assert not Park.objects.get(pk=park.pk).require_mfa_for_owners


def test_operator_of_another_park_does_not_see_this_parks_queue_or_events(
    client, park, submitted, elsewhere
):
    _other_park, other_operator, _other_org = elsewhere
    AuditEventFactory(organization=submitted, action="local.happened")
    client.force_login(other_operator)

    queue = html_of(client.get("/ops/verifications/"))
    assert "Elsewhere Org" in queue
    assert "Awaiting Review Ltd" not in queue
    audit = html_of(client.get("/ops/audit/"))
    assert "elsewhere.happened" in audit
    assert "local.happened" not in audit
    # Nor can they pick this park's organization as a filter.
    filtered = html_of(client.get("/ops/audit/", {"organization": submitted.pk}))
    assert "local.happened" not in filtered


def test_superuser_sees_all_parks(client, park, submitted, elsewhere):
    other_park, _other_operator, other_org = elsewhere
    AuditEventFactory(organization=submitted, action="local.happened")
    client.force_login(UserFactory(is_superuser=True, is_staff=True))

    for path in pages(park, submitted) + [
        f"/ops/organizations/{other_org.pk}/",
        f"/ops/parks/{other_park.pk}/security/",
    ]:
        assert client.get(path).status_code == 200, path
    queue = html_of(client.get("/ops/verifications/"))
    assert "Awaiting Review Ltd" in queue and "Elsewhere Org" in queue
    audit = html_of(client.get("/ops/audit/"))
    assert "local.happened" in audit and "elsewhere.happened" in audit


def test_licence_without_a_file_is_404(client, park, operator):
    organization = OrganizationFactory(park=park)
    client.force_login(operator)
    assert client.get(f"/ops/organizations/{organization.pk}/licence/").status_code == 404


# --- Deciding on verifications ---------------------------------------------------------------


def test_approve_verifies_the_organization(client, operator, submitted):
    client.force_login(operator)
    response = client.post(f"/ops/organizations/{submitted.pk}/", {"decision": "approve"})

    assert response.status_code == 302
    assert response["Location"] == "/ops/verifications/"
    submitted.refresh_from_db()
    assert submitted.verification_state == VerificationState.VERIFIED
    assert submitted.verification_decided_at is not None
    queue = html_of(client.get("/ops/verifications/"))
    assert "Awaiting Review Ltd is verified." in queue
    assert "Nothing waits for review." in queue


def test_reject_with_a_reason(client, operator, submitted):
    client.force_login(operator)
    response = client.post(
        f"/ops/organizations/{submitted.pk}/",
        {"decision": "reject", "reason": "The licence scan is unreadable."},
    )

    assert response.status_code == 302
    assert response["Location"] == "/ops/verifications/"
    submitted.refresh_from_db()
    assert submitted.verification_state == VerificationState.REJECTED
    assert submitted.verification_note == "The licence scan is unreadable."


@pytest.mark.parametrize("reason", ["", "   "])
def test_reject_without_a_reason_is_422(client, operator, submitted, reason):
    client.force_login(operator)
    response = client.post(
        f"/ops/organizations/{submitted.pk}/", {"decision": "reject", "reason": reason}
    )

    assert response.status_code == 422
    assert "This field is required." in html_of(response)
    submitted.refresh_from_db()
    assert submitted.verification_state == VerificationState.SUBMITTED


def test_approving_an_unsubmitted_organization_is_refused(client, park, operator):
    organization = OrganizationFactory(park=park)
    client.force_login(operator)
    response = client.post(f"/ops/organizations/{organization.pk}/", {"decision": "approve"})
    assert response.status_code == 422
    assert f"{organization.name} cannot go from “Unverified” to “Verified”." in html_of(response)
    organization.refresh_from_db()
    assert organization.verification_state == VerificationState.UNVERIFIED


def test_detail_shows_the_decision_forms_only_while_submitted(client, park, operator, submitted):
    client.force_login(operator)
    assert "Approve verification" in html_of(client.get(f"/ops/organizations/{submitted.pk}/"))
    verified = OrganizationFactory(park=park, verified=True)
    assert "Approve verification" not in html_of(client.get(f"/ops/organizations/{verified.pk}/"))


# --- The audit log ---------------------------------------------------------------------------


ROW = '<tr><td class="small num">'


def test_audit_log_filters_by_action_prefix(client, park, operator, organization):
    AuditEventFactory(organization=organization, action="api_key.created")
    AuditEventFactory(organization=organization, action="api_key.revoked")
    AuditEventFactory(organization=organization, action="membership.removed")
    client.force_login(operator)

    html = html_of(client.get("/ops/audit/", {"action": "api_key."}))
    assert "api_key.created" in html and "api_key.revoked" in html
    assert "membership.removed" not in html
    # A prefix, not a substring.
    assert "api_key.created" not in html_of(client.get("/ops/audit/", {"action": "key."}))


def test_audit_log_filters_by_actor(client, park, operator, organization):
    alice = UserFactory(username="alice-admin")
    bob = UserFactory(username="bob-billing")
    AuditEventFactory(organization=organization, actor=alice, action="by.alice")
    AuditEventFactory(organization=organization, actor=bob, action="by.bob")
    client.force_login(operator)

    html = html_of(client.get("/ops/audit/", {"actor": "ALICE"}))
    assert "by.alice" in html
    assert "by.bob" not in html


def test_audit_log_filters_by_organization(
    client, park, operator, organization, other_organization
):
    AuditEventFactory(organization=organization, action="in.first")
    AuditEventFactory(organization=other_organization, action="in.second")
    client.force_login(operator)

    html = html_of(client.get("/ops/audit/", {"organization": other_organization.pk}))
    assert "in.second" in html
    assert "in.first" not in html


def test_audit_log_paginates_at_50(client, park, operator, organization):
    AuditEventFactory.create_batch(51, organization=organization, action="bulk.event")
    client.force_login(operator)

    first = html_of(client.get("/ops/audit/"))
    assert first.count(ROW) == 50
    assert "Page 1 of 2" in first
    assert '<a href="?&page=2">Older</a>' in first
    second = html_of(client.get("/ops/audit/", {"page": 2}))
    assert second.count(ROW) == 1
    assert "Page 2 of 2" in second
    assert '<a href="?&page=1">Newer</a>' in second


def test_audit_log_pagination_keeps_the_filters(client, park, operator, organization):
    AuditEventFactory.create_batch(51, organization=organization, action="bulk.event")
    AuditEventFactory(organization=organization, action="other.event")
    client.force_login(operator)

    html = html_of(client.get("/ops/audit/", {"action": "bulk."}))
    assert html.count(ROW) == 50
    assert '<a href="?action=bulk.&page=2">Older</a>' in html
    second = html_of(client.get("/ops/audit/", {"action": "bulk.", "page": 2}))
    assert second.count(ROW) == 1
    assert "other.event" not in second


def test_audit_log_answers_htmx_with_the_rows_only(client, park, operator, organization):
    AuditEventFactory(organization=organization, action="api_key.created")
    AuditEventFactory(organization=organization, action="membership.removed")
    client.force_login(operator)

    response = client.get("/ops/audit/", {"action": "api_key."}, HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    html = html_of(response)
    assert "<html" not in html
    assert "<form" not in html
    assert html.count(ROW) == 1
    assert "api_key.created" in html
    assert "membership.removed" not in html
    assert "<html" in html_of(client.get("/ops/audit/"))


def test_an_invalid_filter_does_not_drop_the_others(client, park, operator, organization):
    AuditEventFactory(organization=organization, action="api_key.created")
    AuditEventFactory(organization=organization, action="membership.removed")
    client.force_login(operator)
    html = html_of(client.get("/ops/audit/", {"action": "api_key.", "since": "garbage"}))
    assert "membership.removed" not in html


def test_audit_log_with_no_match(client, park, operator):
    client.force_login(operator)
    assert "No events match." in html_of(client.get("/ops/audit/", {"action": "nothing."}))


# --- The security policy ---------------------------------------------------------------------


def test_mfa_policy_form_saves_both_flags(client, park, operator):
    client.force_login(operator)
    response = client.post(
        f"/ops/parks/{park.pk}/security/",
        {"require_mfa_for_operators": "on", "require_mfa_for_owners": "on"},
    )

    assert response.status_code == 302
    assert response["Location"] == f"/ops/parks/{park.pk}/security/"
    park.refresh_from_db()
    assert park.require_mfa_for_operators is True
    assert park.require_mfa_for_owners is True


def test_mfa_policy_form_clears_the_flags(park, operator):
    Park.objects.filter(pk=park.pk).update(
        require_mfa_for_operators=False, require_mfa_for_owners=True
    )
    # As a browser does: unchecked boxes are not sent, only the CSRF token is.
    browser = Client(enforce_csrf_checks=True)
    browser.cookies["django_language"] = "en"
    browser.force_login(operator)
    page = html_of(browser.get(f"/ops/parks/{park.pk}/security/"))
    assert re.search(r'<input type="checkbox" name="require_mfa_for_owners"[^>]*checked', page)
    assert not re.search(r'name="require_mfa_for_operators"[^>]*checked', page)
    token = browser.cookies["csrftoken"].value

    response = browser.post(f"/ops/parks/{park.pk}/security/", {"csrfmiddlewaretoken": token})

    assert response.status_code == 302
    park.refresh_from_db()
    assert (park.require_mfa_for_operators, park.require_mfa_for_owners) == (False, False)
