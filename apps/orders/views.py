from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from apps.billing.selectors import instance_cost, wallet_for
from apps.billing.services import funds_needed
from apps.catalog.models import Flavor
from apps.core.errors import DomainError
from apps.core.numbers import parse_id
from apps.core.web import back_to, refusals
from apps.orders import expiry, monitoring, operations, services
from apps.orders.forms import (
    BandwidthForm,
    DataDiskForm,
    DiskForm,
    HostListFilterForm,
    InstanceOrderForm,
    OperationKeyForm,
    ReleaseForm,
    ResizeForm,
    StartForm,
    StopScheduleForm,
)
from apps.orders.models import (
    INSTANCE_BUSY_STATES,
    Instance,
    InstanceState,
    Order,
    OrderKind,
    OrderState,
)
from apps.orders.network_views import network_context
from apps.orders.selectors import (
    instance_orders,
    instances_for,
    orders_for,
    pending_orders,
    release_date_of,
)
from apps.orders.volumes import keep_data_disk
from apps.orders.without_cards import no_card_price
from apps.quotas.selectors import quota_rows
from apps.storage.selectors import data_disk_of
from apps.tenants.decorators import organization_view
from apps.tenants.roles import Action, can
from apps.tenants.selectors import for_organization, get_for_organization

INSTANCES_PER_PAGE = 50
ORDERS_PER_PAGE = 50


def _order_form(request, data=None):
    """The order form; `?flavor=<code>` picks the size, `?again=<instance>` fills it in like
    that host of the organization (after a failed create)."""
    park = request.organization.park
    flavor = Flavor.objects.filter(
        code=request.GET.get("flavor", ""), is_active=True, family__park=park
    ).first()
    initial = {}
    again = parse_id(request.GET.get("again", ""))
    previous = (
        None
        if again is None
        else for_organization(Instance, request.organization).filter(pk=again).first()
    )
    if previous is not None:
        flavor = flavor or previous.flavor
        initial = {
            "image": previous.image.code,
            "system_disk_gb": previous.system_disk_gb,
            "data_disk_gb": previous.data_disk_gb,
            "bandwidth_mbps": previous.bandwidth_mbps,
            "ssh_public_key": previous.ssh_public_key,
            "name": previous.name,
            "security_group": previous.security_group_id,
        }
    return InstanceOrderForm(
        data, park=park, flavor=flavor, initial=initial, organization=request.organization
    )


@organization_view(Action.ORDER)
def instance_create(request):
    form = _order_form(request, request.POST or None)
    if request.method == "POST" and form.is_valid():
        with refusals(request, form) as outcome:
            orders = services.submit_create(
                organization=request.organization,
                actor=request.user,
                request=form.host_request(),
                idempotency_key=form.cleaned_data["idempotency_key"],
            )
        if not outcome.refused:
            if any(o.state == OrderState.AWAITING_APPROVAL for o in orders):
                messages.info(
                    request, _("Submitted: waiting for the park's operators to review it.")
                )
            else:
                messages.success(request, _("Ordered: your host is being created."))
            if len(orders) == 1:
                return redirect("orders:instance_detail", instance_id=orders[0].instance_id)
            return redirect("orders:instance_list")
    template = "orders/partials/_order_form.html" if request.htmx else "orders/instance_create.html"
    return render(request, template, {"form": form}, status=422 if form.errors else 200)


@organization_view(Action.ORDER)
@require_POST
def instance_quote(request):
    """The live quote beside the order form (HTMX), from the moment a flavor is chosen: what it
    costs (compute, disk, bandwidth) and where it runs, what the wallet and the quotas have
    left, and what still has to be filled in before ordering."""
    organization = request.organization
    form = _order_form(request, request.POST)
    priced = form.priced_request()
    context = {
        "form": form,
        "problems": [],
        "wallet": wallet_for(organization),
        "show_balance": can(request.membership.role, Action.VIEW_BILLING),
        "quotas": quota_rows(organization),
    }
    if priced is not None:
        try:
            quoted = services.quote(organization=organization, request=priced)
        except DomainError as exc:
            context["problems"].append(exc.message)
        else:
            wallet = context["wallet"]
            context["quote"] = quoted
            warning = services.quota_warning(
                organization=organization, request=priced, quoted=quoted
            )
            if warning:
                context["problems"].append(warning)
            # The same rule ordering applies (billing.require_funds).
            context["short"] = wallet is None or wallet.available_minor < funds_needed(
                quoted.hold_minor
            )
    if form.is_valid():
        try:
            services.validate_host_request(organization, form.host_request())
        except ValidationError as exc:
            context["problems"] += exc.messages
    else:
        context["problems"] += [
            f"{form.fields[name].label}: {errors[0]}" if name in form.fields else errors[0]
            for name, errors in form.errors.items()
        ]
    return render(request, "orders/partials/_quote.html", context)


