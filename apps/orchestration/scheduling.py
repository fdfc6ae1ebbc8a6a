"""Training tasks and the park's scheduling policy: one function per use case.

A task is submitted queued (`submit_task`); a queue pass (`schedule_queue_pass`, after every
submit and finish, and on every beat of `apps.orchestration.tasks.schedule_queues`) asks the
placement engine's `schedule_queue` what to start — priority, fair share by each
organization's recent accelerator-seconds, backfill behind a blocked head — and for each task
it starts: reserves quota, allocates under the node's row lock (whole cards, or a share of one
card), keeps the decision as a Placement, fixes the price (`Task.hourly_minor`) and moves it
queued → placed; after commit `run_task` hands it to the backend (placed → running) and the
backend's report ends it (`finish_task`: succeeded or failed, logs kept, capacity given back).

Lock order, the same everywhere so two of these never wait on each other: queued task rows,
then the organization (quota), then the node. Cancelling and finishing lock the task, then
the node; orders lock the organization, then the node.
"""

import math
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.core.audit import audit_identity, record_event
from apps.core.money import format_money
from apps.core.transactions import lock, on_commit_task
from apps.core.transitions import transition
from apps.orchestration import adapter, selectors
from apps.orchestration.backends.base import TASK_PENDING, Capability
from apps.orchestration.meters import follow_task
from apps.orchestration.models import (
    REJECTION_REASONS,
    TASK_TRANSITIONS,
    Accelerator,
    Allocation,
    Node,
    NodeHealth,
    Placement,
    SchedulingPolicy,
    Task,
    TaskPreference,
    TaskState,
)
from apps.orchestration.scheduler import PRESETS, filters, schedule_queue
from apps.orchestration.selectors import with_free_capacity
from apps.quotas.services import QuotaExceeded, Usage, reserve
from apps.tenants.access import SystemActor, authorize, require_operator
from apps.tenants.roles import Action

MAX_ACCELERATOR_MILLI = 8000
MAX_VCPU = 256
MAX_RAM_GB = 2048
MAX_COMMAND_CHARS = 10_000
MAX_NAME_CHARS = 80
MAX_LOG_CHARS = 64_000
# Tenants may lower a task's priority (let others go first), never raise it: classes are
# served strictly in order, so a raise is the park's to give.
MIN_PRIORITY, MAX_PRIORITY = -10, 0
SCHEDULER = SystemActor("scheduler")


# --- submitting ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskInput:
    """A training task as the form or the API gives it (cleaned data, model instances)."""

    image: object
    command: str
    name: str = "task"
    accelerator_model: object = None  # None: any model the image runs on
    accelerator_milli: int = 1000
    vcpu: int = 8
    ram_gb: int = 32
    max_hourly_minor: int | None = None
    deadline: object = None
    allowed_regions: tuple = ()
    preference: str = TaskPreference.BALANCED
    priority: int = 0

    @classmethod
    def from_data(cls, data) -> "TaskInput":
        values = {k: data[k] for k in cls.__dataclass_fields__ if data.get(k) is not None}
        values["allowed_regions"] = tuple(data.get("allowed_regions") or ())
        return cls(**values)


