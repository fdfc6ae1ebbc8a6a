from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect

from apps.tenants.roles import Action, can
from apps.tenants.selectors import is_operator


def organization_view(action: str = Action.VIEW):
    """A page of the current organization: needs a membership whose role allows `action`."""

    def decorator(view):
        @login_required
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not request.membership:
                return redirect("tenants:organization_create")
            if not can(request.membership.role, action):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def operator_view(view):
    """A back-office page: park operators (and platform superusers) only."""

    @login_required
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not is_operator(request.user):
            raise PermissionDenied
        return view(request, *args, **kwargs)

    return wrapped
