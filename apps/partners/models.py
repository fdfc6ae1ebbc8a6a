"""Partners: enterprises that bring their own GPU servers into the park (Waldur's service
providers, Vast.ai's hosts). A partner is an organization of the park; its members log in as
that organization's members. It owns pools (`PartnerPool`), sets a floor price
per card-hour on each (`PoolTerms`), and is paid its share of what its pools earned each month
(`Settlement`), which the park's operators confirm."""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from apps.core.money import Currency
from apps.tenants.models import Organization


class Partner(models.Model):
    """An organization that owns pools of the park and is paid a share of their revenue."""

    organization = models.OneToOneField(
        Organization,
        on_delete=models.PROTECT,
        related_name="partner",
        verbose_name=_("organization"),
    )
    revenue_share_pct = models.DecimalField(
        _("revenue share (%)"),
        max_digits=5,
        decimal_places=2,
        validators=[MinValueValidator(0), MaxValueValidator(100)],
        help_text=_("The partner's share of what its pools earn, set by the park's operators."),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("partner")
        verbose_name_plural = _("partners")
        ordering = ["organization__name", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(revenue_share_pct__gte=0) & Q(revenue_share_pct__lte=100),
                name="partner_share_0_to_100",
            ),
        ]

    def __str__(self):
        return str(self.organization)

    @property
    def park(self):
        return self.organization.park


class PartnerPool(models.Model):
    """A pool whose servers a partner brought into the park: what runs on it earns the partner
    its share. A pool without one is the park's own."""

    pool = models.OneToOneField(
        "orchestration.Pool",
        on_delete=models.CASCADE,
        related_name="partner_pool",
        verbose_name=_("pool"),
    )
    partner = models.ForeignKey(
        Partner, on_delete=models.PROTECT, related_name="owned_pools", verbose_name=_("partner")
    )

    class Meta:
        verbose_name = _("partner's pool")
        verbose_name_plural = _("partners' pools")

    def __str__(self):
        return f"{self.pool} ({self.partner})"


class PoolTerms(models.Model):
    """What the partner who owns a pool asks of it: the least an hour of one card may sell for.
    The park's price of a flavor that runs on the pool is refused below the floor × its cards."""

    pool = models.OneToOneField(
        "orchestration.Pool",
        on_delete=models.CASCADE,
        related_name="partner_terms",
        verbose_name=_("pool"),
    )
    floor_price_minor_per_card_hour = models.PositiveIntegerField(
        _("floor price per card-hour (minor units)")
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("updated by"),
    )

    class Meta:
        verbose_name = _("pool terms")
        verbose_name_plural = _("pool terms")

    def __str__(self):
        return gettext("Terms of %(pool)s") % {"pool": self.pool}


class SettlementState(models.TextChoices):
    DRAFT = "draft", _("Draft")
    CONFIRMED = "confirmed", _("Confirmed")
    PAID = "paid", _("Paid")


_S = SettlementState
# A draft is computed (and recomputed) from the month's usage; the park's finance confirms it,
# which freezes it, and marks it paid once the payout has left.
SETTLEMENT_TRANSITIONS = {
    _S.DRAFT: frozenset({_S.CONFIRMED}),
    _S.CONFIRMED: frozenset({_S.PAID}),
    _S.PAID: frozenset(),
}


class Settlement(models.Model):
    """One partner's statement of one month: what hosts and tasks on its pools were charged
    (usage records that began in the month, in the park's time zone), its share, its payout."""

    partner = models.ForeignKey(
        Partner, on_delete=models.PROTECT, related_name="settlements", verbose_name=_("partner")
    )
    month = models.DateField(_("month"), help_text=_("The first day of the month settled."))
    revenue_minor = models.BigIntegerField(_("revenue (minor units)"))
    share_pct = models.DecimalField(_("share (%)"), max_digits=5, decimal_places=2)
    payout_minor = models.BigIntegerField(_("payout (minor units)"))
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    records = models.PositiveIntegerField(_("usage records"), default=0)
    state = models.CharField(
        _("state"), max_length=16, choices=SettlementState.choices, default=SettlementState.DRAFT
    )
    computed_at = models.DateTimeField(_("computed at"))
    confirmed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("confirmed by"),
    )
    confirmed_at = models.DateTimeField(_("confirmed at"), null=True, blank=True)
    paid_at = models.DateTimeField(_("paid at"), null=True, blank=True)

    class Meta:
        verbose_name = _("settlement")
        verbose_name_plural = _("settlements")
        ordering = ["-month", "partner"]
        constraints = [
            models.UniqueConstraint(fields=["partner", "month"], name="settlement_partner_month"),
            models.CheckConstraint(
                condition=Q(state__in=SettlementState.values), name="settlement_state_known"
            ),
            models.CheckConstraint(
                condition=Q(revenue_minor__gte=0)
                & Q(payout_minor__gte=0)
                & Q(payout_minor__lte=models.F("revenue_minor")),
                name="settlement_amounts_sane",
            ),
            models.CheckConstraint(
                condition=Q(state=SettlementState.DRAFT) | Q(confirmed_at__isnull=False),
                name="settlement_confirmed_has_time",
            ),
        ]

    def __str__(self):
        return gettext("%(partner)s, %(month)s") % {
            "partner": self.partner,
            "month": self.month.strftime("%Y-%m"),
        }

    @property
    def organization(self):
        """The partner's organization (the audit log files the statement's events under it)."""
        return self.partner.organization
