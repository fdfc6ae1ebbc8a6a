from django.shortcuts import render

from apps.catalog.models import Vendor
from apps.catalog.selectors import catalog_flavors


def flavor_list(request):
    vendor = request.GET.get("vendor", "")
    if vendor not in Vendor.values:
        vendor = ""
    domestic_only = request.GET.get("domestic") == "1"
    context = {
        "cards": catalog_flavors(vendor=vendor, domestic_only=domestic_only),
        "vendors": Vendor.choices,
        "selected_vendor": vendor,
        "domestic_only": domestic_only,
    }
    template = "catalog/partials/_flavor_list.html" if request.htmx else "catalog/flavor_list.html"
    return render(request, template, context)
