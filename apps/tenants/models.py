import uuid
from pathlib import Path

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Length
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from apps.core.money import Currency

models.CharField.register_lookup(Length)  # `credit_code__length` in a check constraint


class Park(models.Model):
    """A park (园区): one operator's regional public compute service."""

    name = models.CharField(_("name"), max_length=120)
    slug = models.SlugField(_("slug"), max_length=60, unique=True)
    currency = models.CharField(
        _("currency"), max_length=3, choices=Currency.choices, default=Currency.CNY
    )
    require_mfa_for_operators = models.BooleanField(
        _("operators must use two-factor authentication"), default=False
    )
    require_mfa_for_owners = models.BooleanField(
        _("organization owners must use two-factor authentication"), default=False
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("park")
        verbose_name_plural = _("parks")
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(currency__in=Currency.values), name="park_currency_known"
            ),
        ]

    def __str__(self):
        return self.name


class ParkOperator(models.Model):
    """Operator staff of one park: they see and act on that park's organizations only."""

    park = models.ForeignKey(
        Park, on_delete=models.CASCADE, related_name="operators", verbose_name=_("park")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="operated_parks",
        verbose_name=_("user"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("park operator")
        verbose_name_plural = _("park operators")
        constraints = [
            models.UniqueConstraint(fields=["park", "user"], name="park_operator_unique"),
        ]

    def __str__(self):
        return f"{self.user} @ {self.park}"


class VerificationState(models.TextChoices):
    UNVERIFIED = "unverified", _("Unverified")
    SUBMITTED = "submitted", _("Submitted")
    VERIFIED = "verified", _("Verified")
    REJECTED = "rejected", _("Rejected")


VERIFICATION_TRANSITIONS = {
    VerificationState.UNVERIFIED: frozenset({VerificationState.SUBMITTED}),
    VerificationState.SUBMITTED: frozenset(
        {VerificationState.VERIFIED, VerificationState.REJECTED}
    ),
    VerificationState.REJECTED: frozenset({VerificationState.SUBMITTED}),
    VerificationState.VERIFIED: frozenset(),
}


def licence_path(organization, filename):
    """Random names, so one organization's licence URL cannot be guessed from another's."""
    suffix = Path(filename).suffix.lower()
    return f"licences/{organization.park_id}/{uuid.uuid4().hex}{suffix}"


class Organization(models.Model):
    """An enterprise tenant of a park."""

    park = models.ForeignKey(
        Park, on_delete=models.PROTECT, related_name="organizations", verbose_name=_("park")
    )
    name = models.CharField(_("display name"), max_length=120)
    slug = models.SlugField(_("slug"), max_length=60)
    legal_name = models.CharField(_("legal name"), max_length=200, blank=True)
    # 统一社会信用代码: 18 characters ending in a GB 32100-2015 check character.
    credit_code = models.CharField(_("unified social credit code"), max_length=18, blank=True)
    verification_state = models.CharField(
        _("verification"),
        max_length=16,
        choices=VerificationState.choices,
        default=VerificationState.UNVERIFIED,
    )
    verification_note = models.TextField(_("verification note"), blank=True)
    # Stored under MEDIA_ROOT, outside static/, and only served by a view that checks access.
    licence = models.FileField(_("business licence"), upload_to=licence_path, blank=True)
    verification_submitted_at = models.DateTimeField(_("submitted at"), null=True, blank=True)
    verification_decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    # When its creator accepted the terms of service (/terms/) for it; empty for the
    # organizations created before sign-up asked, and those made by operators' scripts.
    terms_accepted_at = models.DateTimeField(_("terms accepted at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("organization")
        verbose_name_plural = _("organizations")
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["park", "slug"], name="organization_slug_unique"),
            models.UniqueConstraint(
                fields=["park", "credit_code"],
                condition=~Q(credit_code=""),
                name="organization_credit_code_unique",
            ),
            models.CheckConstraint(
                condition=Q(credit_code="") | Q(credit_code__length=18),
                name="organization_credit_code_18_chars",
            ),
            models.CheckConstraint(
                condition=Q(verification_state__in=VerificationState.values),
                name="organization_verification_state_known",
            ),
            models.CheckConstraint(
                condition=~Q(verification_state=VerificationState.VERIFIED)
                | (~Q(legal_name="") & ~Q(credit_code="")),
                name="organization_verified_has_identity",
            ),
        ]
        indexes = [models.Index(fields=["park", "verification_state"])]

    def __str__(self):
        return self.name

    @property
    def is_verified(self):
        return self.verification_state == VerificationState.VERIFIED


class Role(models.TextChoices):
    OWNER = "owner", _("Owner")
    ADMIN = "admin", pgettext_lazy("role", "Admin")
    MEMBER = "member", _("Member")
    BILLING = "billing", pgettext_lazy("role", "Billing")
    VIEWER = "viewer", _("Viewer")


class Membership(models.Model):
    organization = models.ForeignKey(
        Organization,
        on_delete=models.CASCADE,
        related_name="memberships",
        verbose_name=_("organization"),
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="memberships",
        verbose_name=_("user"),
    )
    role = models.CharField(_("role"), max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        constraints = [
            models.UniqueConstraint(fields=["organization", "user"], name="membership_unique"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="membership_role_known"),
        ]

    def __str__(self):
        return f"{self.user} · {self.organization} ({self.get_role_display()})"


class Invitation(models.Model):
    """An email invitation to join an organization; the token is stored only as its hash."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.CASCADE,
        related_name="invitations",
        verbose_name=_("organization"),
    )
    email = models.EmailField(_("email"))
    role = models.CharField(_("role"), max_length=16, choices=Role.choices, default=Role.MEMBER)
    token_hash = models.CharField(max_length=64, unique=True, verbose_name=_("token hash"))
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="+",
        verbose_name=_("invited by"),
    )
    expires_at = models.DateTimeField(_("expires at"))
    sent_at = models.DateTimeField(_("last sent at"), null=True, blank=True)
    accepted_at = models.DateTimeField(_("accepted at"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("invitation")
        verbose_name_plural = _("invitations")
        constraints = [
            models.CheckConstraint(condition=Q(role__in=Role.values), name="invitation_role_known"),
            models.CheckConstraint(
                condition=Q(accepted_at__isnull=True) | Q(revoked_at__isnull=True),
                name="invitation_not_accepted_and_revoked",
            ),
            models.CheckConstraint(
                condition=Q(expires_at__gt=models.F("created_at")),
                name="invitation_expires_after_creation",
            ),
        ]
        indexes = [models.Index(fields=["organization", "email"])]

    def __str__(self):
        return f"{self.email} → {self.organization}"


class ApiKeyScope(models.TextChoices):
    READ = "read", _("Read")
    WRITE = "write", _("Read and write")


class ApiKey(models.Model):
    """A partner's API key: only `prefix` (display and lookup) and the secret's hash are kept."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.CASCADE,
        related_name="api_keys",
        verbose_name=_("organization"),
    )
    name = models.CharField(_("name"), max_length=80)
    prefix = models.CharField(_("prefix"), max_length=16, unique=True)
    key_hash = models.CharField(max_length=128, unique=True, verbose_name=_("key hash"))
    scope = models.CharField(
        _("scope"), max_length=8, choices=ApiKeyScope.choices, default=ApiKeyScope.READ
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True)
    last_used_ip = models.GenericIPAddressField(_("last used from"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("API key")
        verbose_name_plural = _("API keys")
        constraints = [
            models.CheckConstraint(
                condition=Q(scope__in=ApiKeyScope.values), name="api_key_scope_known"
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    @property
    def audit_label(self) -> str:
        """How the audit log names the key (keys are named there, not linked)."""
        return f"api-key:{self.prefix}"
