"""Reads shared by pages and the API. Tenant objects are fetched only through `for_organization`
and `get_for_organization`, so another organization's object is a 404 everywhere."""

from django.db.models import Model, QuerySet
from django.http import Http404

from apps.tenants.models import Membership, Organization, Park


def memberships_for(user):
    return list(
        Membership.objects.filter(user=user)
        .select_related("organization__park")
        .order_by("organization__name")
    )


def for_organization(queryset: QuerySet | type[Model], organization: Organization) -> QuerySet:
    """`queryset` limited to what `organization` owns (its `organization` field)."""
    if isinstance(queryset, type):
        queryset = queryset._default_manager.all()
    if organization is None:
        return queryset.none()
    return queryset.filter(organization=organization)


def get_for_organization(queryset, organization: Organization, **lookup):
    scoped = for_organization(queryset, organization)
    try:
        return scoped.get(**lookup)
    except (scoped.model.DoesNotExist, ValueError):
        raise Http404 from None


def is_operator(user) -> bool:
    return user.is_authenticated and (user.is_superuser or user.operated_parks.exists())


def is_operator_of(user, park: Park) -> bool:
    if user is None or not user.is_authenticated:
        return False
    return user.is_superuser or user.operated_parks.filter(park=park).exists()


def parks_operated_by(user) -> QuerySet:
    if user.is_superuser:
        return Park.objects.all()
    return Park.objects.filter(operators__user=user)


def organizations_for_operator(user) -> QuerySet:
    """The organizations an operator may see: those of the parks they operate."""
    return Organization.objects.filter(park__in=parks_operated_by(user)).select_related("park")


def get_for_operator(queryset: QuerySet, user, *, park_field: str = "park", **lookup):
    """An object of one of the operator's parks, or 404."""
    try:
        return queryset.filter(**{f"{park_field}__in": parks_operated_by(user)}).get(**lookup)
    except (queryset.model.DoesNotExist, ValueError):
        raise Http404 from None


def operated_park(user, park_id) -> Park:
    """A park `user` operates; any other (or a user who operates none) is a 404."""
    return get_for_operator(Park.objects.all(), user, park_field="pk", pk=park_id)