def validate_task(organization, task: TaskInput, *, now=None) -> None:
    """Every refusal names its field (a ValidationError with a dict)."""
    now = now or timezone.now()
    park = organization.park
    errors = {}
    if not (task.name or "").strip():
        errors["name"] = _("Give the task a name.")
    elif len(task.name) > MAX_NAME_CHARS:
        errors["name"] = _("Keep the name to %(max)d characters.") % {"max": MAX_NAME_CHARS}
    if not (task.command or "").strip():
        errors["command"] = _("Say what to run, e.g. python train.py.")
    elif len(task.command) > MAX_COMMAND_CHARS:
        errors["command"] = _("Keep the command to %(max)d characters.") % {
            "max": MAX_COMMAND_CHARS
        }
    image, model = task.image, task.accelerator_model
    if image is None or not image.is_active or image.park_id != park.pk:
        errors["image"] = _("This image is not available in your park.")
    elif model is not None and not image.compatible_accelerators.filter(pk=model.pk).exists():
        errors["image"] = _(
            "%(image)s (%(stack)s) does not run on %(model)s; choose an image for its software "
            "stack or another accelerator model."
        ) % {"image": image.name, "stack": image.get_software_stack_display(), "model": model}
    elif model is None and not image.compatible_accelerators.exists():
        errors["image"] = _("%(image)s runs on no accelerator model.") % {"image": image.name}
    milli = task.accelerator_milli
    if not (
        isinstance(milli, int)
        and (0 < milli < 1000 or (milli % 1000 == 0 and 0 < milli <= MAX_ACCELERATOR_MILLI))
    ):
        errors["accelerator_milli"] = _(
            "Ask for a share of one accelerator (1–999 thousandths) or whole accelerators "
            "(1000, 2000, … up to %(max)d)."
        ) % {"max": MAX_ACCELERATOR_MILLI}
    if not 1 <= task.vcpu <= MAX_VCPU:
        errors["vcpu"] = _("Ask for 1–%(max)d vCPU.") % {"max": MAX_VCPU}
    if not 1 <= task.ram_gb <= MAX_RAM_GB:
        errors["ram_gb"] = _("Ask for 1–%(max)d GB of RAM.") % {"max": MAX_RAM_GB}
    if task.max_hourly_minor is not None and task.max_hourly_minor < 0:
        errors["max_hourly_minor"] = _("The maximum price cannot be negative.")
    if task.deadline is not None and task.deadline <= now:
        errors["deadline"] = _("The deadline must be in the future.")
    foreign = [r for r in task.allowed_regions if r.park_id != park.pk]
    if foreign:
        errors["allowed_regions"] = _("These regions are not in your park: %(regions)s.") % {
            "regions": ", ".join(r.name for r in foreign)
        }
    if task.preference not in TaskPreference.values or task.preference not in PRESETS:
        errors["preference"] = _("Choose balanced, fast, cheap or green.")
    if not MIN_PRIORITY <= task.priority <= MAX_PRIORITY:
        errors["priority"] = _(
            "Priority is %(low)d (lowest) to %(high)d (normal); only the park's operators "
            "raise a task above normal."
        ) % {"low": MIN_PRIORITY, "high": MAX_PRIORITY}
    if not errors:
        errors = _capacity_problems(park, task)
    if errors:
        raise ValidationError(errors)


def _capacity_problems(park, task: TaskInput) -> dict:
    """Refuse what could never start in this park: no pool of a fitting model in the allowed
    regions, no host large enough even when empty, nothing priced, or nothing under the
    task's maximum price."""
    models = (
        {task.accelerator_model.pk}
        if task.accelerator_model
        else set(task.image.compatible_accelerators.values_list("pk", flat=True))
    )
    regions = {r.pk for r in task.allowed_regions}
    pools = [
        p
        for p in selectors.schedulable_park_pools(park, capability=Capability.BATCH)
        if p.accelerator_model_id in models and (not regions or p.region_id in regions)
    ]
    if not pools:
        field_name = "allowed_regions" if regions else "accelerator_model"
        return {
            field_name: _("No pool of the park has accelerators this image runs on%(where)s.")
            % {"where": _(" in the chosen regions") if regions else ""}
        }
    cards = max(1, task.accelerator_milli // 1000)
    large_enough = set(
        Node.objects.filter(
            pool__in=pools, vcpu_total__gte=task.vcpu, ram_gb_total__gte=task.ram_gb
        )
        .exclude(health=NodeHealth.DOWN)
        .annotate(cards=Count("accelerators"))
        .filter(cards__gte=cards)
        .values_list("pool_id", flat=True)
    )
    if not large_enough:
        return {
            "accelerator_milli": _(
                "No host of the park is large enough for %(cards)d accelerators, %(vcpu)d vCPU "
                "and %(ram)d GB of RAM on one node; ask for less."
            )
            % {"cards": cards, "vcpu": task.vcpu, "ram": task.ram_gb}
        }
    pools = [p for p in pools if p.pk in large_enough]
    prices = adapter.task_prices(pools)
    hourly = [
        adapter.task_hourly_minor(prices[p.pk], task.accelerator_milli)
        for p in pools
        if prices[p.pk] is not None
    ]
    if not hourly:
        return {"accelerator_model": _("The pools that could run it are not priced yet.")}
    if task.max_hourly_minor is not None and min(hourly) > task.max_hourly_minor:
        return {
            "max_hourly_minor": _(
                "The cheapest pool that could run it costs %(price)s per hour, above your "
                "maximum of %(max)s."
            )
            % {
                "price": format_money(min(hourly), park.currency),
                "max": format_money(task.max_hourly_minor, park.currency),
            }
        }
    return {}


@transaction.atomic
def move_task(*, task: Task, to: str, actor=None, at=None) -> Task:
    """Move a training task; `at` is when it really started or ended, where the backend's own
    accounting says (its meter follows that moment), else now."""
    now = at or timezone.now()

    def timestamps(locked: Task) -> dict:
        if to == TaskState.RUNNING:
            return {"started_at": now}
        if to in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED):
            # A task cancelled before it ran still gets a start, so its duration is zero.
            return {"finished_at": now, "started_at": locked.started_at or now}
        return {}

    task = transition(task, to, table=TASK_TRANSITIONS, actor=actor, changes=timestamps)
    follow_task(task, at=now)
    return task


