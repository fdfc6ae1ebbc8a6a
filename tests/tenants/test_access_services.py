"""apps/tenants/services.py, by its outcomes: the rows it writes (or leaves alone), the files it
stores, the mail it sends and the audit events it records."""

import hashlib
import re
import secrets
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from allauth.account.models import EmailAddress
from django.core import mail
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone

from apps.core.errors import DomainError, InvalidTransition, PermissionDenied
from apps.core.models import AuditEvent
from apps.quotas.models import QuotaLimit
from apps.quotas.services import apply_default_limits
from apps.tenants import services
from apps.tenants.models import (
    ApiKey,
    ApiKeyScope,
    Invitation,
    Membership,
    Organization,
    Park,
    Role,
    VerificationState,
)
from apps.tenants.services import (
    accept_invitation,
    approve_verification,
    authenticate_api_key,
    change_role,
    create_api_key,
    create_organization,
    invite_member,
    reject_verification,
    remove_member,
    resend_invitation,
    revoke_api_key,
    revoke_invitation,
    set_mfa_policy,
    submit_verification,
)
from tests.factories import (
    ApiKeyFactory,
    OrganizationFactory,
    ParkFactory,
    ParkOperatorFactory,
    UserFactory,
    credit_code,
)

pytestmark = pytest.mark.django_db

PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n"


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + kind + data + b"\x00" * 4  # CRC not checked


PNG = (
    b"\x89PNG\r\n\x1a\n"
    + png_chunk(b"IHDR", b"\x00\x00\x00\x01" * 2 + b"\x08\x02\x00\x00\x00")
    + png_chunk(b"IDAT", b"\x78\x9c" + b"\x00" * 12)
    + png_chunk(b"IEND", b"")
)
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 32 + b"\xff\xd9"


def events(action, **filters):
    return AuditEvent.objects.filter(action=action, **filters)


def membership(organization, user):
    return Membership.objects.get(organization=organization, user=user)


def recent(moment):
    return moment is not None and abs(timezone.now() - moment) < timedelta(minutes=1)


def upload(name="licence.pdf", content=PDF):
    return SimpleUploadedFile(name, content)


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


@pytest.fixture
def media(settings, tmp_path):
    root = tmp_path / "media"
    settings.MEDIA_ROOT = str(root)
    return root


# --- create_organization --------------------------------------------------------------------


class TestCreateOrganization:
    def test_creator_becomes_owner_and_it_is_audited(self, park):
        user = UserFactory()

        organization = create_organization(user=user, park=park, name="  Acme Compute  ")

        organization.refresh_from_db()
        assert organization.name == "Acme Compute"
        assert organization.park == park
        assert organization.verification_state == VerificationState.UNVERIFIED
        assert list(
            Membership.objects.filter(organization=organization).values_list("user", "role")
        ) == [(user.pk, Role.OWNER)]
        event = events("organization.created").get()
        assert (event.actor, event.actor_label) == (user, user.get_username())
        assert (event.organization_id, event.park_id) == (organization.pk, park.pk)
        assert (event.object_type, event.object_id) == (
            "tenants.organization",
            str(organization.pk),
        )

    def test_same_name_gets_unique_slugs_in_a_park(self, park):
        slugs = [
            create_organization(user=UserFactory(), park=park, name="Acme Compute").slug
            for _ in range(3)
        ]
        assert slugs == ["acme-compute", "acme-compute-2", "acme-compute-3"]
        # Slugs are unique per park: another park starts again.
        elsewhere = create_organization(user=UserFactory(), park=ParkFactory(), name="Acme Compute")
        assert elsewhere.slug == "acme-compute"

    def test_name_without_latin_letters_still_gets_a_slug(self, park):
        first = create_organization(user=UserFactory(), park=park, name="北京智算")
        second = create_organization(user=UserFactory(), park=park, name="上海智算")
        assert (first.slug, second.slug) == ("org", "org-2")

    @pytest.mark.parametrize("name", ["", "   "])
    def test_blank_name_refused(self, park, name):
        with pytest.raises(DomainError) as excinfo:
            create_organization(user=UserFactory(), park=park, name=name)
        assert excinfo.value.code == "name_required"
        assert not Organization.objects.exists()
        assert not AuditEvent.objects.exists()

    def test_starts_with_the_unverified_default_quotas(self, park, settings):
        organization = create_organization(user=UserFactory(), park=park, name="Acme")

        rows = QuotaLimit.objects.filter(organization=organization)
        assert {row.resource: row.limit for row in rows} == settings.LOAM_DEFAULT_QUOTAS[
            "unverified"
        ]
        assert {(row.park_id, row.accelerator_model_id) for row in rows} == {(park.pk, None)}


# --- submit_verification --------------------------------------------------------------------


