"""The tenant pages: creating and switching organizations, the overview and its role matrix,
verification and the licence, members and invitations, and API keys."""

import re
from datetime import UTC, datetime
from hashlib import sha256

import pytest
import time_machine
from django.core import mail
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils.html import escape

from apps.tenants import services
from apps.tenants.credit_code import check_character
from apps.tenants.middleware import SESSION_KEY
from apps.tenants.models import (
    ApiKey,
    Invitation,
    Membership,
    Organization,
    Role,
    VerificationState,
)
from apps.tenants.roles import ROLE_ACTIONS, Action
from tests.factories import (
    MembershipFactory,
    OrganizationFactory,
    UserFactory,
    credit_code,
)

pytestmark = pytest.mark.django_db

PDF = b"%PDF-1.4 a business licence\n%%EOF\n"


@pytest.fixture(autouse=True)
def english(client):
    client.cookies["django_language"] = "en"


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    return tmp_path


def html_of(response) -> str:
    return response.content.decode()


# --- Creating and switching organizations ----------------------------------------------------


def test_create_page_renders(client, park):
    client.force_login(UserFactory())
    response = client.get("/org/new/")
    assert response.status_code == 200
    assert "Create your enterprise" in html_of(response)


def test_create_makes_the_user_owner_and_switches_to_the_new_organization(
    client, owner, organization
):
    client.force_login(owner)
    response = client.post(
        "/org/new/",
        {"name": "Acme Robotics", "park": organization.park.pk, "accept_terms": "on"},
    )

    assert response.status_code == 302
    assert response["Location"] == "/org/"
    created = Organization.objects.get(name="Acme Robotics")
    assert created.park == organization.park
    assert Membership.objects.get(organization=created, user=owner).role == Role.OWNER
    assert client.session[SESSION_KEY] == created.pk

    page = client.get("/org/")
    assert page.wsgi_request.organization == created
    assert '<h1 class="h3 mb-0 me-3">Acme Robotics</h1>' in html_of(page)


def test_create_with_an_empty_name_is_422_with_the_error(client, park):
    user = UserFactory()
    client.force_login(user)
    response = client.post("/org/new/", {"name": "", "park": park.pk})

    assert response.status_code == 422
    assert "This field is required." in html_of(response)
    assert not Membership.objects.filter(user=user).exists()


def test_create_with_a_blank_name_is_refused_by_the_service(client, park):
    user = UserFactory()
    client.force_login(user)
    response = client.post("/org/new/", {"name": "   ", "park": park.pk, "accept_terms": "on"})

    assert response.status_code == 422
    assert not Organization.objects.exists()


def test_create_asks_for_the_terms_and_records_when_they_were_accepted(client, park):
    user = UserFactory()
    client.force_login(user)
    form = client.get("/org/new/")
    assert f'href="{reverse("portal:terms")}"' in html_of(form)

    refused = client.post("/org/new/", {"name": "Acme Robotics", "park": park.pk})
    assert refused.status_code == 422
    assert "Accept the terms of service to create your enterprise." in html_of(refused)
    assert not Organization.objects.exists()

    with time_machine.travel(datetime(2026, 12, 4, 9, tzinfo=UTC), tick=False):
        client.post("/org/new/", {"name": "Acme Robotics", "park": park.pk, "accept_terms": "on"})
    accepted = Organization.objects.get().terms_accepted_at
    assert accepted == datetime(2026, 12, 4, 9, tzinfo=UTC)


def test_the_terms_page_is_public_and_says_it_is_a_placeholder(client):
    html = html_of(client.get(reverse("portal:terms")))
    assert "Terms of service" in html and 'id="terms-placeholder"' in html


def test_switch_to_an_organization_of_the_user(client, owner, organization, park):
    # "Organization …" names sort before "Zeta", so Zeta is not the default choice.
    second = OrganizationFactory(park=park, name="Zeta Labs")
    MembershipFactory(organization=second, user=owner, role=Role.VIEWER)
    client.force_login(owner)
    assert client.get("/org/").wsgi_request.organization == organization

    response = client.post("/org/switch/", {"organization": second.pk})

    assert response.status_code == 302
    assert response["Location"] == "/org/"
    page = client.get("/org/")
    assert page.wsgi_request.organization == second
    assert "Zeta Labs" in html_of(page)
    assert page.wsgi_request.membership.role == Role.VIEWER