@transaction.atomic(durable=True)
def submit_task(*, organization, actor, data) -> Task:
    """Queue a training task; a queue pass runs after commit and places it if it fits now."""
    authorize(actor, organization, Action.ORDER)
    task_input = data if isinstance(data, TaskInput) else TaskInput.from_data(data)
    validate_task(organization, task_input)
    task = Task.objects.create(
        organization=organization,
        name=task_input.name.strip(),
        image=task_input.image,
        command=task_input.command.strip(),
        accelerator_model=task_input.accelerator_model,
        accelerator_milli=task_input.accelerator_milli,
        vcpu=task_input.vcpu,
        ram_gb=task_input.ram_gb,
        max_hourly_minor=task_input.max_hourly_minor,
        deadline=task_input.deadline,
        preference=task_input.preference,
        priority=task_input.priority,
        created_by=audit_identity(actor)[0],
    )
    task.allowed_regions.set(task_input.allowed_regions)
    record_event(
        action="task.submitted",
        actor=actor,
        target=task,
        data={
            "accelerator_milli": task.accelerator_milli,
            "accelerator_model": getattr(task.accelerator_model, "slug", None),
            "regions": [r.code for r in task_input.allowed_regions],
            "preference": task.preference,
        },
    )
    _schedule_pass_after_commit(organization.park_id)
    return task


# --- cancelling ------------------------------------------------------------------------------


@transaction.atomic(durable=True)
def cancel_task(*, task, actor) -> Task:
    """Cancel a queued, placed or running task; what it held goes back at once (and the
    backend is told after commit). A finished task cannot be cancelled (409)."""
    from apps.orchestration.tasks import cancel_backend_task

    authorize(actor, task.organization, Action.ORDER)
    was = Task.objects.select_for_update(no_key=True).get(pk=task.pk).state
    task = move_task(task=task, to=TaskState.CANCELLED, actor=actor)
    if release_task_capacity(task):
        _schedule_pass_after_commit(task.organization.park_id)
    if was == TaskState.RUNNING and task.backend_handle:
        on_commit_task(cancel_backend_task, task.pk)
    return task


# --- the queue pass --------------------------------------------------------------------------


@dataclass
class QueuePass:
    """What one pass did, by task id."""

    placed: list[int] = field(default_factory=list)
    backfilled: list[int] = field(default_factory=list)  # placed past a blocked head
    reserved: dict[int, int] = field(default_factory=dict)  # blocked head -> node held for it
    waiting: list[int] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)  # deadline passed: failed
    held_back: dict[int, str] = field(default_factory=dict)  # started by the plan, not placed