class TestSubmitVerification:
    CODE = credit_code(9_000_001)

    def submit(self, organization, actor, *, code=None, licence=None, legal_name="Acme Co., Ltd."):
        return submit_verification(
            organization=organization,
            actor=actor,
            legal_name=legal_name,
            credit_code=self.CODE if code is None else code,
            licence=upload() if licence is None else licence,
        )

    def assert_unchanged(self, organization, media, state=VerificationState.UNVERIFIED):
        before = (organization.legal_name, organization.credit_code)
        organization.refresh_from_db()
        assert organization.verification_state == state
        assert (organization.legal_name, organization.credit_code) == before
        assert not files_under(media)
        assert not events("organization.submitted").exists()

    def test_success_stores_identity_licence_and_state(self, organization, owner, media):
        result = self.submit(
            organization, owner, code=f"  {self.CODE.lower()} ", legal_name="  Acme Co., Ltd. "
        )

        organization.refresh_from_db()
        assert result.pk == organization.pk
        assert organization.verification_state == VerificationState.SUBMITTED
        assert organization.credit_code == self.CODE
        assert organization.legal_name == "Acme Co., Ltd."
        assert recent(organization.verification_submitted_at)
        assert organization.verification_decided_at is None
        name = organization.licence.name
        assert re.fullmatch(rf"licences/{organization.park_id}/[0-9a-f]{{32}}\.pdf", name)
        stored = media / name
        assert stored.is_file()
        assert stored.read_bytes() == PDF
        assert Path(organization.licence.path) == stored
        assert files_under(media) == [stored]
        event = events("organization.submitted").get()
        assert event.actor == owner
        assert event.data == {"from": "unverified", "to": "submitted"}

    @pytest.mark.parametrize(
        ("name", "content"),
        [("scan.PNG", PNG), ("scan.jpg", JPEG), ("scan.jpeg", JPEG), ("SCAN.PDF", PDF)],
    )
    def test_admin_may_submit_any_accepted_type(self, organization, admin, media, name, content):
        self.submit(organization, admin, licence=upload(name, content))

        organization.refresh_from_db()
        assert organization.verification_state == VerificationState.SUBMITTED
        assert organization.licence.name.endswith(Path(name).suffix.lower())
        assert (media / organization.licence.name).read_bytes() == content

    @pytest.mark.parametrize(
        ("code", "error"),
        [
            (CODE[:17] + ("0" if CODE[17] != "0" else "1"), "checksum"),
            ("91310115MA000000", "length"),
            (CODE + "1", "length"),
            ("91310115MA0000I011", "character"),
            ("9131AB15MA00000011", "division"),
        ],
    )
    def test_invalid_credit_code_refused(self, organization, owner, media, code, error):
        with pytest.raises(ValidationError) as excinfo:
            self.submit(organization, owner, code=code)
        assert excinfo.value.code == error
        self.assert_unchanged(organization, media)

    def test_code_of_another_organization_in_the_park_refused(
        self, organization, other_organization, owner, media
    ):
        with pytest.raises(DomainError) as excinfo:
            self.submit(organization, owner, code=other_organization.credit_code.lower())
        assert excinfo.value.code == "credit_code_taken"
        self.assert_unchanged(organization, media)

    def test_code_used_in_another_park_is_accepted(self, organization, owner, media):
        OrganizationFactory(park=ParkFactory(), credit_code=self.CODE)

        self.submit(organization, owner)

        organization.refresh_from_db()
        assert organization.credit_code == self.CODE
        assert organization.verification_state == VerificationState.SUBMITTED

    def test_resubmitting_its_own_code_is_not_taken(self, organization, owner, media):
        self.submit(organization, owner, code=organization.credit_code)
        organization.refresh_from_db()
        assert organization.verification_state == VerificationState.SUBMITTED

    @pytest.mark.parametrize("name", ["licence.docx", "licence.gif", "licence", "licence.pdf.exe"])
    def test_wrong_file_type_refused(self, organization, owner, media, name):
        with pytest.raises(ValidationError) as excinfo:
            self.submit(organization, owner, licence=upload(name, PDF))
        assert excinfo.value.code == "licence_type"
        self.assert_unchanged(organization, media)

    @pytest.mark.parametrize(
        ("name", "content"),
        [
            ("licence.pdf", PNG),
            ("licence.pdf", b"<html>not a pdf</html>"),
            ("licence.png", PDF),
            ("licence.jpg", PNG),
            ("licence.pdf", b""),
            # Polyglots and damaged files (issue 18): the whole file is checked.
            ("licence.pdf", b"%PDF-1.4\n<html><body><script>alert(1)</script>\n%%EOF\n"),
            ("licence.pdf", PDF + b"<!DOCTYPE html><p>hi</p>"),
            ("licence.pdf", b"%PDF-1.4\n1 0 obj << /S /JavaScript /JS (app.alert(1)) >>\n%%EOF"),
            ("licence.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n"),  # truncated
            ("licence.png", PNG + b"<html><script>alert(1)</script></html>"),
            ("licence.png", PNG[:-12]),  # no IEND
            ("licence.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 32),
            ("licence.jpg", JPEG[:-2] + b"<iframe src=x></iframe>\xff\xd9"),
            ("licence.jpg", JPEG[:-2]),  # no end of image
        ],
    )
    def test_content_not_matching_the_type_refused(self, organization, owner, media, name, content):
        with pytest.raises(ValidationError) as excinfo:
            self.submit(organization, owner, licence=upload(name, content))
        assert excinfo.value.code == "licence_content"
        self.assert_unchanged(organization, media)

    def test_file_over_the_size_limit_refused(self, organization, owner, media, settings):
        settings.LOAM_LICENCE_MAX_BYTES = len(PDF) + 10

        with pytest.raises(ValidationError) as excinfo:
            self.submit(organization, owner, licence=upload(content=PDF + b"x" * 11))
        assert excinfo.value.code == "licence_size"
        self.assert_unchanged(organization, media)

    def test_file_of_exactly_the_limit_accepted(self, organization, owner, media, settings):
        settings.LOAM_LICENCE_MAX_BYTES = len(PDF)
        self.submit(organization, owner)
        organization.refresh_from_db()
        assert organization.verification_state == VerificationState.SUBMITTED

    def test_submitting_twice_refused(self, organization, owner, media):
        self.submit(organization, owner)
        organization.refresh_from_db()
        first_file, first_at = organization.licence.name, organization.verification_submitted_at

        with pytest.raises(DomainError) as excinfo:
            self.submit(organization, owner, code=credit_code(9_000_002))
        assert excinfo.value.code == "verification_state"

        organization.refresh_from_db()
        assert organization.verification_state == VerificationState.SUBMITTED
        assert organization.credit_code == self.CODE
        assert organization.licence.name == first_file
        assert organization.verification_submitted_at == first_at
        assert files_under(media) == [media / first_file]
        assert events("organization.submitted").count() == 1

    def test_verified_organization_cannot_submit(self, park, member_of, media):
        organization = OrganizationFactory(park=park, verified=True)
        owner = member_of(organization, Role.OWNER)

        with pytest.raises(DomainError) as excinfo:
            self.submit(organization, owner)
        assert excinfo.value.code == "verification_state"
        self.assert_unchanged(organization, media, state=VerificationState.VERIFIED)

    @pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER, Role.BILLING])
    def test_roles_without_manage_organization_refused(self, organization, member_of, media, role):
        with pytest.raises(PermissionDenied):
            self.submit(organization, member_of(organization, role))
        self.assert_unchanged(organization, media)

    def test_owner_of_another_organization_refused(self, organization, other_owner, media):
        with pytest.raises(PermissionDenied):
            self.submit(organization, other_owner)
        self.assert_unchanged(organization, media)

    def test_resubmission_after_rejection(self, organization, owner, operator, media):
        self.submit(organization, owner)
        reject_verification(organization=organization, operator=operator, reason="Unreadable")

        code = credit_code(9_000_003)
        self.submit(organization, owner, code=code, licence=upload("new.png", PNG))

        organization.refresh_from_db()
        assert organization.verification_state == VerificationState.SUBMITTED
        assert organization.credit_code == code
        assert organization.verification_note == ""
        assert (media / organization.licence.name).read_bytes() == PNG
        actions = list(
            AuditEvent.objects.filter(object_type="tenants.organization")
            .order_by("id")
            .values_list("action", flat=True)
        )
        assert actions == [
            "organization.submitted",
            "organization.rejected",
            "organization.submitted",
        ]


