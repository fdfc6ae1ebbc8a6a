from django import template

from apps.core.money import format_money, format_rate

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
    return format_rate(amount_minor, currency)
