"""What every API view shares: input no database can hold refused up front, organization-scoped
permissions, the API's list filters, idempotent POSTs, and problem+json for refusals raised by
the idempotency layer."""

from rest_framework.filters import OrderingFilter
from rest_framework.generics import GenericAPIView

from apps.api import idempotency
from apps.api.exceptions import problem
from apps.api.filters import FilterBackend
from apps.api.input import reject_nul
from apps.api.permissions import OrganizationAction


class CleanInputMixin:
    """A NUL in a path value, query value or body string is a 400 before the view runs (after
    authentication, permissions and throttles, so an anonymous caller still gets a 401)."""

    def __init_subclass__(cls, **kwargs):
        """Every generic view (the lists) filters with the API's rules (apps.api.filters)."""
        super().__init_subclass__(**kwargs)
        if issubclass(cls, GenericAPIView) and "filter_backends" not in vars(cls):
            cls.filter_backends = [FilterBackend, OrderingFilter]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        reject_nul(request, kwargs)


class LoamAPIMixin(CleanInputMixin):
    permission_classes = [OrganizationAction]
    # Idempotency keys belong to the organization the call acts for ("user": to the caller).
    idempotency_scope = idempotency.ORGANIZATION

    def initial(self, request, *args, **kwargs):
        if idempotency.requested(request):
            request.body  # noqa: B018 -- kept for the key's body hash before anything parses it
        super().initial(request, *args, **kwargs)  # authentication, permissions, throttles
        self._idempotency = idempotency.begin(request, scope=self.idempotency_scope)

    def handle_exception(self, exc):
        if isinstance(exc, idempotency.Replay):
            return exc.response
        if isinstance(exc, idempotency.Conflict):
            return problem(
                status_code=409, code="idempotency_conflict", title="Conflict", detail=exc.detail
            )
        try:
            return super().handle_exception(exc)
        except Exception:  # unhandled: a 500 follows, and the key must not stay claimed
            idempotency.abandon(getattr(self, "_idempotency", None))
            raise

    def finalize_response(self, request, response, *args, **kwargs):
        try:
            response = super().finalize_response(request, response, *args, **kwargs)
        except Exception:
            idempotency.abandon(getattr(self, "_idempotency", None))
            raise
        idempotency.finish(getattr(self, "_idempotency", None), response)
        return response