# --- approve_verification / reject_verification ---------------------------------------------


@pytest.fixture
def submitted(organization):
    apply_default_limits(organization=organization, tier="unverified")
    Organization.objects.filter(pk=organization.pk).update(
        verification_state=VerificationState.SUBMITTED,
        verification_submitted_at=timezone.now(),
    )
    organization.refresh_from_db()
    return organization


def limits(organization):
    return dict(
        QuotaLimit.objects.filter(organization=organization).values_list("resource", "limit")
    )


class TestDecideVerification:
    def test_operator_approves(self, submitted, operator, settings):
        verified = settings.LOAM_DEFAULT_QUOTAS["verified"]
        # An operator gave more vCPU than the verified tier, and some accelerators (but fewer).
        QuotaLimit.objects.filter(organization=submitted, resource="vcpu").update(
            limit=verified["vcpu"] * 10
        )
        QuotaLimit.objects.filter(organization=submitted, resource="accelerators").update(
            limit=verified["accelerators"] - 1
        )

        approve_verification(organization=submitted, operator=operator)

        submitted.refresh_from_db()
        assert submitted.verification_state == VerificationState.VERIFIED
        assert recent(submitted.verification_decided_at)
        assert submitted.verification_note == ""
        assert limits(submitted) == {**verified, "vcpu": verified["vcpu"] * 10}
        event = events("organization.verified").get()
        assert (event.actor, event.organization_id) == (operator, submitted.pk)
        assert event.data == {"from": "submitted", "to": "verified"}

    def test_approval_creates_missing_quota_rows(self, organization, operator, settings):
        Organization.objects.filter(pk=organization.pk).update(
            verification_state=VerificationState.SUBMITTED
        )
        approve_verification(organization=organization, operator=operator)
        assert limits(organization) == settings.LOAM_DEFAULT_QUOTAS["verified"]

    def test_superuser_may_decide_in_any_park(self, submitted):
        approve_verification(organization=submitted, operator=UserFactory(is_superuser=True))
        submitted.refresh_from_db()
        assert submitted.is_verified

    @pytest.mark.parametrize("decide", ["approve", "reject"])
    def test_operator_of_another_park_refused(self, submitted, settings, decide):
        stranger = ParkOperatorFactory(park=ParkFactory()).user

        with pytest.raises(PermissionDenied):
            if decide == "approve":
                approve_verification(organization=submitted, operator=stranger)
            else:
                reject_verification(organization=submitted, operator=stranger, reason="No")

        submitted.refresh_from_db()
        assert submitted.verification_state == VerificationState.SUBMITTED
        assert submitted.verification_decided_at is None
        assert limits(submitted) == settings.LOAM_DEFAULT_QUOTAS["unverified"]
        assert not AuditEvent.objects.filter(object_type="tenants.organization").exists()

    @pytest.mark.parametrize("who", ["owner", "admin"])
    def test_members_of_the_organization_cannot_decide(self, submitted, request, who):
        actor = request.getfixturevalue(who)
        with pytest.raises(PermissionDenied):
            approve_verification(organization=submitted, operator=actor)
        with pytest.raises(PermissionDenied):
            reject_verification(organization=submitted, operator=actor, reason="No")
        submitted.refresh_from_db()
        assert submitted.verification_state == VerificationState.SUBMITTED

    def test_operator_rejects_with_a_reason(self, submitted, operator, settings):
        reject_verification(
            organization=submitted, operator=operator, reason="  Licence scan unreadable \n"
        )

        submitted.refresh_from_db()
        assert submitted.verification_state == VerificationState.REJECTED
        assert submitted.verification_note == "Licence scan unreadable"
        assert recent(submitted.verification_decided_at)
        assert limits(submitted) == settings.LOAM_DEFAULT_QUOTAS["unverified"]
        event = events("organization.rejected").get()
        assert event.actor == operator
        assert event.data == {
            "from": "submitted",
            "to": "rejected",
            "note": "Licence scan unreadable",
        }

    @pytest.mark.parametrize("reason", ["", "   \n\t"])
    def test_reject_without_reason_refused(self, submitted, operator, reason):
        with pytest.raises(DomainError) as excinfo:
            reject_verification(organization=submitted, operator=operator, reason=reason)
        assert excinfo.value.code == "reason_required"
        submitted.refresh_from_db()
        assert submitted.verification_state == VerificationState.SUBMITTED
        assert not events("organization.rejected").exists()

    def test_unsubmitted_organization_cannot_be_approved(self, organization, operator):
        with pytest.raises(InvalidTransition):
            approve_verification(organization=organization, operator=operator)
        organization.refresh_from_db()
        assert organization.verification_state == VerificationState.UNVERIFIED
        assert not QuotaLimit.objects.filter(organization=organization).exists()


# --- set_mfa_policy -------------------------------------------------------------------------


class TestMfaPolicy:
    def test_operator_of_the_park_sets_it(self, park, operator):
        set_mfa_policy(park=park, operator=operator, for_operators=True, for_owners=True)

        park.refresh_from_db()
        assert (park.require_mfa_for_operators, park.require_mfa_for_owners) == (True, True)
        event = events("park.mfa_policy").get()
        assert (event.actor, event.park_id) == (operator, park.pk)
        assert event.data == {"operators": True, "owners": True}

        set_mfa_policy(park=park, operator=operator, for_operators=False, for_owners=True)
        park.refresh_from_db()
        assert (park.require_mfa_for_operators, park.require_mfa_for_owners) == (False, True)

    @pytest.mark.parametrize("who", ["owner", "admin", "other_park_operator", "stranger"])
    def test_others_cannot(self, park, request, who):
        if who == "other_park_operator":
            actor = ParkOperatorFactory(park=ParkFactory()).user
        elif who == "stranger":
            actor = UserFactory()
        else:
            actor = request.getfixturevalue(who)

        with pytest.raises(PermissionDenied):
            set_mfa_policy(park=park, operator=actor, for_operators=True, for_owners=True)

        park.refresh_from_db()
        assert (park.require_mfa_for_operators, park.require_mfa_for_owners) == (False, False)
        assert not events("park.mfa_policy").exists()

    def test_anonymous_cannot(self, park):
        from django.contrib.auth.models import AnonymousUser

        for actor in (None, AnonymousUser()):
            with pytest.raises(PermissionDenied):
                set_mfa_policy(park=park, operator=actor, for_operators=True, for_owners=False)
        assert not Park.objects.get(pk=park.pk).require_mfa_for_operators


