from decimal import Decimal

from django import template

from apps.core.money import SYMBOLS, format_money, to_major

register = template.Library()


@register.filter
def money(amount_minor, currency):
    """{{ price.amount_minor|money:price.currency }} -> ¥123.45"""
    if amount_minor is None:
        return "—"
    return format_money(amount_minor, currency)


@register.filter
def rate(amount_minor, currency):
    """A sub-minor-unit rate such as a price per second: ¥0.0083"""
    if amount_minor is None:
        return "—"
    return format_money(amount_minor, currency, places=4)


@register.filter
def per_second(hourly_minor):
    """An hourly amount in minor units as a per-second rate (a Decimal)."""
    return Decimal(hourly_minor) / 3600 if hourly_minor is not None else None


@register.filter
def major(amount_minor, currency):
    """Minor units as the plain amount a form field takes: 350000, "CNY" -> 3500.00"""
    if amount_minor is None:
        return ""
    return to_major(amount_minor, currency).quantize(Decimal("0.01"))


@register.filter
def currency_symbol(currency):
    """ "CNY" -> ¥"""
    return SYMBOLS.get(currency, currency)
