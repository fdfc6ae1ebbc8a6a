"""The tenants tables refuse bad rows themselves: no form or full_clean() runs here."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.tenants.models import (
    ApiKey,
    Invitation,
    Membership,
    Organization,
    Park,
    ParkOperator,
    VerificationState,
)
from tests.factories import (
    ApiKeyFactory,
    InvitationFactory,
    MembershipFactory,
    OrganizationFactory,
    ParkFactory,
    ParkOperatorFactory,
    UserFactory,
    credit_code,
    refused,
)

pytestmark = pytest.mark.django_db


class TestPark:
    def test_valid_row_saves(self):
        park = ParkFactory(currency="USD")
        assert Park.objects.get(pk=park.pk).currency == "USD"

    def test_unknown_currency_refused(self):
        with refused("park_currency_known"):
            ParkFactory(currency="EUR")

    def test_unknown_currency_refused_on_update(self):
        park = ParkFactory()
        with refused("park_currency_known"):
            Park.objects.filter(pk=park.pk).update(currency="JPY")
        park.refresh_from_db()
        assert park.currency == "CNY"

    def test_duplicate_slug_refused(self):
        ParkFactory(slug="shanghai")
        with refused("tenants_park.slug"):
            ParkFactory(slug="shanghai")


class TestParkOperator:
    def test_valid_row_saves(self):
        operator = ParkOperatorFactory()
        assert ParkOperator.objects.filter(park=operator.park, user=operator.user).count() == 1

    def test_same_user_twice_in_one_park_refused(self):
        operator = ParkOperatorFactory()
        with refused("park_operator_unique"):
            ParkOperator.objects.create(park=operator.park, user=operator.user)

    def test_same_user_in_another_park_accepted(self):
        operator = ParkOperatorFactory()
        ParkOperatorFactory(user=operator.user)
        assert ParkOperator.objects.filter(user=operator.user).count() == 2


class TestOrganization:
    def test_valid_row_saves(self):
        organization = OrganizationFactory()
        saved = Organization.objects.get(pk=organization.pk)
        assert len(saved.credit_code) == 18
        assert saved.verification_state == VerificationState.UNVERIFIED

    def test_duplicate_slug_in_park_refused(self):
        organization = OrganizationFactory(slug="acme")
        with refused("organization_slug_unique"):
            OrganizationFactory(park=organization.park, slug="acme")

    def test_same_slug_in_another_park_accepted(self):
        OrganizationFactory(slug="acme")
        OrganizationFactory(slug="acme")
        assert Organization.objects.filter(slug="acme").count() == 2

    def test_duplicate_credit_code_in_park_refused(self):
        organization = OrganizationFactory()
        with refused("organization_credit_code_unique"):
            OrganizationFactory(park=organization.park, credit_code=organization.credit_code)

    def test_duplicate_credit_code_refused_on_update(self):
        first = OrganizationFactory()
        second = OrganizationFactory(park=first.park)
        with refused("organization_credit_code_unique"):
            Organization.objects.filter(pk=second.pk).update(credit_code=first.credit_code)

    def test_same_credit_code_in_another_park_accepted(self):
        code = credit_code(4242)
        OrganizationFactory(credit_code=code)
        OrganizationFactory(credit_code=code)
        assert Organization.objects.filter(credit_code=code).count() == 2

    def test_empty_credit_codes_do_not_collide(self):
        park = ParkFactory()
        OrganizationFactory(park=park, anonymous=True)
        OrganizationFactory(park=park, anonymous=True)
        assert Organization.objects.filter(park=park, credit_code="").count() == 2

    @pytest.mark.parametrize("code", ["9131011", "91310115MA0000001", "9"])
    def test_credit_code_not_18_characters_refused(self, code):
        with refused("organization_credit_code_18_chars"):
            OrganizationFactory(credit_code=code)

    def test_credit_code_shortened_by_update_refused(self):
        organization = OrganizationFactory()
        with refused("organization_credit_code_18_chars"):
            Organization.objects.filter(pk=organization.pk).update(credit_code="91310115")
        organization.refresh_from_db()
        assert len(organization.credit_code) == 18

    def test_unknown_verification_state_refused(self):
        with refused("organization_verification_state_known"):
            OrganizationFactory(verification_state="approved")

    def test_verified_with_identity_accepted(self):
        organization = OrganizationFactory(verified=True)
        assert Organization.objects.get(pk=organization.pk).is_verified

    @pytest.mark.parametrize(
        "identity",
        [
            {"legal_name": ""},
            {"credit_code": ""},
            {"legal_name": "", "credit_code": ""},
        ],
    )
    def test_verified_without_identity_refused(self, identity):
        with refused("organization_verified_has_identity"):
            OrganizationFactory(verified=True, **identity)

    def test_clearing_identity_of_verified_organization_refused(self):
        organization = OrganizationFactory(verified=True)
        with refused("organization_verified_has_identity"):
            Organization.objects.filter(pk=organization.pk).update(legal_name="")
        organization.refresh_from_db()
        assert organization.legal_name

    def test_unverified_without_identity_accepted(self):
        organization = OrganizationFactory(anonymous=True)
        assert Organization.objects.get(pk=organization.pk).credit_code == ""


class TestMembership:
    def test_valid_row_saves(self):
        membership = MembershipFactory(role="owner")
        assert Membership.objects.get(pk=membership.pk).role == "owner"

    def test_same_user_twice_in_organization_refused(self):
        membership = MembershipFactory()
        with refused("membership_unique"):
            MembershipFactory(organization=membership.organization, user=membership.user)

    def test_same_user_in_two_organizations_accepted(self):
        membership = MembershipFactory()
        MembershipFactory(user=membership.user)
        assert membership.user.memberships.count() == 2

    def test_unknown_role_refused(self):
        with refused("membership_role_known"):
            MembershipFactory(role="superuser")


class TestInvitation:
    def test_valid_row_saves(self):
        invitation = InvitationFactory()
        saved = Invitation.objects.get(pk=invitation.pk)
        assert saved.expires_at > saved.created_at

    def test_unknown_role_refused(self):
        with refused("invitation_role_known"):
            InvitationFactory(role="root")

    def test_accepted_and_revoked_refused(self):
        now = timezone.now()
        with refused("invitation_not_accepted_and_revoked"):
            InvitationFactory(accepted_at=now, revoked_at=now)

    def test_revoking_an_accepted_invitation_refused(self):
        invitation = InvitationFactory(accepted_at=timezone.now())
        with refused("invitation_not_accepted_and_revoked"):
            Invitation.objects.filter(pk=invitation.pk).update(revoked_at=timezone.now())
        invitation.refresh_from_db()
        assert invitation.revoked_at is None

    def test_expiry_before_creation_refused(self):
        with refused("invitation_expires_after_creation"):
            InvitationFactory(expires_at=timezone.now() - timedelta(minutes=1))

    def test_duplicate_token_hash_refused(self):
        invitation = InvitationFactory()
        with refused("tenants_invitation.token_hash"):
            InvitationFactory(token_hash=invitation.token_hash)


class TestApiKey:
    def test_valid_row_saves(self):
        key = ApiKeyFactory(scope="write")
        assert ApiKey.objects.get(pk=key.pk).scope == "write"

    def test_unknown_scope_refused(self):
        with refused("api_key_scope_known"):
            ApiKeyFactory(scope="admin")

    def test_duplicate_prefix_refused(self):
        key = ApiKeyFactory()
        with refused("tenants_apikey.prefix"):
            ApiKeyFactory(prefix=key.prefix)

    def test_duplicate_key_hash_refused(self):
        key = ApiKeyFactory()
        with refused("tenants_apikey.key_hash"):
            ApiKeyFactory(key_hash=key.key_hash)

    def test_creator_deleted_keeps_key(self):
        user = UserFactory()
        key = ApiKeyFactory(created_by=user)
        user.delete()
        key.refresh_from_db()
        assert key.created_by is None