# --- change_role / remove_member ------------------------------------------------------------


class TestChangeRole:
    def test_owner_makes_a_member_owner(self, organization, owner, member):
        changed = change_role(
            membership=membership(organization, member), actor=owner, role=Role.OWNER
        )

        assert changed.role == Role.OWNER
        assert membership(organization, member).role == Role.OWNER
        event = events("membership.role_changed").get()
        assert event.actor == owner
        assert event.organization_id == organization.pk
        assert event.object_type == "tenants.membership"
        assert event.data == {"user": member.get_username(), "from": "member", "to": "owner"}

    def test_admin_changes_other_roles(self, organization, admin, member):
        change_role(membership=membership(organization, member), actor=admin, role=Role.VIEWER)
        change_role(membership=membership(organization, member), actor=admin, role=Role.ADMIN)

        assert membership(organization, member).role == Role.ADMIN
        data = list(events("membership.role_changed").order_by("id").values_list("data", flat=True))
        assert [(d["from"], d["to"]) for d in data] == [("member", "viewer"), ("viewer", "admin")]

    def test_admin_cannot_make_an_owner(self, organization, owner, admin, member):
        with pytest.raises(PermissionDenied):
            change_role(membership=membership(organization, member), actor=admin, role=Role.OWNER)
        with pytest.raises(PermissionDenied):  # not even themselves
            change_role(membership=membership(organization, admin), actor=admin, role=Role.OWNER)
        assert membership(organization, member).role == Role.MEMBER
        assert membership(organization, admin).role == Role.ADMIN
        assert not events("membership.role_changed").exists()

    def test_admin_cannot_demote_an_owner(self, organization, owner, admin, member_of):
        member_of(organization, Role.OWNER)  # not the last owner: the refusal is the role's

        with pytest.raises(PermissionDenied):
            change_role(membership=membership(organization, owner), actor=admin, role=Role.MEMBER)
        assert membership(organization, owner).role == Role.OWNER

    def test_owner_demotes_another_owner(self, organization, owner, member_of):
        second = member_of(organization, Role.OWNER)

        change_role(membership=membership(organization, second), actor=owner, role=Role.ADMIN)

        assert membership(organization, second).role == Role.ADMIN
        assert events("membership.role_changed").get().data["from"] == "owner"

    def test_last_owner_cannot_be_demoted(self, organization, owner):
        with pytest.raises(DomainError) as excinfo:
            change_role(membership=membership(organization, owner), actor=owner, role=Role.ADMIN)
        assert excinfo.value.code == "last_owner"
        assert membership(organization, owner).role == Role.OWNER
        assert not events("membership.role_changed").exists()

    def test_owner_may_step_down_when_another_owner_remains(self, organization, owner, member_of):
        member_of(organization, Role.OWNER)
        change_role(membership=membership(organization, owner), actor=owner, role=Role.MEMBER)
        assert membership(organization, owner).role == Role.MEMBER

    @pytest.mark.parametrize("role", [Role.VIEWER, Role.MEMBER, Role.BILLING])
    def test_roles_without_manage_members_cannot_change_roles(self, organization, member_of, role):
        actor = member_of(organization, role)
        target = member_of(organization, Role.VIEWER)

        with pytest.raises(PermissionDenied):
            change_role(membership=membership(organization, target), actor=actor, role=Role.MEMBER)
        with pytest.raises(PermissionDenied):  # nor their own
            change_role(membership=membership(organization, actor), actor=actor, role=Role.ADMIN)
        assert membership(organization, target).role == Role.VIEWER
        assert membership(organization, actor).role == role

    def test_owner_of_another_organization_cannot(self, organization, member, other_owner):
        with pytest.raises(PermissionDenied):
            change_role(
                membership=membership(organization, member), actor=other_owner, role=Role.ADMIN
            )
        assert membership(organization, member).role == Role.MEMBER

    def test_unknown_role_refused(self, organization, owner, member):
        with pytest.raises(DomainError) as excinfo:
            change_role(membership=membership(organization, member), actor=owner, role="god")
        assert excinfo.value.code == "role"
        assert membership(organization, member).role == Role.MEMBER

    def test_same_role_changes_nothing(self, organization, owner, member):
        change_role(membership=membership(organization, member), actor=owner, role=Role.MEMBER)
        assert not events("membership.role_changed").exists()