@transaction.atomic(durable=True)
def schedule_queue_pass(*, park, now=None) -> QueuePass:
    """Place what the park's queue can start now (see the module docstring)."""

    now = now or timezone.now()
    result = QueuePass()
    # The queued rows are the queue's lock: a second pass waits here and then finds them placed.
    queued = list(
        Task.objects.select_for_update(no_key=True, of=("self",))
        .filter(organization__park=park, state=TaskState.QUEUED)
        .order_by("pk")
        .values_list("pk", "deadline")
    )
    live = []
    for task_id, deadline in queued:
        if deadline is not None and deadline <= now:
            task = Task.objects.get(pk=task_id)
            _append_logs(
                task,
                _("The deadline (%(deadline)s) passed before a host was free; it did not run.")
                % {"deadline": timezone.localtime(deadline).strftime("%Y-%m-%d %H:%M %Z")},
            )
            move_task(task=task, to=TaskState.FAILED, actor=SCHEDULER)
            result.expired.append(task_id)
        else:
            live.append(task_id)
    if not live:
        return result
    tasks = {
        t.pk: t
        for t in Task.objects.filter(pk__in=live)
        .select_related("image", "accelerator_model", "organization__park")
        .prefetch_related("allowed_regions", "image__compatible_accelerators")
    }
    batch_nodes = selectors.schedulable_nodes(park=park, capability=Capability.BATCH)
    nodes = list(with_free_capacity(batch_nodes).order_by("pk"))
    pools = list({node.pool_id: node.pool for node in nodes}.values())
    prices = adapter.task_prices(pools, at=now)
    views = adapter.node_views(nodes, prices=prices)
    view_of = {view.state.id: view for view in views}
    zoned = []
    for view in views:
        state = view.state.copy()
        state.region = adapter.zone(view.pool)
        zoned.append(state)
    slugs = {p.accelerator_model_id: p.accelerator_model.slug for p in pools}
    requests, refusals = {}, {}
    for task in tasks.values():
        model_ids = adapter.task_model_ids(task)
        refused = adapter.task_pool_rejections(task, pools, prices, model_ids=model_ids)
        refusals[task.pk] = {
            view.state.id: refused[view.pool.pk] for view in views if view.pool.pk in refused
        }
        requests[task.pk] = adapter.task_request(
            task,
            model_slugs={slugs[m] for m in model_ids if m in slugs},
            zones={adapter.zone(p) for p in pools if p.pk not in refused},
        )
    weights = adapter.park_weights(park)
    plan = schedule_queue(
        list(requests.values()),
        zoned,
        selectors.recent_usage(park, now=now),
        operator=weights.weights,
        operator_share=weights.operator_share,
        distribution=adapter.BEST_FIT,
    )
    for request, decision in plan.started:
        task = tasks[int(request.id)]
        view = view_of[decision.node.id]
        record = adapter.placement_record(
            decision,
            views,
            request=request,
            park=weights,
            currency=park.currency,
            rejections=refusals[task.pk],
        )
        why_not = _place_task(task, view, record)
        if why_not:
            result.held_back[task.pk] = why_not
            continue
        result.placed.append(task.pk)
        if request.id in plan.backfilled:
            result.backfilled.append(task.pk)
    result.reserved = {int(t): int(n) for t, n in plan.reserved.items()}
    result.waiting = [int(r.id) for r in plan.waiting] + list(result.held_back)
    for task_id in plan.impossible:
        result.waiting.append(int(task_id))
        codes = set()
        for state in zoned:
            code = filters.check(requests[int(task_id)], state)
            if code in adapter.ZONE_CODES:
                code = refusals[int(task_id)].get(state.id, code)
            codes.add(code or "gpu_count")
        _note_impossible(tasks[int(task_id)], codes or {"no_nodes"})
    return result


