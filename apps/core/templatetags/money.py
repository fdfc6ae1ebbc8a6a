from decimal import Decimal

from django import template

from apps.core.money import format_money

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
