"""Training task pages (the tenant's) and the scheduling pages of the back office (a park's
policy with its preview, one decision with every candidate)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as HttpPermissionDenied
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from apps.billing.selectors import task_cost_minor
from apps.core.web import refusals
from apps.orchestration import scheduling, selectors
from apps.orchestration.forms import FairShareForm, SchedulingPolicyForm, TaskForm
from apps.orchestration.models import SCORE_PART_LABELS, SCORE_PARTS, Placement, Task, minor_units
from apps.tenants.decorators import organization_view
from apps.tenants.roles import Action
from apps.tenants.selectors import get_for_organization, is_operator_of, operated_park

TASKS_PER_PAGE = 50
# The service's field names where the form asks in other units.
FORM_FIELDS = {"accelerator_milli": "accelerators", "max_hourly_minor": "max_hourly_price"}


@organization_view()
def task_list(request):
    page = Paginator(selectors.tasks_for(request.organization), TASKS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    tasks = list(page.object_list)
    positions = selectors.queue_positions_in(request.organization.park)
    for task in tasks:
        task.queue_position = positions.get(task.pk)
        task.cards = selectors.measure(selectors.cards(task))
    context = {
        "tasks": tasks,
        "page": page,
        "busy": any(t.state in selectors.BUSY_STATES for t in tasks),
        "currency": request.organization.park.currency,
    }
    template = (
        "orchestration/partials/_task_rows.html" if request.htmx else "orchestration/task_list.html"
    )
    return render(request, template, context)


@organization_view(Action.ORDER)
def task_create(request):
    form = TaskForm(request.POST or None, park=request.organization.park)
    if request.method == "POST" and form.is_valid():
        with refusals(request, form, field_names=FORM_FIELDS) as outcome:
            task = scheduling.submit_task(
                organization=request.organization, actor=request.user, data=form.task_data()
            )
        if not outcome.refused:
            messages.success(request, _("Submitted: the task is queued."))
            return redirect("tasks:task_detail", task_id=task.pk)
    return render(
        request,
        "orchestration/task_create.html",
        {"form": form},
        status=422 if form.errors else 200,
    )


@organization_view()
def task_detail(request, task_id):
    task = get_for_organization(
        selectors.task_with_details(
            Task.objects.select_related(
                "image", "accelerator_model", "pool__region", "pool__accelerator_model", "node"
            )
        ),
        request.organization,
        pk=task_id,
    )
    placement = selectors.task_placement(task)
    task.cards = selectors.measure(selectors.cards(task))
    capacity = selectors.pool_figures(task.pool) if task.pool_id else None
    context = {
        "task": task,
        "busy": task.state in selectors.BUSY_STATES,
        "queue_position": selectors.queue_positions_in(request.organization.park).get(task.pk),
        "blocked_reason": selectors.blocked_reason(task),
        "placement": placement,
        "units": selectors.measure(selectors.task_compute_units(task)),
        "capacity": capacity,
        "capacity_units": selectors.measure(capacity.units) if capacity else "",
        "capacity_free_units": selectors.measure(capacity.free_units) if capacity else "",
        "is_operator": is_operator_of(request.user, request.organization.park),
        "currency": request.organization.park.currency,
        "cost_minor": task_cost_minor(task),
        "ran_for": selectors.ran_for(task),
        "backend_state": selectors.backend_state_label(task),
        "preemptions": list(task.preemptions.all()),
    }
    if request.htmx:
        return render(request, "orchestration/partials/_task_status.html", context)
    return render(request, "orchestration/task_detail.html", context)


@organization_view(Action.ORDER)
@require_POST
def task_cancel(request, task_id):
    task = get_for_organization(Task, request.organization, pk=task_id)
    with refusals(request) as outcome:
        scheduling.cancel_task(task=task, actor=request.user)
    if not outcome.refused:
        messages.success(request, _("Task cancelled; what it held is free again."))
    return redirect("tasks:task_detail", task_id=task.pk)


# --- back office -----------------------------------------------------------------------------


@login_required
def scheduling_policy(request, park_id):
    park = operated_park(request.user, park_id)
    policy = selectors.policy_for(park)
    form = SchedulingPolicyForm(
        request.POST or None, initial=SchedulingPolicyForm.initial_for(policy)
    )
    preview = None
    if request.method == "POST" and form.is_valid():
        if request.POST.get("action") == "preview":
            preview = selectors.preview_policy(
                park,
                weights=form.weights(),
                operator_share=float(form.cleaned_data["operator_share"]),
            )
        else:
            try:
                with refusals(request, form, field_names=FORM_FIELDS) as outcome:
                    scheduling.set_scheduling_policy(
                        park=park,
                        operator=request.user,
                        operator_share=form.cleaned_data["operator_share"],
                        preemptible_discount_pct=form.cleaned_data["preemptible_discount_pct"],
                        **form.weights(),
                    )
            except HttpPermissionDenied as exc:  # not this park's operator: as if no such park
                raise Http404 from exc
            if not outcome.refused:
                messages.success(request, _("Scheduling policy saved."))
                return redirect("tasks_ops:scheduling_policy", park_id=park.pk)
    context = {
        "park": park,
        "policy": policy,
        "form": form,
        "preview": preview,
        "preview_changes": sum(1 for row in preview if row.changes) if preview else 0,
        **_shares_context(park, FairShareForm(park=park)),
    }
    if request.htmx and preview is not None:
        return render(request, "orchestration/partials/_policy_preview.html", context)
    return render(
        request,
        "orchestration/scheduling_policy.html",
        context,
        status=422 if form.errors else 200,
    )


@login_required
@require_POST
def fair_share(request, park_id):
    """An operator gives an organization of the park its fair share (from the policy page)."""
    park = operated_park(request.user, park_id)
    share_form = FairShareForm(request.POST, park=park)
    if share_form.is_valid():
        organization = share_form.cleaned_data["organization"]
        with refusals(request, share_form) as outcome:
            scheduling.set_fair_share(
                organization=organization,
                operator=request.user,
                shares=share_form.cleaned_data["shares"],
            )
        if not outcome.refused:
            messages.success(
                request,
                _("%(organization)s now has %(shares)d shares.")
                % {"organization": organization, "shares": share_form.cleaned_data["shares"]},
            )
            return redirect("tasks_ops:scheduling_policy", park_id=park.pk)
    policy = selectors.policy_for(park)
    context = {
        "park": park,
        "policy": policy,
        "form": SchedulingPolicyForm(initial=SchedulingPolicyForm.initial_for(policy)),
        "preview": None,
        **_shares_context(park, share_form),
    }
    return render(request, "orchestration/scheduling_policy.html", context, status=422)


def _shares_context(park, share_form) -> dict:
    return {"share_form": share_form, "shares": selectors.organization_shares(park)}


@login_required
def decision_detail(request, placement_id):
    try:
        placement = selectors.placements_for_operator(request.user).get(pk=placement_id)
    except (Placement.DoesNotExist, ValueError):
        raise Http404 from None
    weights = placement.weights.get("weights", {})
    feasible = sorted(placement.feasible_candidates(), key=lambda c: c["total"], reverse=True)
    context = {
        "placement": placement,
        "park": selectors.placement_park(placement),
        "parts": [SCORE_PART_LABELS[part] for part in SCORE_PARTS],
        "weights": [(SCORE_PART_LABELS[part], weights.get(part)) for part in SCORE_PARTS],
        "feasible": [
            {
                **candidate,
                "scores": [candidate["parts"].get(part) for part in SCORE_PARTS],
                "price": minor_units(candidate["raw"]["price_minor"])
                if candidate["raw"].get("price_minor")
                else None,
                "chosen": candidate["node_id"] == placement.chosen_node_id,
            }
            for candidate in feasible
        ],
        "rejected": placement.rejected_candidates(),
        "fitted_not_shown": placement.fitted_count() - len(feasible),
        "rejected_counts": placement.rejected_counts(),
    }
    return render(request, "orchestration/decision_detail.html", context)