def _place_task(task: Task, view, record) -> str:
    """Reserve, allocate, keep the decision, fix the price and move the task to placed;
    returns why not ("" when placed)."""
    from apps.orchestration.tasks import run_task

    try:
        _reserve_quota(task, view.pool)
    except QuotaExceeded as exc:
        _note(task, exc.message)
        return "quota"
    allocation = allocate_task(task, node=view.node)
    if allocation is None:
        return "taken"
    weights, candidates = record
    node, pool = view.node, view.pool
    weights["left_free"] = Accelerator.objects.filter(node=node, allocation__isnull=True).count()
    Placement.objects.create(
        task=task, chosen_pool=pool, chosen_node=node, weights=weights, candidates=candidates
    )
    Task.objects.filter(pk=task.pk).update(
        pool=pool,
        node=node,
        hourly_minor=adapter.task_hourly_minor(view.price_per_hour_minor, task.accelerator_milli),
    )
    move_task(task=task, to=TaskState.PLACED, actor=SCHEDULER)
    on_commit_task(run_task, task.pk)
    return ""


def task_demand(tasks_and_models):
    """What held tasks count against quotas: whole cards, shares summed up to whole cards
    (four quarter shares are one accelerator), compute units, vCPU and RAM."""
    milli_by_model: dict[int, int] = {}
    units = Decimal(0)
    vcpu = ram = 0
    for task, model in tasks_and_models:
        milli_by_model[model.pk] = milli_by_model.get(model.pk, 0) + task.accelerator_milli
        units += model.compute_units * Decimal(task.accelerator_milli) / 1000
        vcpu += task.vcpu
        ram += task.ram_gb
    by_model = {pk: math.ceil(milli / 1000) for pk, milli in milli_by_model.items()}
    return Usage(
        accelerators=sum(by_model.values()),
        compute_units=units,
        vcpu=vcpu,
        ram_gb=ram,
        by_model=by_model,
    )


def _held_tasks(organizations) -> list[tuple]:
    """(task, its accelerator model) for the tasks that hold quota: placed and running."""
    held = Task.objects.filter(
        organization__in=organizations,
        state__in=(TaskState.PLACED, TaskState.RUNNING),
        pool__isnull=False,
    ).select_related("pool__accelerator_model")
    return [(t, t.pool.accelerator_model) for t in held]


def task_quota_usage(organizations) -> Usage:
    """The quotas' holder for training tasks (queued tasks hold nothing yet)."""
    return task_demand(_held_tasks(organizations))


def _reserve_quota(task: Task, pool) -> None:
    """The organization's quota, checked under its lock (apps.quotas counts what its instances
    and tasks hold). The demand is what this task adds to the tasks held: shares add up to
    whole cards before they are counted."""
    held = _held_tasks([task.organization])
    demand = task_demand([*held, (task, pool.accelerator_model)]) - task_demand(held)
    reserve(organization=task.organization, demand=demand)


def allocate_task(task: Task, *, node) -> Allocation | None:
    """Allocate the task on `node` under the node's row lock, re-counting once it is held:
    whole free cards (lowest index first), or a share of the card with the least room that
    still holds it. None when the node can no longer take it."""
    lock(Node, node.pk)
    node = with_free_capacity(Node.objects.filter(pk=node.pk)).get()
    if node.is_drained or node.health != NodeHealth.HEALTHY:
        return None
    if node.vcpu_total - node.vcpu_used < task.vcpu or node.ram_gb_total - node.ram_used < (
        task.ram_gb
    ):
        return None
    milli = task.accelerator_milli
    if milli < 1000:
        cards = adapter.card_states([node.pk]).get(node.pk, [])
        fitting = sorted((free, card) for card, free in cards if free >= milli)
        if not fitting:
            return None
        _, card = fitting[0]
        allocation = Allocation.objects.create(
            node=node,
            task=task,
            vcpu=task.vcpu,
            ram_gb=task.ram_gb,
            share_milli=milli,
            shared_accelerator_id=card,
        )
        # The first share on a card holds it, so whole-card placements pass it by.
        Accelerator.objects.filter(pk=card, allocation__isnull=True).update(allocation=allocation)
        return allocation
    count = milli // 1000
    devices = list(
        Accelerator.objects.filter(node=node, allocation__isnull=True)
        .order_by("index")
        .values_list("pk", flat=True)[:count]
    )
    if len(devices) < count:
        return None
    allocation = Allocation.objects.create(node=node, task=task, vcpu=task.vcpu, ram_gb=task.ram_gb)
    Accelerator.objects.filter(pk__in=devices).update(allocation=allocation)
    return allocation