class TestRemoveMember:
    def test_member_leaves_by_themselves(self, organization, owner, member):
        remove_member(membership=membership(organization, member), actor=member)

        assert not Membership.objects.filter(organization=organization, user=member).exists()
        event = events("membership.removed").get()
        assert (event.actor, event.organization_id) == (member, organization.pk)
        assert event.data == {"user": member.get_username(), "role": "member"}

    @pytest.mark.parametrize("role", [Role.VIEWER, Role.BILLING, Role.ADMIN])
    def test_any_role_may_leave(self, organization, owner, member_of, role):
        user = member_of(organization, role)
        remove_member(membership=membership(organization, user), actor=user)
        assert not Membership.objects.filter(user=user).exists()

    def test_admin_removes_a_member(self, organization, admin, member):
        remove_member(membership=membership(organization, member), actor=admin)
        assert not Membership.objects.filter(user=member).exists()
        assert events("membership.removed").get().actor == admin

    def test_admin_cannot_remove_an_owner(self, organization, owner, admin, member_of):
        member_of(organization, Role.OWNER)
        with pytest.raises(PermissionDenied):
            remove_member(membership=membership(organization, owner), actor=admin)
        assert membership(organization, owner).role == Role.OWNER
        assert not events("membership.removed").exists()

    def test_owner_removes_another_owner(self, organization, owner, member_of):
        second = member_of(organization, Role.OWNER)
        remove_member(membership=membership(organization, second), actor=owner)
        assert not Membership.objects.filter(user=second).exists()

    def test_last_owner_cannot_leave(self, organization, owner, admin):
        with pytest.raises(DomainError) as excinfo:
            remove_member(membership=membership(organization, owner), actor=owner)
        assert excinfo.value.code == "last_owner"
        assert membership(organization, owner).role == Role.OWNER
        assert not events("membership.removed").exists()

    def test_last_owner_cannot_be_removed_by_an_admin(self, organization, owner, admin):
        with pytest.raises(PermissionDenied):
            remove_member(membership=membership(organization, owner), actor=admin)
        assert membership(organization, owner).role == Role.OWNER

    def test_owner_may_leave_when_another_owner_remains(self, organization, owner, member_of):
        member_of(organization, Role.OWNER)
        remove_member(membership=membership(organization, owner), actor=owner)
        assert not Membership.objects.filter(user=owner).exists()
        assert Membership.objects.filter(organization=organization, role=Role.OWNER).count() == 1

    @pytest.mark.parametrize("role", [Role.VIEWER, Role.MEMBER, Role.BILLING])
    def test_roles_without_manage_members_cannot_remove_others(self, organization, member_of, role):
        actor = member_of(organization, role)
        target = member_of(organization, Role.VIEWER)
        with pytest.raises(PermissionDenied):
            remove_member(membership=membership(organization, target), actor=actor)
        assert Membership.objects.filter(user=target).exists()

    def test_owner_of_another_organization_cannot(self, organization, member, other_owner):
        with pytest.raises(PermissionDenied):
            remove_member(membership=membership(organization, member), actor=other_owner)
        assert Membership.objects.filter(user=member).exists()

    def test_api_key_is_never_taken_for_the_member_leaving(self, organization, owner, member):
        key = ApiKeyFactory(organization=organization, scope=ApiKeyScope.READ, id=member.pk)

        with pytest.raises(PermissionDenied):
            remove_member(membership=membership(organization, member), actor=key)


# --- invitations ----------------------------------------------------------------------------


def token_hash(token):
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture
def invite(organization, owner, django_capture_on_commit_callbacks):
    """invite(email=..., role=..., actor=...) -> (invitation, token), mail sent on commit."""

    def make(email="new@example.com", role=Role.MEMBER, actor=owner):
        with django_capture_on_commit_callbacks(execute=True):
            return invite_member(organization=organization, actor=actor, email=email, role=role)

    return make


