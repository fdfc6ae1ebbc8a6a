from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from apps.catalog.models import Region
from apps.core.web import back_to
from apps.operations.forms.filters import InstanceFilterForm, OrderFilterForm
from apps.operations.selectors import lists
from apps.operations.views._common import outcome_of, page_of, parks_of, posted_object
from apps.orders import services as order_services
from apps.orders.idle import force_release
from apps.orders.models import Instance, Order, OrderState
from apps.tenants.decorators import operator_view
from apps.tenants.selectors import get_for_operator, organizations_for_operator

ORDER_RELATED = ("organization__park", "instance__flavor", "instance__region", "decided_by")


@operator_view
def order_approvals(request):
    """Orders across the operator's parks, filterable; the approval queue unless the filter
    says otherwise. Waiting create orders are approved or rejected inline."""
    form = OrderFilterForm(request.GET, organizations=organizations_for_operator(request.user))
    page, query = page_of(request, lists.orders(parks_of(request), **form.values()))
    context = {"form": form, "page": page, "query": query}
    template = (
        "operations/partials/_order_rows.html"
        if request.htmx
        else "operations/order_approvals.html"
    )
    return render(request, template, context)


@operator_view
@require_POST
def order_decision(request, order_id):
    order = get_for_operator(
        Order.objects.select_related("organization__park", "instance"),
        request.user,
        park_field="organization__park",
        pk=order_id,
    )
    decision = request.POST.get("decision")
    if decision not in ("approve", "reject"):
        raise Http404
    with outcome_of() as outcome:
        if decision == "approve":
            order = order_services.approve_order(order=order, operator=request.user)
        else:
            order = order_services.reject_order(
                order=order, operator=request.user, reason=request.POST.get("reason", "")
            )
    # As it is now: with its after-commit work done (eager tasks), the host may be running.
    order = Order.objects.select_related(*ORDER_RELATED).get(pk=order.pk)
    if outcome.refused:
        notice = ("danger", outcome.error)
    elif order.state == OrderState.FAILED:
        notice = ("warning", order.reason)
    else:
        notice = (
            "success",
            _("Order #%(pk)s: %(state)s.") % {"pk": order.pk, "state": order.get_state_display()},
        )
    if request.htmx:
        context = {
            "order": order,
            "notice": notice,
            "next_url": back_to(request, reverse("operations:order_approvals")),
        }
        status = 422 if outcome.refused else 200
        return render(request, "operations/partials/_order_row.html", context, status=status)
    level = {"danger": messages.ERROR, "warning": messages.WARNING, "success": messages.SUCCESS}
    messages.add_message(request, level[notice[0]], notice[1])
    return redirect(back_to(request, "operations:order_approvals"))


def _instance_filters(request):
    return InstanceFilterForm(
        request.GET,
        organizations=organizations_for_operator(request.user),
        regions=Region.objects.filter(park__in=parks_of(request)).order_by("name"),
    )


@operator_view
def instance_list(request):
    """Instances across the operator's parks; POST action=release force-releases one."""
    if request.method == "POST":
        return _instance_action(request)
    form = _instance_filters(request)
    page, query = page_of(request, lists.instances(parks_of(request), **form.values()))
    context = {"form": form, "page": page, "query": query}
    template = (
        "operations/partials/_instance_rows.html"
        if request.htmx
        else "operations/instance_list.html"
    )
    return render(request, template, context)


def _instance_action(request):
    if request.POST.get("action") != "release":
        raise Http404
    instance = posted_object(
        request, Instance.objects.all(), field="instance", park_field="organization__park"
    )
    with outcome_of() as outcome:
        force_release(
            instance=instance, operator=request.user, reason=request.POST.get("reason", "")
        )
    if outcome.refused:
        notice = ("danger", outcome.error)
    else:
        notice = (
            "success",
            _("%(name)s is being released; its owners are told why.") % {"name": instance.name},
        )
    if request.htmx:
        row = lists.instances(parks_of(request)).get(pk=instance.pk)
        return render(
            request,
            "operations/partials/_instance_row.html",
            {"instance": row, "notice": notice},
            status=422 if outcome.refused else 200,
        )
    level = messages.ERROR if outcome.refused else messages.SUCCESS
    messages.add_message(request, level, notice[1])
    return redirect(back_to(request, "operations:instance_list"))
