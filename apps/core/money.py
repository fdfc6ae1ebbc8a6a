"""Money is integer minor units plus an ISO 4217 currency; this module formats and converts."""

from decimal import ROUND_HALF_UP, Decimal

from django.db import models
from django.utils.translation import gettext_lazy as _


class Currency(models.TextChoices):
    CNY = "CNY", _("Chinese yuan")
    USD = "USD", _("US dollar")


# Minor units per major unit; both currencies we sell in use cents/fen.
MINOR_PER_MAJOR = {Currency.CNY: 100, Currency.USD: 100}
SYMBOLS = {Currency.CNY: "¥", Currency.USD: "$"}


def to_major(amount_minor: int, currency: str) -> Decimal:
    return Decimal(amount_minor) / MINOR_PER_MAJOR[currency]


def format_money(amount_minor: int | Decimal, currency: str, *, places: int = 2) -> str:
    """`12345, "CNY"` -> `¥123.45`. More places show sub-fen rates such as a price per second."""
    quantum = Decimal(1).scaleb(-places)
    value = to_major(amount_minor, currency).quantize(quantum, rounding=ROUND_HALF_UP)
    sign = "-" if value < 0 else ""
    return f"{sign}{SYMBOLS[currency]}{abs(value):,}"
