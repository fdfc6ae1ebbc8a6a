from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string

from apps.catalog.forms import CatalogFilterForm
from apps.catalog.kept_reads import is_plain_visit, visitor_page
from apps.catalog.models import Flavor
from apps.catalog.selectors import (
    catalog_flavors,
    current_flavor_prices,
    offered_images,
    price_sheet,
    with_order_refusals,
)


def _park(request):
    """A tenant sees their park's catalog; a visitor sees every park's."""
    return request.organization.park if request.organization else None


def flavor_list(request):
    # A visitor's page is the same for every visitor at its address (bar the CSRF token): kept
    # whole. Unknown query parameters (ignored by the filters) would only add copies of it.
    if is_plain_visit(request) and request.GET.keys() <= CatalogFilterForm.base_fields.keys():
        return visitor_page(request, lambda extra: _flavor_list_html(request, extra))
    return HttpResponse(_flavor_list_html(request))


def _flavor_list_html(request, extra_context=None) -> str:
    park = _park(request)
    form = CatalogFilterForm(request.GET or None, park=park)
    cards = catalog_flavors(form.filters())
    if request.organization:
        cards = with_order_refusals(request.organization, cards)
    context = {"form": form, "cards": cards, **(extra_context or {})}
    template = "catalog/partials/_flavor_list.html" if request.htmx else "catalog/flavor_list.html"
    return render_to_string(template, context, request)


def flavor_detail(request, code):
    flavors = Flavor.objects.filter(is_active=True).select_related("family__accelerator_model")
    park = _park(request)
    if park is not None:
        flavors = flavors.filter(family__park=park)
    # Codes are unique within a park; a visitor (no park yet) sees the first park's.
    flavor = flavors.filter(code=code).order_by("family__park__name").first()
    if flavor is None:
        raise Http404
    prices = current_flavor_prices()
    context = {
        "flavor": flavor,
        "family": flavor.family.flavors.filter(is_active=True).order_by("accelerator_count"),
        "images": offered_images(flavor),
        "prices": sorted(prices.get(flavor.pk, []), key=lambda p: p.amount_minor),
    }
    return render(request, "catalog/flavor_detail.html", context)


def pricing(request):
    """The public price list: every flavor's hourly price in each region, disk and bandwidth a
    month; a tenant's park only."""
    return render(request, "catalog/pricing.html", {"sheets": price_sheet(_park(request))})