def live_task_allocation(task) -> Allocation | None:
    return (
        Allocation.objects.filter(task=task, released_at__isnull=True)
        .select_related("node", "shared_accelerator")
        .first()
    )


def task_device_indices(task) -> tuple[int, ...]:
    allocation = live_task_allocation(task)
    if allocation is None:
        return ()
    if allocation.is_share:
        return (allocation.shared_accelerator.index,)
    return tuple(allocation.accelerators.order_by("index").values_list("index", flat=True))


def release_task_capacity(task) -> bool:
    """Give back what the task holds, under the node's lock. A share's card passes to another
    live share of it, or is free with the last one. False when it held nothing."""
    allocation = live_task_allocation(task)
    if allocation is None:
        return False
    lock(Node, allocation.node_id)
    allocation.released_at = timezone.now()
    allocation.save(update_fields=["released_at"])
    if allocation.is_share:
        card = allocation.shared_accelerator_id
        if Accelerator.objects.filter(pk=card, allocation=allocation).exists():
            heir = (
                Allocation.objects.filter(shared_accelerator_id=card, released_at__isnull=True)
                .order_by("pk")
                .first()
            )
            Accelerator.objects.filter(pk=card).update(allocation=heir)
    else:
        Accelerator.objects.filter(allocation=allocation).update(allocation=None)
    return True


# --- what the backend reports ----------------------------------------------------------------


@transaction.atomic
def task_submitted(*, task_id: int, handle: str) -> Task | None:
    """The backend took the task and named it; it stays placed until the backend runs it.
    None if it is no longer placed (cancelled meanwhile)."""
    task = Task.objects.select_for_update(no_key=True).get(pk=task_id)
    if task.state != TaskState.PLACED:
        return None
    Task.objects.filter(pk=task_id).update(backend_handle=handle)
    return task


@transaction.atomic
def task_started(*, task_id: int, at=None) -> Task | None:
    """The backend runs it (since `at`, where it says): placed → running."""
    task = Task.objects.select_for_update(no_key=True).get(pk=task_id)
    if task.state != TaskState.PLACED:
        return None
    return move_task(task=task, to=TaskState.RUNNING, actor=SCHEDULER, at=at)