class TestInvitations:
    def test_invite_mails_the_accept_link_once(
        self, organization, owner, settings, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            invitation, token = invite_member(
                organization=organization, actor=owner, email="  New@Example.COM ", role=Role.ADMIN
            )
            assert mail.outbox == []  # not before the transaction commits

        assert len(callbacks) == 1
        assert len(mail.outbox) == 1
        message = mail.outbox[0]
        assert message.to == ["new@example.com"]
        url = settings.LOAM_BASE_URL + reverse("tenants:invitation", args=[token])
        assert url.endswith(f"/invitations/{token}/")
        assert url in message.body
        invitation.refresh_from_db()
        assert (invitation.email, invitation.role) == ("new@example.com", Role.ADMIN)
        assert invitation.invited_by == owner
        assert recent(invitation.sent_at)
        expected_expiry = timezone.now() + timedelta(days=settings.LOAM_INVITATION_DAYS)
        assert abs(invitation.expires_at - expected_expiry) < timedelta(minutes=1)
        event = events("invitation.created").get()
        assert (event.actor, event.organization_id) == (owner, organization.pk)
        assert event.data == {"role": "admin"}

    def test_only_the_hash_is_stored(self, invite):
        invitation, token = invite()

        row = Invitation.objects.filter(pk=invitation.pk).values().get()
        assert row["token_hash"] == token_hash(token)
        assert all(token not in str(value) for value in row.values())
        for event in AuditEvent.objects.all():
            assert token not in f"{event.data} {event.object_repr} {event.actor_label}"

    def test_duplicate_pending_invitation_refused(self, invite):
        invite(email="new@example.com")

        with pytest.raises(DomainError) as excinfo:
            invite(email="NEW@example.com", role=Role.VIEWER)
        assert excinfo.value.code == "pending_invitation"
        assert Invitation.objects.count() == 1
        assert len(mail.outbox) == 1

    def test_expired_invitation_does_not_block_a_new_one(self, invite):
        old, _token = invite()
        Invitation.objects.filter(pk=old.pk).update(
            created_at=timezone.now() - timedelta(days=30),
            expires_at=timezone.now() - timedelta(days=1),
        )
        invite()
        assert Invitation.objects.count() == 2

    def test_inviting_an_existing_member_refused(self, invite, member):
        with pytest.raises(DomainError) as excinfo:
            invite(email=member.email.upper())
        assert excinfo.value.code == "member"
        assert not Invitation.objects.exists()
        assert mail.outbox == []

    def test_admin_cannot_invite_an_owner(self, invite, admin):
        with pytest.raises(PermissionDenied):
            invite(role=Role.OWNER, actor=admin)
        assert not Invitation.objects.exists()
        invitation, _token = invite(role=Role.ADMIN, actor=admin)
        assert invitation.role == Role.ADMIN

    def test_owner_may_invite_an_owner(self, invite):
        invitation, _token = invite(role=Role.OWNER)
        assert invitation.role == Role.OWNER

    @pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER, Role.BILLING])
    def test_roles_without_manage_members_cannot_invite(
        self, invite, organization, member_of, role
    ):
        with pytest.raises(PermissionDenied):
            invite(actor=member_of(organization, role))
        assert not Invitation.objects.exists()
        assert mail.outbox == []

    def test_accept_creates_the_membership(self, invite, organization):
        invitation, token = invite(role=Role.BILLING)
        user = UserFactory(email="new@example.com")

        created = accept_invitation(token=token, user=user)

        assert (created.organization, created.user, created.role) == (
            organization,
            user,
            Role.BILLING,
        )
        assert membership(organization, user).role == Role.BILLING
        invitation.refresh_from_db()
        assert recent(invitation.accepted_at)
        event = events("invitation.accepted").get()
        assert event.actor == user
        assert event.data == {"role": "billing"}

    def test_accept_with_another_verified_address_of_the_user(self, invite, organization):
        _invitation, token = invite()
        user = UserFactory(email="primary@example.com")
        EmailAddress.objects.create(user=user, email="New@Example.com", verified=True)

        accept_invitation(token=token, user=user)
        assert membership(organization, user).role == Role.MEMBER

    def test_accepting_twice_refused(self, invite, organization):
        _invitation, token = invite()
        user = UserFactory(email="new@example.com")
        accept_invitation(token=token, user=user)

        with pytest.raises(DomainError) as excinfo:
            accept_invitation(token=token, user=user)
        assert excinfo.value.code == "invitation_closed"
        assert Membership.objects.filter(organization=organization, user=user).count() == 1
        assert events("invitation.accepted").count() == 1

    def test_accept_after_expiry_refused(self, invite, organization):
        invitation, token = invite()
        Invitation.objects.filter(pk=invitation.pk).update(
            created_at=timezone.now() - timedelta(days=8),
            expires_at=timezone.now() - timedelta(seconds=1),
        )
        user = UserFactory(email="new@example.com")

        with pytest.raises(DomainError) as excinfo:
            accept_invitation(token=token, user=user)
        assert excinfo.value.code == "invitation_expired"
        assert not Membership.objects.filter(user=user).exists()
        invitation.refresh_from_db()
        assert invitation.accepted_at is None

    def test_accept_by_another_address_refused(self, invite):
        invitation, token = invite()
        user = UserFactory(email="someone.else@example.com")

        with pytest.raises(PermissionDenied):
            accept_invitation(token=token, user=user)
        assert not Membership.objects.filter(user=user).exists()
        invitation.refresh_from_db()
        assert invitation.accepted_at is None

    def test_accept_with_an_unverified_matching_address_refused(self, invite):
        invitation, token = invite()
        user = UserFactory(email="new@example.com", verified_email=False)
        EmailAddress.objects.create(user=user, email=user.email, verified=False, primary=True)

        with pytest.raises(PermissionDenied):
            accept_invitation(token=token, user=user)
        assert not Membership.objects.filter(user=user).exists()
        invitation.refresh_from_db()
        assert invitation.accepted_at is None

    @pytest.mark.parametrize("token", ["", "nonsense", "x" * 43])
    def test_unknown_token_refused(self, invite, token):
        invite()
        with pytest.raises(DomainError) as excinfo:
            accept_invitation(token=token, user=UserFactory(email="new@example.com"))
        assert excinfo.value.code == "invitation_unknown"

    def test_revoke_then_accept_refused(self, invite, owner):
        invitation, token = invite()

        revoke_invitation(invitation=invitation, actor=owner)

        invitation.refresh_from_db()
        assert recent(invitation.revoked_at)
        assert events("invitation.revoked").get().actor == owner
        user = UserFactory(email="new@example.com")
        with pytest.raises(DomainError) as excinfo:
            accept_invitation(token=token, user=user)
        assert excinfo.value.code == "invitation_closed"
        assert not Membership.objects.filter(user=user).exists()
        with pytest.raises(DomainError) as excinfo:  # and it stays revoked
            revoke_invitation(invitation=invitation, actor=owner)
        assert excinfo.value.code == "invitation_closed"

    @pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER])
    def test_roles_without_manage_members_cannot_revoke_or_resend(
        self, invite, organization, member_of, role
    ):
        invitation, _token = invite()
        actor = member_of(organization, role)
        with pytest.raises(PermissionDenied):
            revoke_invitation(invitation=invitation, actor=actor)
        with pytest.raises(PermissionDenied):
            resend_invitation(invitation=invitation, actor=actor)
        invitation.refresh_from_db()
        assert invitation.revoked_at is None

    def test_resend_gives_a_new_token_and_the_old_one_stops_working(
        self, invite, organization, owner, django_capture_on_commit_callbacks
    ):
        invitation, old_token = invite()
        old_hash = Invitation.objects.get(pk=invitation.pk).token_hash

        with django_capture_on_commit_callbacks(execute=True):
            _resent, new_token = resend_invitation(invitation=invitation, actor=owner)

        assert new_token != old_token
        invitation.refresh_from_db()
        assert invitation.token_hash == token_hash(new_token) != old_hash
        assert len(mail.outbox) == 2
        assert new_token in mail.outbox[1].body
        assert old_token not in mail.outbox[1].body
        assert events("invitation.resent").get().actor == owner

        user = UserFactory(email="new@example.com")
        with pytest.raises(DomainError) as excinfo:
            accept_invitation(token=old_token, user=user)
        assert excinfo.value.code == "invitation_unknown"
        accept_invitation(token=new_token, user=user)
        assert membership(organization, user).role == Role.MEMBER

    def test_resend_renews_an_expired_invitation(self, invite, owner, organization):
        invitation, _old = invite()
        Invitation.objects.filter(pk=invitation.pk).update(
            created_at=timezone.now() - timedelta(days=8),
            expires_at=timezone.now() - timedelta(seconds=1),
        )
        _resent, token = resend_invitation(invitation=invitation, actor=owner)
        user = UserFactory(email="new@example.com")
        accept_invitation(token=token, user=user)
        assert membership(organization, user).role == Role.MEMBER

    def test_no_mail_for_an_invitation_revoked_before_it_went_out(
        self, organization, owner, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks(execute=True):
            invitation, _token = invite_member(
                organization=organization, actor=owner, email="new@example.com", role="member"
            )
            revoke_invitation(invitation=invitation, actor=owner)
        assert mail.outbox == []


# --- API keys -------------------------------------------------------------------------------

SECRET_FORMAT = re.compile(r"loam_(?P<prefix>[0-9a-f]{8})_(?P<random>[A-Za-z0-9_-]{43})")


def new_key(organization, actor, scope=ApiKeyScope.WRITE, **kwargs):
    return create_api_key(organization=organization, actor=actor, name="CI", scope=scope, **kwargs)


class TestCreateApiKey:
    def test_secret_format_and_what_is_stored(self, organization, owner):
        key, secret = new_key(organization, owner, scope=ApiKeyScope.READ)

        match = SECRET_FORMAT.fullmatch(secret)
        assert match, secret
        random_part = match["random"]
        row = ApiKey.objects.filter(pk=key.pk).values().get()
        assert row["prefix"] == match["prefix"]
        assert row["key_hash"] == hashlib.sha256(secret.encode()).hexdigest()
        assert (row["scope"], row["name"], row["created_by_id"]) == ("read", "CI", owner.pk)
        stored = [str(value) for value in row.values()]
        events_text = [
            f"{e.data} {e.object_repr} {e.actor_label}" for e in AuditEvent.objects.all()
        ]
        windows = {random_part[i : i + 8] for i in range(len(random_part) - 7)}
        for text in stored + events_text:
            assert secret not in text
            assert not [w for w in windows if w in text], text
        event = events("api_key.created").get()
        assert (event.actor, event.organization_id) == (owner, organization.pk)
        assert event.data == {"scope": "read"}

    def test_blank_name_defaults_to_the_prefix(self, organization, admin):
        key, _secret = create_api_key(
            organization=organization, actor=admin, name="   ", scope=ApiKeyScope.READ
        )
        assert key.name == key.prefix

    @pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER, Role.BILLING])
    def test_roles_without_manage_api_keys_cannot_create(self, organization, member_of, role):
        with pytest.raises(PermissionDenied):
            new_key(organization, member_of(organization, role), scope=ApiKeyScope.READ)
        assert not ApiKey.objects.exists()
        assert not events("api_key.created").exists()

    def test_owner_of_another_organization_cannot_create(self, organization, other_owner):
        with pytest.raises(PermissionDenied):
            new_key(organization, other_owner)
        assert not ApiKey.objects.exists()

    def test_read_key_cannot_create_or_revoke_keys(self, organization, owner):
        read_key = ApiKeyFactory(organization=organization, scope=ApiKeyScope.READ)
        other = ApiKeyFactory(organization=organization, scope=ApiKeyScope.READ)

        for scope in ApiKeyScope.values:
            with pytest.raises(PermissionDenied):
                new_key(organization, read_key, scope=scope)
        with pytest.raises(PermissionDenied):
            revoke_api_key(api_key=other, actor=read_key)
        with pytest.raises(PermissionDenied):
            revoke_api_key(api_key=read_key, actor=read_key)

        assert ApiKey.objects.count() == 2
        assert not ApiKey.objects.filter(revoked_at__isnull=False).exists()

    def test_write_key_creates_a_key(self, organization):
        write_key = ApiKeyFactory(organization=organization, scope=ApiKeyScope.WRITE)

        key, _secret = new_key(organization, write_key, scope=ApiKeyScope.WRITE)

        assert key.created_by is None
        event = events("api_key.created").get()
        assert event.actor is None
        assert event.actor_label == f"api-key:{write_key.prefix}"

    def test_key_of_another_organization_cannot_create(self, organization, other_organization):
        foreign = ApiKeyFactory(organization=other_organization, scope=ApiKeyScope.WRITE)
        with pytest.raises(PermissionDenied):
            new_key(organization, foreign)
        assert ApiKey.objects.count() == 1

    @pytest.mark.parametrize("delta", [timedelta(seconds=-1), timedelta(days=-30), timedelta(0)])
    def test_expiry_in_the_past_refused(self, organization, owner, delta):
        with pytest.raises(DomainError) as excinfo:
            new_key(organization, owner, expires_at=timezone.now() + delta)
        assert excinfo.value.code == "expires_at"
        assert not ApiKey.objects.exists()

    def test_expiry_in_the_future_is_kept(self, organization, owner):
        when = timezone.now() + timedelta(days=30)
        key, _secret = new_key(organization, owner, expires_at=when)
        assert ApiKey.objects.get(pk=key.pk).expires_at == when

    def test_unknown_scope_refused(self, organization, owner):
        with pytest.raises(DomainError) as excinfo:
            new_key(organization, owner, scope="admin")
        assert excinfo.value.code == "scope"
        assert not ApiKey.objects.exists()