def test_switch_to_an_organization_of_someone_else_is_404(
    client, owner, organization, other_organization
):
    client.force_login(owner)
    response = client.post("/org/switch/", {"organization": other_organization.pk})

    assert response.status_code == 404
    assert client.get("/org/").wsgi_request.organization == organization


def test_switch_without_an_organization_is_404(client, owner):
    client.force_login(owner)
    assert client.post("/org/switch/", {}).status_code == 404


def test_switch_with_a_malformed_organization_id_is_404(client, owner):
    client.force_login(owner)
    assert client.post("/org/switch/", {"organization": "nope"}).status_code == 404


def test_switch_follows_a_local_next(client, owner, organization):
    client.force_login(owner)
    response = client.post("/org/switch/", {"organization": organization.pk, "next": "/catalog/"})
    assert response["Location"] == "/catalog/"


def test_switch_does_not_redirect_to_another_site(client, owner, organization):
    client.force_login(owner)
    response = client.post(
        "/org/switch/", {"organization": organization.pk, "next": "https://evil.example/phish"}
    )
    assert response.status_code == 302
    assert not response["Location"].startswith("https://evil.example")


# --- The organization overview ---------------------------------------------------------------


def role_rows(html: str) -> dict[str, list[bool]]:
    table = html.split('id="role-matrix"', 1)[1].split("</table>", 1)[0]
    rows = {}
    for label, cells in re.findall(r'<th scope="row">(.*?)</th>(.*?)</tr>', table):
        rows[label] = ["✓" in cell for cell in re.findall(r"<td[^>]*>(.*?)</td>", cells)]
    return rows


def test_overview_shows_the_organization_and_the_role_matrix(client, admin, organization):
    client.force_login(admin)
    response = client.get("/org/")

    assert response.status_code == 200
    html = html_of(response)
    assert organization.name in html
    assert organization.credit_code in html
    for _value, label in Action.choices:
        assert escape(str(label)) in html
    rows = role_rows(html)
    assert list(rows) == ["Owner", "Admin", "Member", "Billing", "Viewer"]
    for role, label in zip(Role.values, rows, strict=True):
        assert rows[label] == [a in ROLE_ACTIONS[role] for a in Action.values]
    assert rows["Owner"] == [True] * len(Action.values)
    assert rows["Viewer"] == [True] + [False] * (len(Action.values) - 1)
    # The viewer's own row is highlighted.
    assert '<tr class="table-success"><th scope="row">Admin</th>' in html


def test_overview_without_an_organization_goes_to_create(client):
    client.force_login(UserFactory())
    response = client.get("/org/")
    assert response.status_code == 302
    assert response["Location"] == "/org/new/"


