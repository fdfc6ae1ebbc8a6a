from rest_framework.response import Response
from rest_framework.views import exception_handler

from apps.core.errors import DomainError


def handle_exception(exc, context):
    """A service's refusal becomes a JSON error with its status and code, never a 500."""
    if isinstance(exc, DomainError):
        return Response({"detail": exc.message, "code": exc.code}, status=exc.status)
    return exception_handler(exc, context)
