"""The catalog and pricing editor of one park: families and flavors, images, prices."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.catalog import services
from apps.catalog.models import Flavor, FlavorFamily, Image, Price, Region
from apps.core.web import refusals
from apps.operations.forms.catalog import FamilyForm, FlavorForm, ImageForm, PriceForm
from apps.operations.forms.filters import PriceFilterForm
from apps.operations.selectors import lists
from apps.operations.views._common import (
    outcome_of,
    page_of,
    posted_object,
)
from apps.tenants.decorators import operator_view
from apps.tenants.selectors import operated_park


def _posted(form_name, request):
    return request.POST if request.POST.get("action") == form_name else None


@operator_view
def catalog_flavors(request, park_id):
    park = operated_park(request.user, park_id)
    families = FlavorFamily.objects.filter(park=park).order_by("code")
    family_form = FamilyForm(_posted("create_family", request))
    flavor_form = FlavorForm(_posted("create_flavor", request), families=families)
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "toggle_flavor":
            return _toggle_flavor(request, park)
        if action == "create_family" and family_form.is_valid():
            with refusals(request, family_form) as outcome:
                services.create_family(park=park, operator=request.user, **family_form.cleaned_data)
            if not outcome.refused:
                messages.success(request, _("Family created."))
                return redirect("operations:catalog_flavors", park_id=park.pk)
        elif action == "create_flavor" and flavor_form.is_valid():
            with refusals(request, flavor_form) as outcome:
                services.create_flavor(operator=request.user, **flavor_form.cleaned_data)
            if not outcome.refused:
                messages.success(request, _("Flavor created."))
                return redirect("operations:catalog_flavors", park_id=park.pk)
        elif action not in ("create_family", "create_flavor"):
            raise Http404
    context = {
        "park": park,
        "families": lists.families(park),
        "family_form": family_form,
        "flavor_form": flavor_form,
    }
    status = 422 if family_form.errors or flavor_form.errors else 200
    return render(request, "operations/catalog_flavors.html", context, status=status)


def _toggle_flavor(request, park):
    flavor = posted_object(
        request, Flavor.objects.all(), field="flavor", park_field="family__park", park=park
    )
    with outcome_of() as outcome:
        flavor = services.set_flavor_on_sale(
            flavor=flavor, operator=request.user, on_sale=request.POST.get("on_sale") == "1"
        )
    if request.htmx:
        context = {"park": park, "flavor": flavor, "notice": outcome.error}
        return render(
            request,
            "operations/partials/_flavor_row.html",
            context,
            status=422 if outcome.refused else 200,
        )
    if outcome.refused:
        messages.error(request, outcome.error)
    return redirect("operations:catalog_flavors", park_id=park.pk)


@operator_view
def catalog_images(request, park_id):
    park = operated_park(request.user, park_id)
    form = ImageForm(_posted("create_image", request))
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "toggle_image":
            image = posted_object(
                request, Image.objects.all(), field="image", park_field="park", park=park
            )
            with outcome_of() as outcome:
                services.set_image_available(
                    image=image,
                    operator=request.user,
                    available=request.POST.get("available") == "1",
                )
            if outcome.refused:
                messages.error(request, outcome.error)
            return redirect("operations:catalog_images", park_id=park.pk)
        if action != "create_image":
            raise Http404
        if form.is_valid():
            with refusals(request, form) as outcome:
                services.create_image(park=park, operator=request.user, **form.cleaned_data)
            if not outcome.refused:
                messages.success(request, _("Image added."))
                return redirect("operations:catalog_images", park_id=park.pk)
    context = {"park": park, "images": lists.images(park), "form": form}
    return render(
        request, "operations/catalog_images.html", context, status=422 if form.errors else 200
    )


@operator_view
def catalog_prices(request, park_id):
    park = operated_park(request.user, park_id)
    regions = Region.objects.filter(park=park).order_by("level", "name")
    flavors = Flavor.objects.filter(family__park=park).order_by("family__code", "accelerator_count")
    form = PriceForm(_posted("schedule", request), regions=regions, flavors=flavors)
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "withdraw":
            price = posted_object(
                request, Price.objects.all(), field="price", park_field="region__park", park=park
            )
            with outcome_of() as outcome:
                services.withdraw_price(price=price, operator=request.user)
            if outcome.refused:
                messages.error(request, outcome.error)
            else:
                messages.success(request, _("Scheduled price withdrawn."))
            return redirect("operations:catalog_prices", park_id=park.pk)
        if action != "schedule":
            raise Http404
        if form.is_valid():
            data = form.cleaned_data
            with refusals(request, form) as outcome:
                services.schedule_price(
                    region=data["region"],
                    operator=request.user,
                    kind=data["kind"],
                    flavor=data["flavor"],
                    amount_minor=form.amount_minor,
                    effective_from=data["effective_from"],
                )
            if not outcome.refused:
                messages.success(request, _("Price scheduled."))
                return redirect("operations:catalog_prices", park_id=park.pk)
    filters = PriceFilterForm(request.GET, regions=regions)
    page, query = page_of(request, lists.prices(park, **filters.values()))
    context = {"park": park, "form": form, "filters": filters, "page": page, "query": query}
    if request.htmx and request.method == "GET":
        return render(request, "operations/partials/_price_rows.html", context)
    return render(
        request, "operations/catalog_prices.html", context, status=422 if form.errors else 200
    )