def test_overview_needs_a_login(client):
    response = client.get("/org/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


# --- Verification and the licence ------------------------------------------------------------


@pytest.fixture
def unverified(park):
    return OrganizationFactory(park=park, anonymous=True)


def test_verification_page_renders_for_the_owner(client, owner):
    client.force_login(owner)
    response = client.get("/org/verification/")
    assert response.status_code == 200
    html = html_of(response)
    assert 'enctype="multipart/form-data"' in html
    assert "Unified social credit code" in html


def test_verification_submit_with_a_pdf(client, unverified, member_of, media):
    owner = member_of(unverified, Role.OWNER)
    client.force_login(owner)
    code = credit_code(4_200_001)
    upload = SimpleUploadedFile("licence.pdf", PDF, content_type="application/pdf")

    response = client.post(
        "/org/verification/",
        {"legal_name": "Acme Robotics Co., Ltd.", "credit_code": code.lower(), "licence": upload},
    )

    assert response.status_code == 302
    assert response["Location"] == "/org/verification/"
    unverified.refresh_from_db()
    assert unverified.verification_state == VerificationState.SUBMITTED
    assert unverified.verification_submitted_at is not None
    assert (unverified.legal_name, unverified.credit_code) == ("Acme Robotics Co., Ltd.", code)
    stored = media / unverified.licence.name
    assert stored.read_bytes() == PDF
    page = client.get("/org/verification/")
    assert "the park's operators are reviewing it" in html_of(page)
    assert 'enctype="multipart/form-data"' not in html_of(page)  # no longer editable


def test_verification_with_a_wrong_check_character_is_422(client, unverified, member_of, media):
    client.force_login(member_of(unverified, Role.OWNER))
    good = credit_code(4_200_002)
    expected = good[17]
    wrong = next(c for c in "0123456789" if c != expected)
    upload = SimpleUploadedFile("licence.pdf", PDF, content_type="application/pdf")

    response = client.post(
        "/org/verification/",
        {"legal_name": "Acme", "credit_code": good[:17] + wrong, "licence": upload},
    )

    assert response.status_code == 422
    assert check_character(good[:17]) == expected
    message = (
        f"The check character is “{wrong}” but should be “{expected}”: please check the code "
        "for a typing error."
    )
    assert escape(message) in html_of(response)
    unverified.refresh_from_db()
    assert unverified.verification_state == VerificationState.UNVERIFIED
    assert not unverified.licence
    assert not list(media.rglob("*.pdf"))


def test_verification_with_a_short_code_says_how_long_it_is(client, unverified, member_of, media):
    client.force_login(member_of(unverified, Role.OWNER))
    upload = SimpleUploadedFile("licence.pdf", PDF, content_type="application/pdf")
    response = client.post(
        "/org/verification/", {"legal_name": "Acme", "credit_code": "91310115", "licence": upload}
    )
    assert response.status_code == 422
    assert "The code must be 18 characters long; this one has 8." in html_of(response)


def test_verification_refuses_a_file_that_is_not_what_it_says(client, unverified, member_of, media):
    client.force_login(member_of(unverified, Role.OWNER))
    upload = SimpleUploadedFile("licence.pdf", b"MZ\x90\x00 not a pdf", content_type="x/y")
    response = client.post(
        "/org/verification/",
        {"legal_name": "Acme", "credit_code": credit_code(4_200_003), "licence": upload},
    )
    assert response.status_code == 422
    assert "The file&#x27;s content is not a PDF file." in html_of(response)


@pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER, Role.BILLING])
def test_verification_is_403_for_roles_that_do_not_manage_the_organization(
    client, organization, member_of, role
):
    client.force_login(member_of(organization, role))
    assert client.get("/org/verification/").status_code == 403


@pytest.fixture
def with_licence(organization, media):
    organization.licence.save("scan.pdf", ContentFile(PDF), save=True)
    return organization


def test_licence_download_for_the_owner(client, owner, with_licence):
    client.force_login(owner)
    response = client.get("/org/verification/licence/")

    assert response.status_code == 200
    assert b"".join(response.streaming_content) == PDF
    assert response["Content-Type"] == "application/pdf"
    assert f'filename="licence-{with_licence.slug}.pdf"' in response["Content-Disposition"]


@pytest.mark.parametrize(
    ("name", "content_type", "attachment"),
    [
        ("scan.pdf", "application/pdf", False),
        ("scan.PNG", "image/png", False),
        ("scan.html", "application/octet-stream", True),  # stored before the type check
    ],
)
def test_licence_is_never_sniffed(
    client, owner, organization, media, name, content_type, attachment
):
    organization.licence.save(name, ContentFile(PDF), save=True)
    client.force_login(owner)
    response = client.get("/org/verification/licence/")
    assert response.status_code == 200
    assert response["Content-Type"] == content_type
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Disposition"].startswith("attachment" if attachment else "inline")
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_licence_download_of_a_jpeg_is_an_image(client, owner, organization, media):
    organization.licence.save("scan.jpeg", ContentFile(b"\xff\xd8\xff\xe0 jpeg"), save=True)
    client.force_login(owner)
    response = client.get("/org/verification/licence/")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/jpeg"


def test_licence_download_is_403_for_a_viewer(client, viewer, with_licence):
    client.force_login(viewer)
    assert client.get("/org/verification/licence/").status_code == 403


