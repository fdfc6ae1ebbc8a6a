"""What the back office's views share: the operator's parks, objects looked up only within
them (another park's object is a 404), pagination, and outcomes an HTMX row shows inline."""

from contextlib import contextmanager
from types import SimpleNamespace

from django.core.exceptions import PermissionDenied as HttpPermissionDenied
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404

from apps.core.errors import DomainError, PermissionDenied
from apps.core.numbers import parse_id
from apps.tenants.selectors import get_for_operator, parks_operated_by

PAGE_SIZE = 50


def posted_object(request, queryset, *, field: str, park_field: str, park=None):
    """The object named by POST[field], if it is in the operator's parks (and in `park`)."""
    pk = parse_id(request.POST.get(field, ""))
    if pk is None:
        raise Http404
    if park is not None:
        queryset = queryset.filter(**{park_field: park})
    return get_for_operator(queryset, request.user, park_field=park_field, pk=pk)


def page_of(request, rows, per_page: int = PAGE_SIZE):
    """(page, the query string without `page`) for the pagination links. A queryset's page is
    cut from its primary keys alone (sorted and counted without its joins), then only the
    page's rows are read whole: sorting a large park's thousands of joined rows to show 50 cost
    its lists most of their time (issue 37)."""
    if not isinstance(rows, QuerySet):
        page = Paginator(rows, per_page).get_page(request.GET.get("page"))
    else:
        page = Paginator(rows.values_list("pk", flat=True), per_page).get_page(
            request.GET.get("page")
        )
        keys = list(page.object_list)
        whole = {row.pk: row for row in rows.filter(pk__in=keys)} if keys else {}
        page.object_list = [whole[key] for key in keys if key in whole]
    query = request.GET.copy()
    query.pop("page", None)
    return page, query.urlencode()


@contextmanager
def outcome_of():
    """A service's refusal as `outcome.error` (a row shows it inline, a page as a message);
    a domain permission error is a 403."""
    outcome = SimpleNamespace(refused=False, error="")
    try:
        yield outcome
    except PermissionDenied as exc:
        raise HttpPermissionDenied(exc.message) from exc
    except ValidationError as exc:
        outcome.refused, outcome.error = True, " ".join(exc.messages)
    except DomainError as exc:
        outcome.refused, outcome.error = True, exc.message


def parks_of(request):
    return parks_operated_by(request.user)
