"""One way to show a moment across the console: 2026-12-03 14:05, in the reader's time zone."""

from django import template
from django.template.defaultfilters import date

register = template.Library()

DATETIME_FORMAT = "Y-m-d H:i"
DATE_FORMAT = "Y-m-d"


@register.filter(expects_localtime=True, is_safe=False)
def when(value) -> str:
    """A datetime as 2026-12-03 14:05; nothing for None."""
    return date(value, DATETIME_FORMAT)


@register.filter(expects_localtime=True, is_safe=False)
def day(value) -> str:
    """A date or datetime as 2026-12-03; nothing for None."""
    return date(value, DATE_FORMAT)