def test_licence_download_needs_a_login(client, with_licence):
    response = client.get("/org/verification/licence/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/org/verification/licence/")


def test_licence_download_without_a_licence_is_404(client, owner, media):
    client.force_login(owner)
    assert client.get("/org/verification/licence/").status_code == 404


def test_licence_download_is_only_the_current_organization(
    client, other_owner, with_licence, media
):
    client.force_login(other_owner)
    assert client.get("/org/verification/licence/").status_code == 404


# --- Members and invitations -----------------------------------------------------------------


def test_members_page_lists_members(client, owner, member, viewer, organization):
    client.force_login(owner)
    response = client.get("/org/members/")
    assert response.status_code == 200
    html = html_of(response)
    for user in (owner, member, viewer):
        assert user.email in html
    assert "Invite a member" in html


def test_owner_invites_a_member_by_email(
    client, owner, organization, django_capture_on_commit_callbacks
):
    client.force_login(owner)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/org/members/", {"email": "New.Person@Example.com", "role": "admin"}
        )

    assert response.status_code == 302
    assert response["Location"] == "/org/members/"
    invitation = Invitation.objects.get(organization=organization)
    assert (invitation.email, invitation.role) == ("new.person@example.com", Role.ADMIN)
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["new.person@example.com"]
    assert "/invitations/" in mail.outbox[0].body
    page = html_of(client.get("/org/members/"))
    assert "Invitation sent to New.Person@Example.com." in page
    assert "new.person@example.com" in page.split('id="invitations"', 1)[1]


def test_invite_with_a_bad_email_is_422(client, owner, organization):
    client.force_login(owner)
    response = client.post("/org/members/", {"email": "not-an-address", "role": "member"})
    assert response.status_code == 422
    assert "Enter a valid email address." in html_of(response)
    assert not Invitation.objects.exists()


def test_admin_cannot_invite_an_owner(client, admin, organization):
    client.force_login(admin)
    response = client.post("/org/members/", {"email": "boss@example.com", "role": "owner"})
    assert response.status_code == 422  # owner is not among the admin's choices
    assert not Invitation.objects.exists()


@pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER, Role.BILLING])
def test_invite_is_403_for_roles_that_do_not_manage_members(client, organization, member_of, role):
    client.force_login(member_of(organization, role))
    assert client.get("/org/members/").status_code == 200
    response = client.post("/org/members/", {"email": "x@example.com", "role": "member"})
    assert response.status_code == 403
    assert not Invitation.objects.exists()


def test_owner_changes_a_role(client, owner, member, organization):
    membership = Membership.objects.get(user=member, organization=organization)
    client.force_login(owner)
    response = client.post(f"/org/members/{membership.pk}/role/", {"role": "billing"})

    assert response.status_code == 302
    assert response["Location"] == "/org/members/"
    membership.refresh_from_db()
    assert membership.role == Role.BILLING
    assert "Role changed." in html_of(client.get("/org/members/"))


def test_admin_cannot_make_an_owner(client, admin, member, organization):
    membership = Membership.objects.get(user=member, organization=organization)
    client.force_login(admin)
    response = client.post(f"/org/members/{membership.pk}/role/", {"role": "owner"})
    assert response.status_code == 403
    membership.refresh_from_db()
    assert membership.role == Role.MEMBER


def test_changing_a_role_in_another_organization_is_404(
    client, owner, other_owner, other_organization
):
    membership = Membership.objects.get(user=other_owner, organization=other_organization)
    client.force_login(owner)
    response = client.post(f"/org/members/{membership.pk}/role/", {"role": "viewer"})
    assert response.status_code == 404
    membership.refresh_from_db()
    assert membership.role == Role.OWNER


def test_member_cannot_change_roles(client, member, viewer, organization):
    membership = Membership.objects.get(user=viewer, organization=organization)
    client.force_login(member)
    response = client.post(f"/org/members/{membership.pk}/role/", {"role": "admin"})
    assert response.status_code == 403


