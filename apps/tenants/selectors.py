from apps.tenants.models import Membership, Park


def memberships_for(user):
    return list(
        Membership.objects.filter(user=user)
        .select_related("organization")
        .order_by("organization__name")
    )


def is_operator(user) -> bool:
    return user.is_superuser or user.operated_parks.exists()


def parks_operated_by(user):
    if user.is_superuser:
        return Park.objects.all()
    return Park.objects.filter(operators__user=user)