class TestRevokeApiKey:
    def test_revoke_is_audited_and_idempotent(self, organization, owner, admin):
        key, secret = new_key(organization, owner)

        revoke_api_key(api_key=key, actor=admin)
        key.refresh_from_db()
        first = key.revoked_at
        assert recent(first)

        again = revoke_api_key(api_key=key, actor=owner)

        assert again.revoked_at == first
        assert ApiKey.objects.get(pk=key.pk).revoked_at == first
        event = events("api_key.revoked").get()
        assert (event.actor, event.object_id) == (admin, str(key.pk))
        assert authenticate_api_key(secret, ip_address=None) is None

    @pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER, Role.BILLING])
    def test_roles_without_manage_api_keys_cannot_revoke(self, organization, member_of, role):
        key = ApiKeyFactory(organization=organization)
        with pytest.raises(PermissionDenied):
            revoke_api_key(api_key=key, actor=member_of(organization, role))
        assert ApiKey.objects.get(pk=key.pk).revoked_at is None

    def test_owner_of_another_organization_cannot_revoke(self, organization, other_owner):
        key = ApiKeyFactory(organization=organization)
        with pytest.raises(PermissionDenied):
            revoke_api_key(api_key=key, actor=other_owner)
        assert ApiKey.objects.get(pk=key.pk).revoked_at is None

    def test_write_key_revokes_a_key(self, organization):
        write_key = ApiKeyFactory(organization=organization, scope=ApiKeyScope.WRITE)
        other = ApiKeyFactory(organization=organization)
        revoke_api_key(api_key=other, actor=write_key)
        assert ApiKey.objects.get(pk=other.pk).revoked_at is not None
        assert events("api_key.revoked").get().actor_label == f"api-key:{write_key.prefix}"