def test_last_owner_cannot_be_demoted(client, owner, organization):
    membership = Membership.objects.get(user=owner, organization=organization)
    client.force_login(owner)
    response = client.post(f"/org/members/{membership.pk}/role/", {"role": "admin"})
    assert response.status_code == 302
    membership.refresh_from_db()
    assert membership.role == Role.OWNER
    assert "keeps at least one owner" in html_of(client.get("/org/members/"))


def test_owner_removes_a_member(client, owner, member, organization):
    membership = Membership.objects.get(user=member, organization=organization)
    client.force_login(owner)
    response = client.post(f"/org/members/{membership.pk}/remove/")

    assert response.status_code == 302
    assert response["Location"] == "/org/members/"
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert "Member removed." in html_of(client.get("/org/members/"))


def test_viewer_cannot_remove_a_member(client, viewer, member, organization):
    membership = Membership.objects.get(user=member, organization=organization)
    client.force_login(viewer)
    assert client.post(f"/org/members/{membership.pk}/remove/").status_code == 403
    assert Membership.objects.filter(pk=membership.pk).exists()


def test_a_member_can_leave(client, owner, member, organization):
    membership = Membership.objects.get(user=member, organization=organization)
    client.force_login(member)
    response = client.post(f"/org/members/{membership.pk}/remove/")
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert not Membership.objects.filter(pk=membership.pk).exists()


