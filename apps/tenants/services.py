"""Use cases of tenants and access: organizations, verification, members, invitations, API keys.

Each takes the acting user (or API key) and checks the role matrix before it writes.
"""

import functools
import hashlib
import hmac
import secrets
from datetime import timedelta

from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, connections, transaction
from django.utils import timezone
from django.utils.text import slugify
from django.utils.translation import gettext as _

from apps.core.audit import record_event
from apps.core.errors import DomainError, PermissionDenied
from apps.core.extensions import ExtensionPoint
from apps.core.sql import ModelColumns
from apps.core.transactions import on_commit_task
from apps.core.transitions import transition
from apps.tenants.access import authorize, is_usable_key, require_operator, role_of
from apps.tenants.credit_code import normalize, validate_credit_code
from apps.tenants.licence import validate_licence
from apps.tenants.models import (
    VERIFICATION_TRANSITIONS,
    ApiKey,
    ApiKeyScope,
    Invitation,
    Membership,
    Organization,
    Park,
    ParkOperator,
    Role,
    VerificationState,
)
from apps.tenants.roles import Action, roles_assignable_by

API_KEY_PREFIX = "loam"

# What comes with an organization's tier ("unverified" when it is created, "verified" once an
# operator verifies it) belongs to the apps above: the quotas app plugs in its default limits.
TIER_ENTERED = ExtensionPoint("an organization enters a tier")


def _enter_tier(organization: Organization, tier: str) -> None:
    for provider in TIER_ENTERED.providers():
        provider(organization=organization, tier=tier)


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# --- Organizations ---------------------------------------------------------------------------