@organization_view()
def instance_list(request):
    filters = HostListFilterForm(request.GET, park=request.organization.park)
    hosts = instances_for(request.organization, **filters.values())
    page = Paginator(hosts, INSTANCES_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "filters": filters,
        "query": query.urlencode(),
        "instances": page.object_list,
        "page": page,
        "busy": any(i.state in INSTANCE_BUSY_STATES for i in page.object_list),
        # A row's stop, start and release come back to this page, filtered as it is.
        "here": request.get_full_path(),
        "row_action_states": operations.OPERATIONS[OrderKind.RELEASE].allowed_from,
    }
    template = (
        "orders/partials/_instance_rows.html" if request.htmx else "orders/instance_list.html"
    )
    return render(request, template, context)


@organization_view()
def instance_detail(request, instance_id):
    instance = get_for_organization(
        Instance.objects.select_related(
            "flavor__family__accelerator_model",
            "image",
            "region",
            "node",
            "pool__backend",
            "security_group",
        ),
        request.organization,
        pk=instance_id,
    )
    orders = instance_orders(instance)
    working, awaiting_approval = pending_orders(orders)
    context = {
        "instance": instance,
        "busy": instance.state in INSTANCE_BUSY_STATES or working is not None,
        "working": working,
        "awaiting_approval": awaiting_approval,
        "cost": instance_cost(instance),
        # It never ran: the backend refused or failed to create it (a handle comes with a host).
        "failed_create": instance.state == InstanceState.ERROR and not instance.backend_handle,
        "orders": orders,
        "resize_form": ResizeForm(instance=instance),
        "disk_form": DiskForm(initial={"data_disk_gb": instance.data_disk_gb + 100}),
        # Its data disk where it is a cloud disk (its server keeps volumes).
        "data_disk": data_disk_of(instance.workload_id),
        "bandwidth_form": BandwidthForm(initial={"bandwidth_mbps": instance.bandwidth_mbps}),
        "network": network_context(request, instance),
        "schedule": _schedule_context(instance),
        "release_at": release_date_of(instance),
        # What it would pay an hour without its cards (无卡模式), where its region sets a price.
        "no_card_price": no_card_price(instance),
        "monitoring": {
            "url": reverse("orders:instance_monitoring", kwargs={"instance_id": instance.pk}),
            "ranges": list(monitoring.RANGES.values()),
            "default_range": monitoring.DEFAULT_RANGE,
        },
    }
    if request.htmx:
        return render(request, "orders/partials/_instance_status.html", context)
    return render(request, "orders/instance_detail.html", context)


@organization_view(Action.RELEASE)
@require_POST
def instance_data_disk(request, instance_id):
    """Whether the host's data disk is kept as a cloud disk when the host is released."""
    instance = get_for_organization(Instance, request.organization, pk=instance_id)
    form = DataDiskForm(request.POST)
    if not form.is_valid():
        messages.error(request, form.errors["keep_on_release"][0])
    else:
        keep = form.cleaned_data["keep_on_release"]
        with refusals(request) as outcome:
            keep_data_disk(instance=instance, actor=request.user, keep=keep)
        if not outcome.refused:
            messages.success(
                request,
                _("Its data disk will be kept as a cloud disk when the host is released.")
                if keep
                else _("Its data disk will be deleted when the host is released."),
            )
    return redirect("orders:instance_detail", instance_id=instance.pk)


