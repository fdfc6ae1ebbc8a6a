from apps.tenants.roles import ROLE_ACTIONS
from apps.tenants.selectors import is_operator, memberships_for


def navigation(request):
    """What the base layout needs: the user's organizations, the current one, what the current
    role allows (`org_can.order`, …) and whether to show the operator navigation."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_is_operator": False, "nav_memberships": [], "org_can": {}}
    membership = getattr(request, "membership", None)
    allowed = ROLE_ACTIONS.get(membership.role, frozenset()) if membership else frozenset()
    return {
        "nav_is_operator": is_operator(user),
        "nav_memberships": memberships_for(user),
        "current_membership": membership,
        "org_can": {action: True for action in allowed},
    }
