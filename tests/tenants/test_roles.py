"""The role matrix, written out by hand: changing ROLE_ACTIONS or API_KEY_ACTIONS has to be a
deliberate change here too. Then the checks every service makes (`allowed`, `authorize`) for
users in and out of the organization and for API keys of every kind."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from apps.core.errors import PermissionDenied
from apps.tenants.access import allowed, authorize, role_of
from apps.tenants.models import ApiKeyScope, Role
from apps.tenants.roles import Action, can, key_can, roles_assignable_by
from tests.factories import ApiKeyFactory, UserFactory

# --- The expected matrix --------------------------------------------------------------------
# Columns: owner, admin, member, billing, viewer. "x" may, "." may not.
ROLE_COLUMNS = ("owner", "admin", "member", "billing", "viewer")
ROLE_TABLE = {
    #                       owner admin member billing viewer
    "view": ("x", "x", "x", "x", "x"),
    "order": ("x", "x", "x", ".", "."),
    "release": ("x", "x", "x", ".", "."),
    "view_billing": ("x", "x", ".", "x", "."),
    "manage_billing": ("x", ".", ".", "x", "."),
    "manage_members": ("x", "x", ".", ".", "."),
    "manage_api_keys": ("x", "x", ".", ".", "."),
    "manage_organization": ("x", "x", ".", ".", "."),
}
KEY_COLUMNS = ("read", "write")
KEY_TABLE = {
    #                        read write
    "view": ("x", "x"),
    "order": (".", "x"),
    "release": (".", "x"),
    "view_billing": ("x", "x"),
    "manage_billing": (".", "."),
    "manage_members": (".", "."),
    "manage_api_keys": (".", "x"),
    "manage_organization": (".", "."),
}
ASSIGNABLE = {
    "owner": ["owner", "admin", "member", "billing", "viewer"],
    "admin": ["admin", "member", "billing", "viewer"],
    "member": [],
    "billing": [],
    "viewer": [],
}

ROLE_CASES = [
    (role, action, mark == "x")
    for action, marks in ROLE_TABLE.items()
    for role, mark in zip(ROLE_COLUMNS, marks, strict=True)
]
KEY_CASES = [
    (scope, action, mark == "x")
    for action, marks in KEY_TABLE.items()
    for scope, mark in zip(KEY_COLUMNS, marks, strict=True)
]


def test_tables_cover_every_role_scope_and_action():
    assert set(ROLE_TABLE) == set(Action.values)
    assert set(KEY_TABLE) == set(Action.values)
    assert set(ROLE_COLUMNS) == set(Role.values)
    assert set(KEY_COLUMNS) == set(ApiKeyScope.values)
    assert set(ASSIGNABLE) == set(Role.values)
    assert len(ROLE_CASES) == len(Role.values) * len(Action.values)


@pytest.mark.parametrize(("role", "action", "expected"), ROLE_CASES)
def test_role_matrix(role, action, expected):
    assert can(role, action) is expected


@pytest.mark.parametrize("action", Action.values)
@pytest.mark.parametrize("role", [None, "", "superuser", "OWNER"])
def test_no_or_unknown_role_can_do_nothing(role, action):
    assert can(role, action) is False


@pytest.mark.parametrize(("scope", "action", "expected"), KEY_CASES)
def test_key_scope_matrix(scope, action, expected):
    assert key_can(scope, action) is expected


@pytest.mark.parametrize("action", Action.values)
def test_unknown_key_scope_can_do_nothing(action):
    assert key_can("admin", action) is False
    assert key_can("", action) is False


@pytest.mark.parametrize(("role", "expected"), ASSIGNABLE.items())
def test_roles_assignable_by(role, expected):
    assert roles_assignable_by(role) == expected


@pytest.mark.parametrize("role", [None, "", "unknown"])
def test_nobody_assigns_roles_without_a_role(role):
    assert roles_assignable_by(role) == []


# --- allowed / authorize for users ----------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(("role", "action", "expected"), ROLE_CASES)
def test_member_of_the_organization_follows_the_matrix(
    organization, member_of, role, action, expected
):
    user = member_of(organization, role)

    assert role_of(user, organization) == role
    assert allowed(user, organization, action) is expected
    if expected:
        authorize(user, organization, action)  # does not raise
    else:
        with pytest.raises(PermissionDenied) as excinfo:
            authorize(user, organization, action)
        assert excinfo.value.code == "permission_denied"
        assert excinfo.value.status == 403


@pytest.mark.django_db
@pytest.mark.parametrize("action", Action.values)
def test_owner_of_another_organization_may_do_nothing_here(organization, other_owner, action):
    assert role_of(other_owner, organization) is None
    assert allowed(other_owner, organization, action) is False
    with pytest.raises(PermissionDenied):
        authorize(other_owner, organization, action)


@pytest.mark.django_db
@pytest.mark.parametrize("action", Action.values)
def test_own_role_does_not_carry_to_another_organization(
    organization, other_organization, owner, action
):
    assert allowed(owner, organization, action) is True
    assert allowed(owner, other_organization, action) is False


@pytest.mark.django_db
@pytest.mark.parametrize("action", Action.values)
def test_user_without_membership_may_do_nothing(organization, action):
    user = UserFactory()
    assert allowed(user, organization, action) is False
    with pytest.raises(PermissionDenied):
        authorize(user, organization, action)


@pytest.mark.django_db
@pytest.mark.parametrize("action", Action.values)
def test_operator_is_not_a_member(organization, operator, action):
    # Operators act through their own services (approve/reject), not the organization's roles.
    assert allowed(operator, organization, action) is False


@pytest.mark.django_db
@pytest.mark.parametrize("actor", [AnonymousUser(), None], ids=["anonymous", "none"])
@pytest.mark.parametrize("action", Action.values)
def test_anonymous_may_do_nothing(organization, owner, actor, action):
    assert role_of(actor, organization) is None
    assert allowed(actor, organization, action) is False
    with pytest.raises(PermissionDenied):
        authorize(actor, organization, action)


# --- allowed / authorize for API keys -------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(("scope", "action", "expected"), KEY_CASES)
def test_key_of_the_organization_follows_its_scope(organization, scope, action, expected):
    key = ApiKeyFactory(organization=organization, scope=scope)

    assert allowed(key, organization, action) is expected
    if expected:
        authorize(key, organization, action)
    else:
        with pytest.raises(PermissionDenied):
            authorize(key, organization, action)


@pytest.mark.django_db
@pytest.mark.parametrize("scope", ApiKeyScope.values)
@pytest.mark.parametrize("action", Action.values)
def test_key_of_another_organization_may_do_nothing(
    organization, other_organization, scope, action
):
    key = ApiKeyFactory(organization=other_organization, scope=scope)

    assert allowed(key, organization, action) is False
    with pytest.raises(PermissionDenied):
        authorize(key, organization, action)


@pytest.mark.django_db
@pytest.mark.parametrize("action", Action.values)
def test_revoked_key_may_do_nothing(organization, action):
    key = ApiKeyFactory(
        organization=organization, scope=ApiKeyScope.WRITE, revoked_at=timezone.now()
    )

    assert allowed(key, organization, action) is False
    with pytest.raises(PermissionDenied):
        authorize(key, organization, action)


@pytest.mark.django_db
@pytest.mark.parametrize("action", Action.values)
def test_expired_key_may_do_nothing(organization, action):
    key = ApiKeyFactory(
        organization=organization,
        scope=ApiKeyScope.WRITE,
        expires_at=timezone.now() - timedelta(seconds=1),
    )

    assert allowed(key, organization, action) is False
    with pytest.raises(PermissionDenied):
        authorize(key, organization, action)


@pytest.mark.django_db
def test_key_with_a_future_expiry_is_usable(organization):
    key = ApiKeyFactory(
        organization=organization,
        scope=ApiKeyScope.WRITE,
        expires_at=timezone.now() + timedelta(days=1),
    )

    assert allowed(key, organization, Action.ORDER) is True
    authorize(key, organization, Action.ORDER)


@pytest.mark.django_db
def test_read_key_reads_but_does_not_write(organization):
    key = ApiKeyFactory(organization=organization, scope=ApiKeyScope.READ)

    assert allowed(key, organization, Action.VIEW) is True
    assert allowed(key, organization, Action.VIEW_BILLING) is True
    for action in (Action.ORDER, Action.RELEASE, Action.MANAGE_API_KEYS):
        assert allowed(key, organization, action) is False


@pytest.mark.django_db
@pytest.mark.parametrize(
    "action", [Action.MANAGE_MEMBERS, Action.MANAGE_BILLING, Action.MANAGE_ORGANIZATION]
)
def test_even_a_write_key_never_manages_people_money_or_the_organization(organization, action):
    key = ApiKeyFactory(organization=organization, scope=ApiKeyScope.WRITE)
    assert allowed(key, organization, action) is False
