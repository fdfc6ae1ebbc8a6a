"""What every API view shares: organization-scoped permissions, idempotent POSTs, and problem+json
for refusals raised by the idempotency layer."""

from apps.api import idempotency
from apps.api.exceptions import problem
from apps.api.permissions import OrganizationAction


class LoamAPIMixin:
    permission_classes = [OrganizationAction]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication, permissions, throttles
        self._idempotency = idempotency.begin(request)

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
        response = super().finalize_response(request, response, *args, **kwargs)
        idempotency.finish(getattr(self, "_idempotency", None), response)
        return response