@transaction.atomic(durable=True)
def create_organization(
    *, user, park: Park, name: str, accepted_terms: bool = False
) -> Organization:
    """A signed-up user creates an enterprise in a park and becomes its owner; `accepted_terms`:
    they accepted the terms of service for it, now."""
    name = name.strip()
    if not name:
        raise DomainError(_("Give the organization a name."), code="name_required")
    base = slugify(name, allow_unicode=False)[:50] or "org"
    slug, n = base, 1
    while Organization.objects.filter(park=park, slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    organization = Organization.objects.create(
        park=park,
        name=name,
        slug=slug,
        terms_accepted_at=timezone.now() if accepted_terms else None,
    )
    Membership.objects.create(organization=organization, user=user, role=Role.OWNER)
    _enter_tier(organization, "unverified")
    record_event(action="organization.created", actor=user, target=organization)
    return organization


@transaction.atomic
def move_verification(*, organization: Organization, to: str, actor=None, note: str = ""):
    """The one place the verification state moves (DESIGN.md, Lifecycle)."""
    if to == VerificationState.VERIFIED and not (
        organization.legal_name and organization.credit_code
    ):
        raise DomainError(
            _("An organization needs its legal name and credit code before it can be verified."),
            code="verification_incomplete",
        )
    now = timezone.now()
    changes = {"verification_note": note}
    if to == VerificationState.SUBMITTED:
        changes["verification_submitted_at"] = now
    else:
        changes["verification_decided_at"] = now
    return transition(
        organization,
        to,
        table=VERIFICATION_TRANSITIONS,
        field="verification_state",
        actor=actor,
        changes=changes,
        audit_data={"note": note} if note else None,
    )


@transaction.atomic(durable=True)
def submit_verification(
    *, organization: Organization, actor, legal_name: str, credit_code: str, licence
) -> Organization:
    authorize(actor, organization, Action.MANAGE_ORGANIZATION)
    legal_name = legal_name.strip()
    if not legal_name:
        raise DomainError(_("Enter the legal name as on the business licence."), code="legal_name")
    validate_credit_code(credit_code)
    code = normalize(credit_code)
    taken = (
        Organization.objects.filter(park=organization.park, credit_code=code)
        .exclude(pk=organization.pk)
        .exists()
    )
    if taken:
        raise DomainError(
            _("Another organization in this park is registered with this credit code."),
            code="credit_code_taken",
        )
    validate_licence(licence)
    locked = Organization.objects.select_for_update(no_key=True).get(pk=organization.pk)
    if locked.verification_state not in (VerificationState.UNVERIFIED, VerificationState.REJECTED):
        raise DomainError(
            _("The verification is already %(state)s.")
            % {"state": locked.get_verification_state_display()},
            code="verification_state",
        )
    locked.legal_name, locked.credit_code = legal_name, code
    locked.licence.save(licence.name, licence, save=False)
    try:
        with transaction.atomic():
            locked.save(update_fields=["legal_name", "credit_code", "licence"])
    except IntegrityError:  # another organization took the code since the check above
        locked.licence.delete(save=False)
        raise DomainError(
            _("Another organization in this park is registered with this credit code."),
            code="credit_code_taken",
        ) from None
    return move_verification(organization=locked, to=VerificationState.SUBMITTED, actor=actor)


@transaction.atomic(durable=True)
def approve_verification(*, organization: Organization, operator) -> Organization:
    require_operator(
        operator,
        organization.park,
        _("Only this park's operators may decide on its organizations."),
    )
    organization = move_verification(
        organization=organization, to=VerificationState.VERIFIED, actor=operator
    )
    _enter_tier(organization, "verified")
    return organization


@transaction.atomic(durable=True)
def reject_verification(*, organization: Organization, operator, reason: str) -> Organization:
    require_operator(
        operator,
        organization.park,
        _("Only this park's operators may decide on its organizations."),
    )
    reason = reason.strip()
    if not reason:
        raise DomainError(
            _("Say why the verification is rejected; the organization will read it."),
            code="reason_required",
        )
    return move_verification(
        organization=organization, to=VerificationState.REJECTED, actor=operator, note=reason
    )


def add_park_operator(
    *, email: str, password: str, park_slug: str, park_name: str, currency: str
) -> tuple[ParkOperator, bool]:
    """A park's operator with the password they chose (already validated), and the park itself
    when there is none with `park_slug` yet. Their address is the one the platform's
    administrator typed: nothing to confirm. Returns the operator and whether the park is new."""
    with transaction.atomic(durable=True):
        park, created = Park.objects.get_or_create(
            slug=park_slug, defaults={"name": park_name, "currency": currency}
        )
        user = get_user_model()(username=email, email=email)
        user.set_password(password)
        user.save()
        EmailAddress.objects.create(user=user, email=email, verified=True, primary=True)
        operator = ParkOperator.objects.create(park=park, user=user)
        record_event(action="park.operator_added", target=operator, data={"park_created": created})
    return operator, created


@transaction.atomic(durable=True)
def set_mfa_policy(*, park: Park, operator, for_operators: bool, for_owners: bool) -> Park:
    require_operator(operator, park, _("Only this park's operators may change its policy."))
    park = Park.objects.select_for_update(no_key=True).get(pk=park.pk)
    park.require_mfa_for_operators, park.require_mfa_for_owners = for_operators, for_owners
    park.save(update_fields=["require_mfa_for_operators", "require_mfa_for_owners"])
    record_event(
        action="park.mfa_policy",
        actor=operator,
        target=park,
        data={"operators": for_operators, "owners": for_owners},
    )
    return park


# --- Members and roles -----------------------------------------------------------------------


def _check_assignable(actor, organization: Organization, role: str) -> None:
    if role not in Role.values:
        raise DomainError(_("Unknown role."), code="role")
    if role not in roles_assignable_by(role_of(actor, organization)):
        raise PermissionDenied(_("Only an owner can grant or take away the owner role."))


def _owner_count(organization: Organization) -> int:
    return organization.memberships.filter(role=Role.OWNER).count()


@transaction.atomic(durable=True)
def change_role(*, membership: Membership, actor, role: str) -> Membership:
    organization = membership.organization
    authorize(actor, organization, Action.MANAGE_MEMBERS)
    # Lock the organization's memberships so two demotions cannot both pass the owner count.
    list(Membership.objects.select_for_update(no_key=True).filter(organization=organization))
    membership = Membership.objects.get(pk=membership.pk)
    if membership.role == role:
        return membership
    if membership.role == Role.OWNER or role == Role.OWNER:
        _check_assignable(actor, organization, Role.OWNER)
    _check_assignable(actor, organization, role)
    if membership.role == Role.OWNER and _owner_count(organization) == 1:
        raise DomainError(
            _("An organization keeps at least one owner: make someone else owner first."),
            code="last_owner",
        )
    previous = membership.role
    membership.role = role
    membership.save(update_fields=["role"])
    record_event(
        action="membership.role_changed",
        actor=actor,
        target=membership,
        organization=organization,
        data={"user": membership.user.get_username(), "from": previous, "to": role},
    )
    return membership


@transaction.atomic(durable=True)
def remove_member(*, membership: Membership, actor) -> None:
    organization = membership.organization
    leaving_self = isinstance(actor, get_user_model()) and membership.user_id == actor.pk
    if not leaving_self:
        authorize(actor, organization, Action.MANAGE_MEMBERS)
    list(Membership.objects.select_for_update(no_key=True).filter(organization=organization))
    membership = Membership.objects.get(pk=membership.pk)
    if membership.role == Role.OWNER:
        if not leaving_self:
            _check_assignable(actor, organization, Role.OWNER)
        if _owner_count(organization) == 1:
            raise DomainError(
                _("An organization keeps at least one owner: make someone else owner first."),
                code="last_owner",
            )
    record_event(
        action="membership.removed",
        actor=actor,
        target=membership,
        organization=organization,
        data={"user": membership.user.get_username(), "role": membership.role},
    )
    membership.delete()


# --- Invitations -----------------------------------------------------------------------------


def _send_invitation(invitation: Invitation, token: str) -> None:
    from apps.tenants.tasks import send_invitation_email

    on_commit_task(send_invitation_email, invitation.pk, token)


@transaction.atomic(durable=True)
def invite_member(*, organization: Organization, actor, email: str, role: str):
    """Returns (invitation, token). The token is mailed and never stored, only its hash."""
    authorize(actor, organization, Action.MANAGE_MEMBERS)
    _check_assignable(actor, organization, role)
    email = email.strip().lower()
    if organization.memberships.filter(user__email__iexact=email).exists():
        raise DomainError(_("%(email)s is already a member.") % {"email": email}, code="member")
    now = timezone.now()
    pending = organization.invitations.filter(
        email__iexact=email, accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=now
    )
    if pending.exists():
        raise DomainError(
            _("%(email)s already has a pending invitation: resend it instead.") % {"email": email},
            code="pending_invitation",
        )
    token = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        organization=organization,
        email=email,
        role=role,
        token_hash=_hash(token),
        invited_by=actor,
        expires_at=now + timedelta(days=settings.LOAM_INVITATION_DAYS),
        sent_at=now,
    )
    record_event(action="invitation.created", actor=actor, target=invitation, data={"role": role})
    _send_invitation(invitation, token)
    return invitation, token


