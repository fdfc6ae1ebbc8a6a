"""One way to show a moment across the console: 2026-12-03 14:05, in the reader's time zone;
and a length of time: 3 d 4 h, 2 h 5 min, 12 min, 40 s."""

from datetime import timedelta

from django import template
from django.template.defaultfilters import date
from django.utils.translation import gettext as _

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


@register.filter
def duration(value) -> str:
    """A timedelta (or a number of minutes) as "3 d 4 h", "2 h 5 min", "12 min" or, under a
    minute, "40 s"; "—" for None."""
    if value is None:
        return "—"
    if not isinstance(value, timedelta):
        value = timedelta(minutes=int(value))
    seconds = max(0, int(value.total_seconds()))
    if seconds < 60:
        return _("%(s)d s") % {"s": seconds}
    days, rest = divmod(seconds // 60, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return _("%(d)d d %(h)d h") % {"d": days, "h": hours}
    if hours:
        return _("%(h)d h %(m)d min") % {"h": hours, "m": minutes}
    return _("%(m)d min") % {"m": minutes}
