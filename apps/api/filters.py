"""The list filters and ordering of every API route (`filterset_fields`, `ordering_fields`),
built on these rules:

- A foreign key is filtered by its id as a plain number, never checked against a table: an id
  that does not exist and one of another organization (or park) both give the same empty list,
  so a filter is no oracle of what exists elsewhere. Only a value that is not an integer is a 400.
- A datetime is read with any offset Python accepts and compared in UTC (PostgreSQL refuses
  offsets past ±15:59); one that falls outside the years 1–9999 in UTC is a 400 naming it.
- A filter given without a value it takes (`?state=`, `?is_default=maybe`) is a 400 naming it,
  never the unfiltered list: the schema says what each takes, and a typo must not widen a list.
  (Not on the browsable API's HTML pages, whose filter form sends the unset filters empty.)
- `ordering` takes a comma-separated list of the fields the route documents, each ascending or
  with a leading `-` descending; any other term is a 400 naming `ordering` (DRF drops it).
- Each backend says which query parameters it reads (`query_parameters`), so that the API can
  refuse the others (apps.api.base).
"""

from datetime import UTC

from django import forms
from django.db import models
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django_filters import rest_framework as filters
from django_filters.constants import EMPTY_VALUES
from django_filters.fields import IsoDateTimeField
from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import filters as drf_filters
from rest_framework.exceptions import ValidationError

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


class NoValuelessFilters:
    """A filter form on which a parameter given without a value its filter takes is an error.
    Django would clean `?state=`, `?instance=` or `?is_default=maybe` to "no filter"; only a
    text filter can take an empty text."""

    def clean(self):
        cleaned = super().clean()
        for name, field in self.fields.items():
            given = name in self.data and name not in self.errors
            valueless = cleaned.get(name) in EMPTY_VALUES and not isinstance(field, forms.CharField)
            if given and valueless:
                self.add_error(name, gettext("Give a value this filter takes, or leave it out."))
        return cleaned


class FilterSet(filters.FilterSet):
    FILTER_DEFAULTS = {
        **filters.FilterSet.FILTER_DEFAULTS,
        models.DateTimeField: {"filter_class": UtcIsoDateTimeFilter},
        models.ForeignKey: {"filter_class": IdFilter},
        models.OneToOneField: {"filter_class": IdFilter},
    }

    def get_form_class(self):
        form_class = super().get_form_class()
        if getattr(getattr(self.request, "accepted_renderer", None), "format", None) == "api":
            # The browsable API's filter form sends every filter, the unset ones empty.
            return form_class
        return type(form_class.__name__, (NoValuelessFilters, form_class), {})


def _model_queryset(view):
    """The view's queryset for what it is a queryset of (its model), not for its rows."""
    queryset = getattr(view, "queryset", None)
    return queryset if queryset is not None else view.get_queryset()


class FilterBackend(filters.DjangoFilterBackend):
    """DjangoFilterBackend whose generated filtersets follow the rules above."""

    filterset_base = FilterSet

    def query_parameters(self, view) -> set[str]:
        filterset_class = self.get_filterset_class(view, _model_queryset(view))
        return set(filterset_class.base_filters) if filterset_class else set()


class OrderingFilter(drf_filters.OrderingFilter):
    """DRF's ordering, strict: `?ordering=` with a term the route does not order by is a 400
    naming `ordering`, and the schema lists the terms it takes."""

    def terms(self, queryset, view, request=None) -> list[str]:
        """Each field the list orders by, ascending and descending."""
        fields = self.get_valid_fields(queryset, view, {"request": request})
        return [term for name, _label in fields for term in (name, f"-{name}")]

    def get_ordering(self, request, queryset, view):
        if self.ordering_param not in request.query_params:
            return self.get_default_ordering(view)
        asked = request.query_params[self.ordering_param].split(",")
        known = set(self.terms(queryset, view, request))
        unknown = [term for term in asked if term not in known]
        if unknown:
            message = gettext("This list cannot be ordered by %(terms)s. It can be by: %(known)s.")
            terms = ", ".join(f'"{term}"' for term in unknown)
            message %= {"terms": terms, "known": ", ".join(sorted(known))}
            raise ValidationError({self.ordering_param: [message]})
        return asked

    def query_parameters(self, view) -> set[str]:
        return {self.ordering_param}

    def get_schema_operation_parameters(self, view):
        terms = self.terms(_model_queryset(view), view)
        return [
            {
                "name": self.ordering_param,
                "required": False,
                "in": OpenApiParameter.QUERY,
                "description": "Comma-separated fields to order by; a leading `-` descends.",
                "schema": {
                    "type": "array",
                    "items": {"type": "string", "enum": terms},
                    "minItems": 1,
                },
                "style": "form",
                "explode": False,
            }
        ]