class TestAuthenticateApiKey:
    def test_right_secret_returns_the_key(self, organization, owner):
        key, secret = new_key(organization, owner)

        found = authenticate_api_key(secret, ip_address="198.51.100.7")

        assert found == key
        assert found.organization == organization

    def test_the_key_comes_with_its_organization_and_park_as_the_orm_reads_them(
        self, organization, owner, django_assert_num_queries
    ):
        """One statement written out by hand: every field as the ORM would read it (dates
        aware, on SQLite too), and the organization and park need no further query."""
        key, secret = new_key(organization, owner, expires_at=timezone.now() + timedelta(days=1))
        authenticate_api_key(secret, ip_address="198.51.100.7")  # records last use

        with django_assert_num_queries(1):
            found = authenticate_api_key(secret, ip_address="198.51.100.7")
            rows = (found, found.organization, found.organization.park)
        by_orm = ApiKey.objects.select_related("organization__park").get(pk=key.pk)
        expected_rows = (by_orm, by_orm.organization, by_orm.organization.park)
        for row, expected in zip(rows, expected_rows, strict=True):
            fields = type(row)._meta.concrete_fields
            assert {f.attname: getattr(row, f.attname) for f in fields} == {
                f.attname: getattr(expected, f.attname) for f in fields
            }
            assert not row._state.adding
        assert found.expires_at.tzinfo is not None

    def test_every_generated_secret_authenticates(self, organization, owner):
        # With the real generator: about half of these secrets contain "_" in the random part.
        keys = [new_key(organization, owner) for _ in range(24)]
        assert any("_" in secret[len("loam_12345678_") :] for _key, secret in keys)
        for key, secret in keys:
            assert authenticate_api_key(secret, ip_address=None) == key

    def test_wrong_secret_with_the_right_prefix(self, organization, owner):
        key, secret = new_key(organization, owner)
        random_part = SECRET_FORMAT.fullmatch(secret)["random"]
        wrong = f"loam_{key.prefix}_{random_part[:-1]}{'A' if random_part[-1] != 'A' else 'B'}"

        assert authenticate_api_key(wrong, ip_address=None) is None
        assert authenticate_api_key(f"loam_{key.prefix}_", ip_address=None) is None
        assert ApiKey.objects.get(pk=key.pk).last_used_at is None

    def test_secret_of_one_key_with_the_prefix_of_another(self, organization, owner):
        first, first_secret = new_key(organization, owner)
        second, _ = new_key(organization, owner)
        swapped = first_secret.replace(first.prefix, second.prefix)
        assert authenticate_api_key(swapped, ip_address=None) is None

    def test_revoked_key(self, organization, owner):
        key, secret = new_key(organization, owner)
        ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
        assert authenticate_api_key(secret, ip_address=None) is None
        assert ApiKey.objects.get(pk=key.pk).last_used_at is None

    def test_expired_key(self, organization, owner):
        key, secret = new_key(organization, owner, expires_at=timezone.now() + timedelta(days=1))
        assert authenticate_api_key(secret, ip_address=None) == key
        ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        assert authenticate_api_key(secret, ip_address=None) is None

    @pytest.mark.parametrize(
        "garbage",
        ["", "loam_", "loam__", "Bearer x", "loam_x_y_z", "loam_x_y", "xoam_abcdef01_abc", "_ _"],
    )
    def test_garbage(self, organization, owner, garbage):
        new_key(organization, owner)
        assert authenticate_api_key(garbage, ip_address=None) is None

    def test_secret_with_another_leading_word(self, organization, owner):
        _key, secret = new_key(organization, owner)
        assert authenticate_api_key("xoam" + secret[4:], ip_address=None) is None
        assert authenticate_api_key(f"Bearer {secret}", ip_address=None) is None

    def test_last_used_is_recorded_at_most_once_a_minute_per_address(
        self, organization, owner, django_assert_num_queries
    ):
        key, secret = new_key(organization, owner)

        with django_assert_num_queries(2):  # read the key, write last used
            authenticate_api_key(secret, ip_address="198.51.100.7")
        key.refresh_from_db()
        first = key.last_used_at
        assert recent(first)
        assert key.last_used_ip == "198.51.100.7"

        with django_assert_num_queries(1):  # read only
            authenticate_api_key(secret, ip_address="198.51.100.7")
        key.refresh_from_db()
        assert key.last_used_at == first

        with django_assert_num_queries(2):  # another address is written at once
            authenticate_api_key(secret, ip_address="203.0.113.9")
        key.refresh_from_db()
        assert key.last_used_ip == "203.0.113.9"
        assert key.last_used_at >= first

        a_while_ago = timezone.now() - timedelta(minutes=2)
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=a_while_ago)
        with django_assert_num_queries(2):  # stale: written again
            authenticate_api_key(secret, ip_address="203.0.113.9")
        key.refresh_from_db()
        assert key.last_used_at > a_while_ago
        assert recent(key.last_used_at)


@pytest.mark.parametrize("random_part", ["ab_" + "c" * 40, "_" + "d" * 42, "e" * 42 + "_"])
def test_a_secret_whose_random_part_has_underscores_authenticates(
    organization, owner, monkeypatch, random_part
):
    # token_urlsafe's alphabet includes "_": about half of all real secrets contain one.
    monkeypatch.setattr(
        services,
        "secrets",
        SimpleNamespace(token_hex=secrets.token_hex, token_urlsafe=lambda n=None: random_part),
    )
    key, secret = new_key(organization, owner)
    assert SECRET_FORMAT.fullmatch(secret)

    assert authenticate_api_key(secret, ip_address=None) == key


# --- sign-in audit --------------------------------------------------------------------------


@pytest.fixture
def no_rate_limits():
    cache.clear()  # allauth counts failed logins per IP in the cache, across tests
    yield
    cache.clear()


@pytest.mark.usefixtures("no_rate_limits")
class TestSignInAudit:
    def test_login_is_audited_with_the_address(self, client):
        user = UserFactory()

        response = client.post(
            "/accounts/login/",
            {"login": user.email, "password": "pw"},
            REMOTE_ADDR="198.51.100.20",
        )

        assert response.status_code == 302
        event = events("auth.login").get()
        assert (event.actor, event.actor_label) == (user, user.get_username())
        assert event.ip_address == "198.51.100.20"
        assert (event.object_type, event.object_id) == ("auth.user", str(user.pk))
        assert not events("auth.login_failed").exists()

    def test_wrong_password_is_audited_with_the_identifier(self, client):
        user = UserFactory()

        response = client.post(
            "/accounts/login/",
            {"login": user.email, "password": "not-the-password"},
            REMOTE_ADDR="198.51.100.21",
        )

        assert response.status_code == 200
        assert not events("auth.login").exists()
        event = events("auth.login_failed").get()
        assert event.actor is None
        assert event.actor_label == f"anonymous:{user.email}"
        assert event.ip_address == "198.51.100.21"
        assert event.data == {"identifier": user.email}
        assert "not-the-password" not in str(event.data)