@pytest.fixture
def invitation(organization, owner, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        invitation, token = services.invite_member(
            organization=organization, actor=owner, email="invitee@example.com", role=Role.MEMBER
        )
    mail.outbox.clear()
    invitation.token = token
    return invitation


def test_owner_resends_an_invitation(client, owner, invitation, django_capture_on_commit_callbacks):
    old_hash = invitation.token_hash
    client.force_login(owner)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/org/invitations/{invitation.pk}/resend/")

    assert response.status_code == 302
    assert response["Location"] == "/org/members/"
    invitation.refresh_from_db()
    assert invitation.token_hash != old_hash
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["invitee@example.com"]
    # The earlier link no longer works.
    assert services.invitation_for_token(invitation.token) is None


def test_owner_revokes_an_invitation(client, owner, invitation):
    client.force_login(owner)
    response = client.post(f"/org/invitations/{invitation.pk}/revoke/")

    assert response.status_code == 302
    invitation.refresh_from_db()
    assert invitation.revoked_at is not None
    page = html_of(client.get("/org/members/"))
    assert "Invitation revoked." in page
    assert "invitee@example.com" not in page


def test_member_cannot_resend_or_revoke(client, member, invitation):
    client.force_login(member)
    assert client.post(f"/org/invitations/{invitation.pk}/resend/").status_code == 403
    assert client.post(f"/org/invitations/{invitation.pk}/revoke/").status_code == 403
    invitation.refresh_from_db()
    assert invitation.revoked_at is None


def test_invitation_of_another_organization_is_404(client, other_owner, invitation):
    client.force_login(other_owner)
    assert client.post(f"/org/invitations/{invitation.pk}/revoke/").status_code == 404


@pytest.fixture
def invitee(db):
    return UserFactory(email="invitee@example.com")


def test_accept_page_shows_the_organization(client, invitee, invitation, organization):
    client.force_login(invitee)
    response = client.get(f"/invitations/{invitation.token}/")

    assert response.status_code == 200
    html = html_of(response)
    assert f"Join {organization.name}" in html
    assert "This invitation is for invitee@example.com, as Member." in html


def test_accepting_creates_the_membership_and_switches(client, invitee, invitation, organization):
    client.force_login(invitee)
    response = client.post(f"/invitations/{invitation.token}/")

    assert response.status_code == 302
    assert response["Location"] == "/org/"
    assert Membership.objects.get(user=invitee, organization=organization).role == Role.MEMBER
    invitation.refresh_from_db()
    assert invitation.accepted_at is not None
    page = client.get("/org/")
    assert page.wsgi_request.organization == organization
    assert f"Welcome to {organization.name}." in html_of(page)


def test_accepting_as_someone_else_is_403(client, invitation, organization):
    stranger = UserFactory()
    client.force_login(stranger)
    assert client.post(f"/invitations/{invitation.token}/").status_code == 403
    assert not Membership.objects.filter(user=stranger).exists()


def test_accept_page_needs_a_login(client, invitation):
    response = client.get(f"/invitations/{invitation.token}/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_an_unknown_token_shows_the_not_valid_page(client, invitee):
    client.force_login(invitee)
    response = client.get("/invitations/not-a-real-token/")
    assert response.status_code == 200
    html = html_of(response)
    assert "This invitation link is not valid." in html
    assert "Accept invitation" not in html


def test_posting_an_unknown_token_creates_nothing(client, invitee):
    client.force_login(invitee)
    response = client.post("/invitations/not-a-real-token/")
    assert response.status_code == 200
    assert "This invitation link is not valid." in html_of(response)
    assert not Membership.objects.filter(user=invitee).exists()


def test_a_revoked_invitation_shows_the_not_valid_page(client, owner, invitee, invitation):
    services.revoke_invitation(invitation=invitation, actor=owner)
    client.force_login(invitee)
    html = html_of(client.get(f"/invitations/{invitation.token}/"))
    assert "This invitation link is not valid." in html


# --- API keys --------------------------------------------------------------------------------


SECRET = re.compile(r"loam_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")


def test_owner_creates_a_key_and_sees_the_secret_once(client, owner, organization):
    client.force_login(owner)
    response = client.post("/org/api-keys/", {"name": "ci", "scope": "write", "expires_at": ""})

    assert response.status_code == 200
    html = html_of(response)
    key = ApiKey.objects.get(organization=organization)
    assert (key.name, key.scope, key.created_by, key.expires_at) == ("ci", "write", owner, None)
    secrets = SECRET.findall(html)
    assert len(secrets) == 1
    secret = secrets[0]
    assert html.count(secret) == 1
    assert secret.startswith(f"loam_{key.prefix}_")
    assert sha256(secret.encode()).hexdigest() == key.key_hash
    assert "Copy this key now: it is shown only once." in html

    reloaded = html_of(client.get("/org/api-keys/"))
    assert secret not in reloaded
    assert not SECRET.search(reloaded)
    assert f"loam_{key.prefix}_…" in reloaded
    assert "shown only once" not in reloaded


def test_creating_a_key_with_a_past_expiry_is_422(client, owner, organization):
    client.force_login(owner)
    response = client.post(
        "/org/api-keys/", {"name": "old", "scope": "read", "expires_at": "2001-01-01T00:00"}
    )
    assert response.status_code == 422
    assert "The expiry must be in the future." in html_of(response)
    assert not ApiKey.objects.exists()


def test_owner_revokes_a_key(client, owner, organization):
    key, _secret = services.create_api_key(
        organization=organization, actor=owner, name="old", scope="read"
    )
    client.force_login(owner)
    response = client.post(f"/org/api-keys/{key.pk}/revoke/")

    assert response.status_code == 302
    assert response["Location"] == "/org/api-keys/"
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert f"Key {key.prefix} revoked." in html_of(client.get("/org/api-keys/"))


def test_revoking_another_organizations_key_is_404(client, owner, other_owner, other_organization):
    key, _secret = services.create_api_key(
        organization=other_organization, actor=other_owner, name="theirs", scope="read"
    )
    client.force_login(owner)
    assert client.post(f"/org/api-keys/{key.pk}/revoke/").status_code == 404
    key.refresh_from_db()
    assert key.revoked_at is None


def test_api_keys_page_renders_for_an_admin(client, admin):
    client.force_login(admin)
    assert client.get("/org/api-keys/").status_code == 200


@pytest.mark.parametrize("role", [Role.VIEWER, Role.MEMBER, Role.BILLING])
def test_api_keys_are_403_for_roles_without_the_right(client, organization, owner, member_of, role):
    key, _secret = services.create_api_key(
        organization=organization, actor=owner, name="k", scope="read"
    )
    client.force_login(member_of(organization, role))
    assert client.get("/org/api-keys/").status_code == 403
    assert client.post("/org/api-keys/", {"name": "x", "scope": "read"}).status_code == 403
    assert client.post(f"/org/api-keys/{key.pk}/revoke/").status_code == 403
    assert ApiKey.objects.count() == 1
