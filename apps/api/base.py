"""What every API view shares: input no database can hold refused up front, query parameters
the route does not take refused, organization-scoped permissions, the API's list filters,
idempotent POSTs, and problem+json for refusals raised by the idempotency layer."""

from django.utils.translation import gettext as _
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.settings import api_settings

from apps.api import idempotency
from apps.api.exceptions import problem
from apps.api.filters import FilterBackend, OrderingFilter
from apps.api.input import reject_nul, shown
from apps.api.permissions import OrganizationAction
from apps.api.schema import AutoSchema


class CleanInputMixin:
    """Before the view runs (after authentication, permissions and throttles, so an anonymous
    caller still gets a 401), a 400 answers a NUL in a path value, query value or body string,
    and a query parameter the route does not take: ignored, a misspelt filter would answer the
    whole list, and the schema documents none."""

    # A route that answers pages of a list other than its `list` (an action's GET) says so:
    # `@action(..., pages=True)`. It takes the page parameters, and its filters if it has any.
    pages = False
    schema = AutoSchema()

    def __init_subclass__(cls, **kwargs):
        """Every generic view (the lists) filters with the API's rules (apps.api.filters)."""
        super().__init_subclass__(**kwargs)
        if issubclass(cls, GenericAPIView) and "filter_backends" not in vars(cls):
            cls.filter_backends = [FilterBackend, OrderingFilter]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        reject_nul(request, kwargs)
        if request.method not in self.allowed_methods:
            return  # a 405 follows, whatever the query
        unknown = set(request.query_params) - self.query_parameters()
        if unknown:
            message = _("This route takes no such query parameter.")
            raise ValidationError({shown(name): [message] for name in sorted(unknown)})

    def query_parameters(self) -> set[str]:
        """The query parameters this request may carry, the ones the schema documents for it:
        a list's filters, ordering and pages, and DRF's `format` (the browsable API's)."""
        names = {api_settings.URL_FORMAT_OVERRIDE}
        lists = getattr(self, "action", None) == "list" or self.pages
        if lists and self.request.method in ("GET", "HEAD"):
            for backend in self.filter_backends:
                names |= backend().query_parameters(self)
            if self.paginator is not None:
                names |= {p["name"] for p in self.paginator.get_schema_operation_parameters(self)}
        return names


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
