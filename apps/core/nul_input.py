"""Pages refuse a NUL character (U+0000) in the path, a query or a form value or name, with a
400, before any view reads it. PostgreSQL cannot hold NUL in text, so a lookup or a write with
one failed inside the database driver (a 500); forms refuse it already, but views also read
request.GET and request.POST directly. The API makes the same check its own way, answering
problem+json (apps.api.input)."""

from django.http import QueryDict
from django.shortcuts import render

NUL = "\x00"


def holds_nul(values: QueryDict) -> bool:
    return any(
        NUL in name or any(NUL in value for value in items) for name, items in values.lists()
    )


class RefuseNulInputMiddleware:
    """Last in MIDDLEWARE, so the refusal page renders with the user and organization known.
    The body of a view exempt from CSRF is left alone: such a view (a webhook) takes posts from
    machines and may read its raw body, which parsing the form first would use up."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path.startswith("/api/"):
            return None
        form = None if getattr(view_func, "csrf_exempt", False) else request.POST
        if NUL in request.path or holds_nul(request.GET) or (form and holds_nul(form)):
            return render(request, "400.html", status=400)
        return None
