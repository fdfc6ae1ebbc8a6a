from django import template

from apps.core.numbers import figure as figure_of

register = template.Library()


@register.filter
def figure(value):
    """A measure as people read it (`core.numbers.figure`): 158.240 → 158.24, 12000 → 12,000."""
    if value is None or value == "":
        return value
    return figure_of(value)
