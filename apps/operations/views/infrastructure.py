"""Backends, pools and nodes of one park, and its idle capacity."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.catalog.models import Region
from apps.core.money import to_major
from apps.core.web import refusals
from apps.operations.forms.filters import IdleFilterForm, NodeFilterForm
from apps.operations.forms.infrastructure import (
    BackendForm,
    IdlePolicyForm,
    PoolForm,
    RegionChoices,
)
from apps.operations.selectors import lists
from apps.operations.views._common import (
    outcome_of,
    page_of,
    posted_object,
)
from apps.orchestration import services as orchestration
from apps.orchestration.models import Backend, Node, Pool
from apps.orders.idle import (
    DEFAULT_THRESHOLD_MINUTES,
    idle_candidates,
    idle_policies,
    idle_rows,
    send_idle_notice,
    set_idle_policy,
)
from apps.orders.models import Instance
from apps.orders.selectors import DEFAULT_RELEASE_DAYS
from apps.tenants.decorators import operator_view
from apps.tenants.selectors import operated_park

POOLS_PER_PAGE = 20
IDLE_PER_PAGE = 50
# What a row of the idle page shows of a host: a page of hosts loads these columns alone.
IDLE_ROW_INSTANCES = Instance.objects.select_related("organization", "flavor", "node").only(
    "name", "organization__name", "flavor__code", "node__hostname"
)


def _regions(park):
    return Region.objects.filter(park=park).order_by("level", "name")


@operator_view
def backend_list(request, park_id):
    park = operated_park(request.user, park_id)
    form = BackendForm(
        request.POST if request.POST.get("action") == "register" else None,
        regions=_regions(park),
    )
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "probe":
            backend = posted_object(
                request, Backend.objects.all(), field="backend", park_field="park", park=park
            )
            with outcome_of() as outcome:
                backend = orchestration.probe_backend(backend=backend, operator=request.user)
            if outcome.refused:
                messages.error(request, outcome.error)
            elif backend.last_error:
                messages.warning(
                    request,
                    _("%(name)s answered with an error: %(error)s")
                    % {"name": backend.name, "error": backend.last_error},
                )
            else:
                messages.success(request, _("%(name)s answered.") % {"name": backend.name})
            return redirect("operations:backend_list", park_id=park.pk)
        if action != "register":
            raise Http404
        if form.is_valid():
            with refusals(request, form) as outcome:
                backend = orchestration.register_backend(
                    park=park, operator=request.user, **form.cleaned_data
                )
            if not outcome.refused:
                messages.success(request, _("%(name)s is registered.") % {"name": backend.name})
                return redirect("operations:backend_list", park_id=park.pk)
    context = {
        "park": park,
        "backends": lists.backends(park),
        "form": form,
        "config_examples": form.config_examples(),
    }
    return render(
        request, "operations/backend_list.html", context, status=422 if form.errors else 200
    )


@operator_view
def pool_list(request, park_id):
    park = operated_park(request.user, park_id)
    regions = RegionChoices(_regions(park))
    failed = None
    if request.method == "POST":
        if request.POST.get("action") != "update":
            raise Http404
        pool = posted_object(
            request, Pool.objects.all(), field="pool", park_field="backend__park", park=park
        )
        form = PoolForm(
            request.POST,
            regions=regions,
            currency=park.currency,
            auto_id=f"pool{pool.pk}_%s",
            html_form=f"pool-form-{pool.pk}",
        )
        if form.is_valid():
            changes = {k: v for k, v in form.cleaned_data.items() if k != "pool"}
            with refusals(request, form) as outcome:
                orchestration.update_pool(pool=pool, operator=request.user, **changes)
            if not outcome.refused:
                messages.success(request, _("%(name)s saved.") % {"name": pool.name})
                return redirect("operations:pool_list", park_id=park.pk)
        failed = (pool.pk, form)
    # A page of pools: each row is a form, and rendering 70 of them (issue 15's park) took seconds.
    page, query = page_of(request, lists.pools(park), per_page=POOLS_PER_PAGE)
    rows = []
    for pool in page.object_list:
        if failed and failed[0] == pool.pk:
            form = failed[1]
        else:
            form = PoolForm(
                initial={
                    "pool": pool.pk,
                    "region": pool.region_id,
                    "pue": pool.pue,
                    "power_price_per_kwh": to_major(pool.power_price_minor_per_kwh, park.currency),
                    "carbon_g_per_kwh": pool.carbon_g_per_kwh,
                    "is_schedulable": pool.is_schedulable,
                },
                regions=regions,
                currency=park.currency,
                auto_id=f"pool{pool.pk}_%s",
                html_form=f"pool-form-{pool.pk}",
            )
        rows.append((pool, form))
    context = {"park": park, "rows": rows, "page": page, "query": query}
    return render(request, "operations/pool_list.html", context, status=422 if failed else 200)


@operator_view
def node_list(request, park_id):
    park = operated_park(request.user, park_id)
    if request.method == "POST":
        return _node_action(request, park)
    pools = Pool.objects.filter(backend__park=park).select_related("region").order_by("name")
    form = NodeFilterForm(request.GET, pools=pools)
    # A page of PAGE_SIZE nodes: each row is a form, and 100 of them were most of the page's
    # time at 1,300 nodes (issue 37).
    page, query = page_of(request, lists.nodes(park, **form.values()))
    context = {"park": park, "form": form, "page": page, "query": query}
    template = (
        "operations/partials/_node_rows.html" if request.htmx else "operations/node_list.html"
    )
    return render(request, template, context)


def _node_action(request, park):
    action = request.POST.get("action")
    if action not in ("drain", "undrain"):
        raise Http404
    node = posted_object(
        request, Node.objects.all(), field="node", park_field="pool__backend__park", park=park
    )
    with outcome_of() as outcome:
        if action == "drain":
            node = orchestration.drain_node(
                node=node, operator=request.user, reason=request.POST.get("reason", "")[:1000]
            )
        else:
            node = orchestration.undrain_node(node=node, operator=request.user)
    if outcome.refused:
        notice = ("danger", outcome.error)
    elif node.is_drained:
        notice = ("success", _("%(node)s is drained: no new placements.") % {"node": node})
    else:
        notice = ("success", _("%(node)s takes placements again.") % {"node": node})
    if request.htmx:
        row = lists.nodes(park).get(pk=node.pk)
        return render(
            request,
            "operations/partials/_node_row.html",
            {"park": park, "node": row, "notice": notice},
            status=422 if outcome.refused else 200,
        )
    messages.add_message(
        request, messages.ERROR if outcome.refused else messages.SUCCESS, notice[1]
    )
    return redirect("operations:node_list", park_id=park.pk)


@operator_view
def idle_capacity(request, park_id):
    park = operated_park(request.user, park_id)
    policy = idle_policies([park]).get(park.pk)
    policy_form = IdlePolicyForm(
        request.POST if request.POST.get("action") == "policy" else None,
        initial={
            "threshold_minutes": policy.threshold_minutes if policy else DEFAULT_THRESHOLD_MINUTES,
            "auto_stop": policy.auto_stop if policy else False,
            "release_stopped_after_days": policy.release_stopped_after_days
            if policy
            else DEFAULT_RELEASE_DAYS,
        },
    )
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "notify":
            return _idle_notice(request, park)
        if action != "policy":
            raise Http404
        if policy_form.is_valid():
            with refusals(request, policy_form) as outcome:
                set_idle_policy(park=park, operator=request.user, **policy_form.cleaned_data)
            if not outcome.refused:
                messages.success(request, _("Idle policy saved."))
                return redirect("operations:idle_capacity", park_id=park.pk)
    filters = IdleFilterForm(request.GET)
    # Thousands of hosts may be idle: only the page's are loaded.
    page, query = page_of(request, idle_candidates([park], **filters.values()), IDLE_PER_PAGE)
    page.object_list = idle_rows(page.object_list, instances=IDLE_ROW_INSTANCES)
    context = {
        "park": park,
        "policy": policy,
        "policy_form": policy_form,
        "filters": filters,
        "rows": page.object_list,
        "page": page,
        "query": query,
        "threshold": policy.threshold_minutes if policy else DEFAULT_THRESHOLD_MINUTES,
    }
    status = 422 if policy_form.errors else 200
    return render(request, "operations/idle_capacity.html", context, status=status)


def _idle_notice(request, park):
    instance = posted_object(
        request,
        Instance.objects.all(),
        field="instance",
        park_field="organization__park",
        park=park,
    )
    with outcome_of() as outcome:
        send_idle_notice(instance=instance, operator=request.user)
    if outcome.refused:
        message = (messages.ERROR, outcome.error)
    else:
        message = (
            messages.SUCCESS,
            _("The owners of %(name)s are told it is idle.") % {"name": instance.name},
        )
    if request.htmx:
        return render(
            request,
            "operations/partials/_idle_notice.html",
            {"ok": not outcome.refused, "message": message[1]},
            status=422 if outcome.refused else 200,
        )
    messages.add_message(request, *message)
    return redirect("operations:idle_capacity", park_id=park.pk)
