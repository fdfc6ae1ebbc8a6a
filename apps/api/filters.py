"""The list filters of every API route (`filterset_fields`), built on two rules:

- A foreign key is filtered by its id as a plain number, never checked against a table: an id
  that does not exist and one of another organization (or park) both give the same empty list,
  so a filter is no oracle of what exists elsewhere. Only a value that is not an integer is a 400.
- A datetime is read with any offset Python accepts and compared in UTC (PostgreSQL refuses
  offsets past ±15:59); one that falls outside the years 1–9999 in UTC is a 400 naming it.
"""

from datetime import UTC

from django import forms
from django.db import models
from django.utils.translation import gettext_lazy as _
from django_filters import rest_framework as filters
from django_filters.constants import EMPTY_VALUES
from django_filters.fields import IsoDateTimeField
from drf_spectacular.utils import extend_schema_field

# What a BigAutoField (every primary key here) can hold; nothing has an id outside it.
ID_MIN, ID_MAX = 1, 2**63 - 1
ID_HELP = "An id. One that does not exist, or is not yours, gives an empty list."


@extend_schema_field({"type": "integer", "description": ID_HELP})
class IdFilter(filters.NumberFilter):
    """An integer of any size: one outside the ids' range matches nothing."""

    field_class = forms.IntegerField

    def filter(self, queryset, value):
        if value not in EMPTY_VALUES and not ID_MIN <= value <= ID_MAX:
            return queryset.none()
        return super().filter(queryset, value)


class UtcIsoDateTimeField(IsoDateTimeField):
    default_error_messages = {
        "overflow": _("This date and time is outside the years 1 to 9999 in UTC."),
    }

    def to_python(self, value):
        value = super().to_python(value)
        if value is None:
            return value
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise forms.ValidationError(self.error_messages["overflow"], code="overflow") from None


class UtcIsoDateTimeFilter(filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class FilterSet(filters.FilterSet):
    FILTER_DEFAULTS = {
        **filters.FilterSet.FILTER_DEFAULTS,
        models.DateTimeField: {"filter_class": UtcIsoDateTimeFilter},
        models.ForeignKey: {"filter_class": IdFilter},
        models.OneToOneField: {"filter_class": IdFilter},
    }


class FilterBackend(filters.DjangoFilterBackend):
    """DjangoFilterBackend whose generated filtersets follow the rules above."""

    filterset_base = FilterSet