def _open_invitation(invitation_pk: int) -> Invitation:
    invitation = Invitation.objects.select_for_update(no_key=True).get(pk=invitation_pk)
    if invitation.accepted_at or invitation.revoked_at:
        raise DomainError(_("This invitation is no longer open."), code="invitation_closed")
    return invitation


@transaction.atomic(durable=True)
def resend_invitation(*, invitation: Invitation, actor):
    """A fresh token and expiry; the old link stops working."""
    authorize(actor, invitation.organization, Action.MANAGE_MEMBERS)
    invitation = _open_invitation(invitation.pk)
    token = secrets.token_urlsafe(32)
    now = timezone.now()
    invitation.token_hash = _hash(token)
    invitation.expires_at = now + timedelta(days=settings.LOAM_INVITATION_DAYS)
    invitation.sent_at = now
    invitation.save(update_fields=["token_hash", "expires_at", "sent_at"])
    record_event(action="invitation.resent", actor=actor, target=invitation)
    _send_invitation(invitation, token)
    return invitation, token


@transaction.atomic(durable=True)
def revoke_invitation(*, invitation: Invitation, actor) -> Invitation:
    authorize(actor, invitation.organization, Action.MANAGE_MEMBERS)
    invitation = _open_invitation(invitation.pk)
    invitation.revoked_at = timezone.now()
    invitation.save(update_fields=["revoked_at"])
    record_event(action="invitation.revoked", actor=actor, target=invitation)
    return invitation


def invitation_for_token(token: str) -> Invitation | None:
    return (
        Invitation.objects.select_related("organization", "invited_by")
        .filter(token_hash=_hash(token))
        .first()
    )


def open_invitation_for_token(token: str) -> Invitation | None:
    """The invitation a link shows: only while it can still be accepted."""
    invitation = invitation_for_token(token)
    if invitation is None or invitation.accepted_at or invitation.revoked_at:
        return None
    return invitation if invitation.expires_at > timezone.now() else None