@organization_view()
@require_GET
def instance_monitoring(request, instance_id):
    """The host's monitoring charts over `?range=` (1h, 24h or 7d; 1h by default) as JSON: a
    point per bucket, averaged in the database. Another organization's host is a 404; an
    unknown range a 400 that names the ones there are."""
    instance = get_for_organization(
        Instance.objects.select_related("pool__backend"), request.organization, pk=instance_id
    )
    try:
        chart = monitoring.chart_range(request.GET.get("range"))
    except monitoring.UnknownRange as exc:
        return JsonResponse(
            {"error": exc.code, "detail": exc.message, "ranges": list(monitoring.RANGES)},
            status=exc.status,
        )
    response = JsonResponse(monitoring.monitoring(instance, chart=chart))
    response["Cache-Control"] = "no-store"
    return response


SCHEDULE_PARTIAL = "orders/partials/_instance_stop_schedule.html"


def _schedule_context(instance: Instance, form=None) -> dict:
    return {
        "instance": instance,
        "form": form or StopScheduleForm(),
        "can_schedule": instance.state in expiry.SCHEDULABLE_STATES,
    }


@organization_view(Action.ORDER)
@require_POST
def instance_stop_schedule(request, instance_id):
    """Set (a time, or hours from now) or clear the host's scheduled stop: the section again
    (HTMX; 422 when refused), or back to the page with the outcome as a message."""
    instance = get_for_organization(Instance, request.organization, pk=instance_id)
    form = StopScheduleForm(request.POST)
    refused = True
    if form.is_valid():
        with refusals(request, form) as outcome:
            instance = expiry.schedule_stop(
                instance=instance, actor=request.user, **form.cleaned_data
            )
        refused = outcome.refused
        if not refused:
            form = None
    if request.htmx:
        context = {"schedule": _schedule_context(instance, form)}
        return render(request, SCHEDULE_PARTIAL, context, status=422 if refused else 200)
    if refused:
        for errors in form.errors.values():
            messages.error(request, errors[0])
    elif instance.stop_at is None:
        messages.success(request, _("Scheduled stop cleared."))
    else:
        messages.success(request, _("Stop scheduled."))
    return redirect("orders:instance_detail", instance_id=instance.pk)


OPERATION_FORMS = {
    OrderKind.START: StartForm,
    OrderKind.RESIZE: ResizeForm,
    OrderKind.EXPAND_DISK: DiskForm,
    OrderKind.RELEASE: ReleaseForm,
    OrderKind.SET_BANDWIDTH: BandwidthForm,
}


@organization_view()
@require_POST
def instance_operation(request, instance_id, kind):
    if kind not in operations.OPERATIONS:
        raise Http404
    instance = get_for_organization(Instance, request.organization, pk=instance_id)
    params = {}
    key_form = OperationKeyForm(request.POST)
    form_class = OPERATION_FORMS.get(kind)
    form = None
    if form_class is not None:
        form = (
            form_class(request.POST, instance=instance)
            if form_class is ResizeForm
            else form_class(request.POST)
        )
    invalid = [f for f in (key_form, form) if f is not None and not f.is_valid()]
    if invalid:
        for errors in (e for f in invalid for e in f.errors.values()):
            messages.error(request, errors[0])
        return redirect("orders:instance_detail", instance_id=instance.pk)
    if form is not None:
        params = form.cleaned_data
    with refusals(request) as outcome:
        operations.request_operation(
            instance=instance,
            actor=request.user,
            kind=kind,
            params=params,
            idempotency_key=key_form.cleaned_data["idempotency_key"],
        )
    if not outcome.refused:
        messages.success(
            request, _("%(operation)s requested.") % {"operation": OrderKind(kind).label}
        )
    return redirect(back_to(request, reverse("orders:instance_detail", args=[instance.pk])))


@organization_view()
def order_list(request):
    page = Paginator(orders_for(request.organization), ORDERS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    context = {"orders": page.object_list, "page": page, "query": ""}
    return render(request, "orders/order_list.html", context)


@organization_view(Action.ORDER)
@require_POST
def order_cancel(request, order_id):
    order = get_for_organization(Order, request.organization, pk=order_id)
    with refusals(request) as outcome:
        services.cancel_order(order=order, actor=request.user)
    if not outcome.refused:
        messages.success(request, _("Order cancelled; its quota is free again."))
    return redirect("orders:order_list")