@transaction.atomic
def task_progress(*, task_id: int, logs: str, backend_status: dict, now=None) -> None:
    """What the backend says of a task it has: its output so far and its own view of the run
    (state, node, devices, exit code, why it waits). A task the backend keeps waiting longer
    than LOAM_TASK_PENDING_REPORT_S is reported once in the audit log, not left silent."""
    now = now or timezone.now()
    task = (
        Task.objects.select_for_update(no_key=True)
        .filter(pk=task_id, state__in=(TaskState.PLACED, TaskState.RUNNING))
        .first()
    )
    if task is None:
        return
    earlier = task.backend_status or {}
    status = dict(backend_status)
    # A backend forgets where a job ran once it ended (Slurm's gres_detail): keep the last seen.
    for key in ("node", "devices"):
        if not status.get(key) and earlier.get(key):
            status[key] = earlier[key]
    if status.get("state") == TASK_PENDING:
        status["pending_since"] = earlier.get("pending_since") or now.isoformat()
        status["reported"] = earlier.get("reported", False)
        waited = now - datetime.fromisoformat(status["pending_since"])
        if not status["reported"] and waited.total_seconds() > settings.LOAM_TASK_PENDING_REPORT_S:
            status["reported"] = True
            record_event(
                action="task.pending_at_backend",
                actor=SCHEDULER,
                target=task,
                data={"minutes": int(waited.total_seconds() // 60), "why": status["message"]},
            )
    Task.objects.filter(pk=task_id).update(logs=_clip(logs), backend_status=status)


@transaction.atomic
def finish_task(
    *, task_id: int, succeeded: bool, logs: str = "", message: str = "", at=None
) -> Task | None:
    """The backend is done with it (or refused it): succeeded or failed (at `at`, where it
    says), with its logs and the backend's message; its capacity goes back and the queue gets
    another pass."""

    task = Task.objects.select_for_update(no_key=True).get(pk=task_id)
    if task.state not in (TaskState.PLACED, TaskState.RUNNING):
        return None
    if succeeded and task.state != TaskState.RUNNING:
        return None
    text = logs or task.logs
    if message:
        text = f"{text}\n{message}" if text else message
    Task.objects.filter(pk=task_id).update(logs=_clip(text))
    task = move_task(
        task=task,
        to=TaskState.SUCCEEDED if succeeded else TaskState.FAILED,
        actor=SCHEDULER,
        at=at,
    )
    release_task_capacity(task)
    _schedule_pass_after_commit(task.organization.park_id)
    return task


# --- the park's policy -----------------------------------------------------------------------

MAX_WEIGHT = Decimal("100")


@transaction.atomic(durable=True)
def set_scheduling_policy(*, park, operator, operator_share=None, **weights) -> SchedulingPolicy:
    """An operator sets how much each score part weighs in the park (region, performance,
    energy, price, fragmentation; 0–100 each, not all 0) and the share of the say the park
    keeps over the tenant's preference (0–1). Parts not given keep their value. Audited."""
    require_operator(
        operator, park, _("Only this park's operators may change its scheduling policy.")
    )
    unknown = set(weights) - set(SchedulingPolicy.WEIGHT_FIELDS)
    if unknown:
        raise TypeError(f"unknown weights: {', '.join(sorted(unknown))}")
    lock(type(park), park.pk)
    policy = SchedulingPolicy.objects.filter(park=park).first() or SchedulingPolicy(park=park)
    before = {**policy.weights(), "operator_share": float(policy.operator_share)}
    errors = {}
    for part, value in weights.items():
        number = _decimal(value)
        if number is None or not 0 <= number <= MAX_WEIGHT:
            errors[part] = _("A weight is a number from 0 to %(max)s.") % {"max": MAX_WEIGHT}
        else:
            setattr(policy, SchedulingPolicy.WEIGHT_FIELDS[part], number)
    if operator_share is not None:
        share = _decimal(operator_share)
        if share is None or not 0 <= share <= 1:
            errors["operator_share"] = _("The operator's share is a number from 0 to 1.")
        else:
            policy.operator_share = share
    if not errors and not any(policy.weights().values()):
        errors["__all__"] = _("At least one weight must be above 0.")
    if errors:
        raise ValidationError(errors)
    policy.updated_by = audit_identity(operator)[0]
    policy.save()
    after = {**policy.weights(), "operator_share": float(policy.operator_share)}
    record_event(
        action="scheduling_policy.changed",
        actor=operator,
        target=policy,
        park=park,
        data={"from": before, "to": after},
    )
    return policy


def _decimal(value) -> Decimal | None:
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return number.quantize(Decimal("0.01")) if number.is_finite() else None


# --- helpers ---------------------------------------------------------------------------------


def _schedule_pass_after_commit(park_id: int) -> None:
    from apps.orchestration.tasks import schedule_park_queue

    on_commit_task(schedule_park_queue, park_id)


def _clip(text: str) -> str:
    return text[-MAX_LOG_CHARS:] if len(text) > MAX_LOG_CHARS else text


def _append_logs(task: Task, line: str) -> None:
    text = f"{task.logs}\n[loam] {line}" if task.logs else f"[loam] {line}"
    Task.objects.filter(pk=task.pk).update(logs=_clip(text))
    task.logs = text


def _note(task: Task, line: str) -> None:
    """Say once in the task's log why it still waits (not again on every pass)."""
    if not task.logs.endswith(f"[loam] {line}"):
        _append_logs(task, line)


def _note_impossible(task: Task, codes: set[str]) -> None:
    reasons = "; ".join(sorted(str(REJECTION_REASONS.get(c, c)) for c in codes))
    _note(task, _("No host of the park can take it as asked (%(reasons)s).") % {"reasons": reasons})