@transaction.atomic(durable=True)
def accept_invitation(*, token: str, user) -> Membership:
    from allauth.account.models import EmailAddress

    invitation = invitation_for_token(token)
    if invitation is None:
        raise DomainError(_("This invitation link is not valid."), code="invitation_unknown")
    invitation = _open_invitation(invitation.pk)
    if invitation.expires_at <= timezone.now():
        raise DomainError(
            _("This invitation has expired: ask for a new one."), code="invitation_expired"
        )
    owns_address = EmailAddress.objects.filter(
        user=user, email__iexact=invitation.email, verified=True
    ).exists()
    if not owns_address:
        raise PermissionDenied(
            _("This invitation is for %(email)s: sign in with that (verified) address.")
            % {"email": invitation.email}
        )
    try:
        with transaction.atomic():
            membership = Membership.objects.create(
                organization=invitation.organization, user=user, role=invitation.role
            )
    except IntegrityError:
        raise DomainError(
            _("You are already a member of this organization."), code="member"
        ) from None
    invitation.accepted_at = timezone.now()
    invitation.save(update_fields=["accepted_at"])
    record_event(
        action="invitation.accepted",
        actor=user,
        target=invitation,
        data={"role": invitation.role},
    )
    return membership


# --- API keys --------------------------------------------------------------------------------


@transaction.atomic(durable=True)
def create_api_key(
    *, organization: Organization, actor, name: str, scope: str, expires_at=None
) -> tuple[ApiKey, str]:
    """Returns (key, secret). The secret is shown once; only its hash is kept."""
    authorize(actor, organization, Action.MANAGE_API_KEYS)
    if scope not in ApiKeyScope.values:
        raise DomainError(_("Unknown scope."), code="scope")
    if isinstance(actor, ApiKey) and scope == ApiKeyScope.WRITE and actor.scope != scope:
        raise PermissionDenied(_("A key cannot create a key with more rights than its own."))
    if expires_at is not None and expires_at <= timezone.now():
        raise DomainError(_("The expiry must be in the future."), code="expires_at")
    prefix = secrets.token_hex(4)
    secret = f"{API_KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        organization=organization,
        name=name.strip() or prefix,
        prefix=prefix,
        key_hash=_hash(secret),
        scope=scope,
        created_by=actor if not isinstance(actor, ApiKey) else None,
        expires_at=expires_at,
    )
    record_event(action="api_key.created", actor=actor, target=key, data={"scope": scope})
    return key, secret


@transaction.atomic(durable=True)
def revoke_api_key(*, api_key: ApiKey, actor) -> ApiKey:
    authorize(actor, api_key.organization, Action.MANAGE_API_KEYS)
    key = ApiKey.objects.select_for_update(no_key=True).get(pk=api_key.pk)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        record_event(action="api_key.revoked", actor=actor, target=key)
    return key


# Last-used is written at most this often per key, so authentication is not a write per call.
LAST_USED_RESOLUTION = timedelta(minutes=1)


# The key by its prefix with its organization and their park, read on every API call: one
# statement, which the ORM took ~0.7 ms of CPU to build and compile each time, eight times what
# running it takes. Written out once here; the objects are the ones
# `select_related("organization__park")` gives.
_KEY_WITH_ORGANIZATION = ModelColumns((ApiKey, "k"), (Organization, "o"), (Park, "p"))


@functools.cache
def _key_statement(alias: str) -> str:
    connection = connections[alias]
    quote = connection.ops.quote_name
    return (
        f"SELECT {_KEY_WITH_ORGANIZATION.sql(connection)} FROM {quote(ApiKey._meta.db_table)} k"
        f" JOIN {quote(Organization._meta.db_table)} o"
        f" ON o.{quote('id')} = k.{quote(ApiKey._meta.get_field('organization').column)}"
        f" JOIN {quote(Park._meta.db_table)} p"
        f" ON p.{quote('id')} = o.{quote(Organization._meta.get_field('park').column)}"
        f" WHERE k.{quote('prefix')} = %s"
    )


def _key_with_organization(prefix: str) -> ApiKey | None:
    with connection.cursor() as cursor:
        cursor.execute(_key_statement(connection.alias), [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    key, organization, park = _KEY_WITH_ORGANIZATION.load(connection, row)
    organization.park = park
    key.organization = organization
    return key


def authenticate_api_key(secret: str, *, ip_address: str | None) -> ApiKey | None:
    """The key for a presented secret, if it is valid, unexpired and not revoked."""
    parts = secret.split("_", 2)  # the random part may itself contain "_"
    if len(parts) != 3 or parts[0] != API_KEY_PREFIX:
        return None
    key = _key_with_organization(parts[1])
    if key is None or not hmac.compare_digest(key.key_hash, _hash(secret)):
        return None
    if not is_usable_key(key):
        return None
    now = timezone.now()
    stale = key.last_used_at is None or now - key.last_used_at >= LAST_USED_RESOLUTION
    if stale or key.last_used_ip != ip_address:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now, last_used_ip=ip_address)
        key.last_used_at, key.last_used_ip = now, ip_address
    return key
