from django.shortcuts import render

from apps.quotas.selectors import quota_rows
from apps.tenants.decorators import organization_view


@organization_view()
def quota_overview(request):
    return render(request, "quotas/overview.html", {"rows": quota_rows(request.organization)})
