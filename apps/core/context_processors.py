from apps.tenants.selectors import is_operator, memberships_for


def navigation(request):
    """Which navigation the base layout shows: the tenant's, the operator's, or the public one."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_is_operator": False, "nav_memberships": []}
    return {
        "nav_is_operator": is_operator(user),
        "nav_memberships": memberships_for(user),
    }
