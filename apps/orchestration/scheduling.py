"""Training tasks and the park's scheduling policy: one function per use case.

A task is submitted queued (`submit_task`); a queue pass (`schedule_queue_pass`, after every
submit and finish, and on every beat of `apps.orchestration.tasks.schedule_queues`) asks the
placement engine's `schedule_queue` what to start — priority, fair share by each
organization's recent accelerator-seconds, backfill behind a blocked head — and for each task
it starts: reserves quota, allocates under the node's row lock (whole cards, or a share of one
card), keeps the decision as a Placement, fixes the price (`Task.hourly_minor`) and moves it
queued → placed; after commit `run_task` hands it to the backend (placed → running) and the
backend's report ends it (`finish_task`: succeeded or failed, logs kept, capacity given back).
A multi-node (gang) task is placed by the same pass, before the engine plans the one-node
tasks, all or nothing on one pool (`apps.orchestration.gangs`): an allocation on each of its
nodes, its quota and price counting every card on every node.

Lock order, the same everywhere so two of these never wait on each other: queued task rows,
then the organizations (quota, by id), then the park where it has quota limits, then the
nodes (by id). Cancelling and finishing lock the task, then the node; orders lock the
organization, then the park, then the node.
"""

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connections, router, transaction
from django.db.models import Count
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.billing.metering import known_to_run
from apps.catalog.models import Image
from apps.catalog.selectors import free_room_changed
from apps.core.audit import audit_identity, record_event
from apps.core.bulk import update_rows
from apps.core.models import AuditEvent
from apps.core.money import format_money
from apps.core.transactions import in_transaction, lock, on_commit_task
from apps.core.transitions import check_transition, transition
from apps.orchestration import adapter, selectors
from apps.orchestration.backends.base import TASK_PENDING, Capability
from apps.orchestration.backends.registry import drivers_with
from apps.orchestration.gangs import hold_for_gang, plan_gang
from apps.orchestration.meters import follow_task
from apps.orchestration.models import (
    REJECTION_REASONS,
    TASK_TRANSITIONS,
    Accelerator,
    Allocation,
    FairShare,
    Node,
    NodeHealth,
    Placement,
    Pool,
    SchedulingPolicy,
    Task,
    TaskPreference,
    TaskState,
)
from apps.orchestration.reservations import (
    TaskReservation,
    release,
    reserve_tasks,
)
from apps.orchestration.rooms import NodeRoom
from apps.orchestration.scheduler import PRESETS, Hold, filters, schedule_queue
from apps.quotas.services import QuotaExceeded
from apps.tenants.access import SystemActor, authorize, require_operator
from apps.tenants.models import Organization
from apps.tenants.roles import Action
from apps.workloads.models import Workload, WorkloadKind

MAX_ACCELERATOR_MILLI = 8000
MAX_NODES = 16  # a gang task's nodes
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
    accelerator_milli: int = 1000  # on each node
    vcpu: int = 8
    ram_gb: int = 32
    node_count: int = 1
    max_hourly_minor: int | None = None
    deadline: object = None
    allowed_regions: tuple = ()
    preference: str = TaskPreference.BALANCED
    priority: int = 0
    preemptible: bool = False

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
    nodes = task.node_count
    if not (isinstance(nodes, int) and 1 <= nodes <= MAX_NODES):
        errors["node_count"] = _("Ask for 1–%(max)d nodes.") % {"max": MAX_NODES}
    elif nodes > 1 and "accelerator_milli" not in errors and milli % 1000:
        errors["node_count"] = _(
            "A task on several nodes takes whole accelerators on each (1, 2, …), not a share "
            "of one."
        )
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
    if task.node_count > 1:
        fitting = [
            p
            for p in selectors.schedulable_park_pools(park).select_related("backend")
            if p.accelerator_model_id in models and (not regions or p.region_id in regions)
        ]
        gang_drivers = set(drivers_with(Capability.GANG))
        single = sorted({p.name for p in fitting if p.backend.driver not in gang_drivers})
        if single and not any(p.backend.driver in gang_drivers for p in fitting):
            return {
                "node_count": _(
                    "The pools that have accelerators this image runs on (%(pools)s) run a task "
                    "on one server only; a task on several nodes needs a Slurm or simulator "
                    "pool. Ask for 1 node."
                )
                % {"pools": ", ".join(single)}
            }
    capability = Capability.GANG if task.node_count > 1 else Capability.BATCH
    pools = [
        p
        for p in selectors.schedulable_park_pools(park, capability=capability)
        if p.accelerator_model_id in models and (not regions or p.region_id in regions)
    ]
    if not pools:
        field_name = "allowed_regions" if regions else "accelerator_model"
        return {
            field_name: _("No pool of the park has accelerators this image runs on%(where)s.")
            % {"where": _(" in the chosen regions") if regions else ""}
        }
    running_it = [p for p in pools if p.images is None or task.image.code in p.images]
    if not running_it:
        held = sorted({code for p in pools for code in p.images})
        return {
            "image": _(
                "The pools that could run this task (%(pools)s) cannot run the image "
                "%(image)s: they run tasks only in %(images)s. Choose one of those images."
            )
            % {
                "pools": ", ".join(sorted(p.name for p in pools)),
                "image": task.image.code,
                "images": ", ".join(held) or _("no image yet"),
            }
        }
    pools = running_it
    cards = max(1, task.accelerator_milli // 1000)
    hosts_in = Counter(
        Node.objects.filter(
            pool__in=pools, vcpu_total__gte=task.vcpu, ram_gb_total__gte=task.ram_gb
        )
        .exclude(health=NodeHealth.DOWN)
        .annotate(cards=Count("accelerators"))
        .filter(cards__gte=cards)
        .values_list("pool_id", flat=True)
    )
    large_enough = {pool for pool, hosts in hosts_in.items() if hosts >= task.node_count}
    if not large_enough:
        if task.node_count > 1:
            return {
                "node_count": _(
                    "No pool of the park has %(nodes)d hosts large enough for %(cards)d "
                    "accelerators, %(vcpu)d vCPU and %(ram)d GB of RAM each; ask for fewer "
                    "nodes or less on each."
                )
                % {
                    "nodes": task.node_count,
                    "cards": cards,
                    "vcpu": task.vcpu,
                    "ram": task.ram_gb,
                }
            }
        return {
            "accelerator_milli": _(
                "No host of the park is large enough for %(cards)d accelerators, %(vcpu)d vCPU "
                "and %(ram)d GB of RAM on one node; ask for less."
            )
            % {"cards": cards, "vcpu": task.vcpu, "ram": task.ram_gb}
        }
    pools = [p for p in pools if p.pk in large_enough]
    prices = adapter.task_prices(pools)
    discount = selectors.preemptible_discount_pct(park) if task.preemptible else 0
    hourly = [
        adapter.task_price(
            adapter.task_hourly_minor(prices[p.pk], task.accelerator_milli * task.node_count),
            discount,
        )
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


@in_transaction
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
        workload=Workload.objects.create(organization=organization, kind=WorkloadKind.TASK),
        name=task_input.name.strip(),
        image=task_input.image,
        command=task_input.command.strip(),
        accelerator_model=task_input.accelerator_model,
        accelerator_milli=task_input.accelerator_milli,
        vcpu=task_input.vcpu,
        ram_gb=task_input.ram_gb,
        node_count=task_input.node_count,
        max_hourly_minor=task_input.max_hourly_minor,
        deadline=task_input.deadline,
        preference=task_input.preference,
        priority=task_input.priority,
        preemptible=task_input.preemptible,
        created_by=audit_identity(actor)[0],
    )
    task.allowed_regions.set(task_input.allowed_regions)
    record_event(
        action="task.submitted",
        actor=actor,
        target=task,
        data={
            "accelerator_milli": task.accelerator_milli,
            "node_count": task.node_count,
            "accelerator_model": getattr(task.accelerator_model, "slug", None),
            "regions": [r.code for r in task_input.allowed_regions],
            "preference": task.preference,
            "preemptible": task.preemptible,
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
    if release(task):
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
    gang_held: dict[int, list[int]] = field(default_factory=dict)  # waiting gang -> its nodes
    waiting: list[int] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)  # deadline passed: failed
    held_back: dict[int, str] = field(default_factory=dict)  # started by the plan, not placed


@transaction.atomic(durable=True)
def schedule_queue_pass(*, park, now=None) -> QueuePass:
    """Place what the park's queue can start now (see the module docstring).

    Its queries do not grow with the tasks it places: the queue, the nodes with their cards,
    the prices and the park's policy are read once; the quota once per organization it places
    for, the organizations, the park and the chosen nodes locked and re-read once, on the one
    reservation path (`reservations.reserve_tasks`); what it places is written in one
    statement per table (`_write_placements`), and the lines it adds to tasks' logs in one
    more.
    """

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
            Task.objects.filter(pk=task_id).update(logs=task.logs)
            move_task(task=task, to=TaskState.FAILED, actor=SCHEDULER)
            result.expired.append(task_id)
        else:
            live.append(task_id)
    if not live:
        return result
    tasks = {
        t.pk: t
        for t in Task.objects.filter(pk__in=live)
        .select_related("organization__park")
        .prefetch_related("allowed_regions")
    }
    # A park has a handful of images for a thousand tasks: each read once, with its models.
    images = Image.objects.filter(pk__in={t.image_id for t in tasks.values()})
    images = {i.pk: i for i in images.prefetch_related("compatible_accelerators")}
    for task in tasks.values():
        task.image = images[task.image_id]
    batch_nodes = selectors.schedulable_nodes(park=park, capability=Capability.BATCH)
    nodes = list(batch_nodes.order_by("pk"))
    pools = list({node.pool_id: node.pool for node in nodes}.values())
    prices = adapter.task_prices(pools, at=now)
    discount = selectors.preemptible_discount_pct(park)
    views = adapter.node_views(nodes, prices=prices)
    view_of = {view.state.id: view for view in views}
    views_by_pool = defaultdict(list)
    for view in views:
        views_by_pool[view.node.pool_id].append(view)
    gang_drivers = set(drivers_with(Capability.GANG))
    gang_pools = {p.pk for p in pools if p.backend.driver in gang_drivers}
    # Gang tasks first, in the queue's order: each takes its nodes' room off the views before
    # the engine (which places one task on one node) plans the rest on what is left.
    gangs, gang_waiting, refused_for = [], {}, {}
    for task in sorted(
        (t for t in tasks.values() if t.is_gang),
        key=lambda t: (-t.priority, t.preemptible, t.submitted_at, t.pk),
    ):
        refused = refused_for[task.pk] = adapter.task_pool_rejections(
            task, pools, prices, model_ids=adapter.task_model_ids(task), discount_pct=discount
        )
        gang, considered = plan_gang(
            task, views_by_pool, refused=refused, gang_pools=gang_pools, prices=prices
        )
        if gang is None:
            gang_waiting[task.pk] = considered
        else:
            gangs.append((task, gang))
    zoned = []
    for view in views:
        state = view.state.copy()
        state.region = adapter.zone(view.pool)
        zoned.append(state)
    slugs = {p.accelerator_model_id: p.accelerator_model.slug for p in pools}
    states_in = defaultdict(list)  # pool id -> its nodes' engine ids
    for view in views:
        states_in[view.node.pool_id].append(view.state.id)
    requests, refusals = {}, {}
    for task in tasks.values():
        if task.is_gang:
            continue
        model_ids = adapter.task_model_ids(task)
        refused = adapter.task_pool_rejections(
            task, pools, prices, model_ids=model_ids, discount_pct=discount
        )
        refusals[task.pk] = {
            state_id: code for pool_id, code in refused.items() for state_id in states_in[pool_id]
        }
        requests[task.pk] = adapter.task_request(
            task,
            model_slugs={slugs[m] for m in model_ids if m in slugs},
            zones={adapter.zone(p) for p in pools if p.pk not in refused},
        )
    # The first gang that waits holds the nodes nearest to taking it: the tasks behind it do
    # not start there, so a stream of small tasks cannot starve it.
    hold, held_for_gang = None, None
    if gang_waiting:
        head = tasks[next(iter(gang_waiting))]
        held_for_gang = hold_for_gang(
            head, views_by_pool, refused=refused_for[head.pk], gang_pools=gang_pools
        )
        if held_for_gang:
            request = adapter.task_request(head, model_slugs=())
            hold = Hold(
                nodes=frozenset(view.state.id for view in held_for_gang),
                priority=request.priority,
                submitted_at=request.submitted_at,
            )
            result.gang_held = {head.pk: [view.node.pk for view in held_for_gang]}
    weights = adapter.park_weights(park)
    plan = schedule_queue(
        list(requests.values()),
        zoned,
        selectors.recent_usage(park, now=now),
        shares=selectors.fair_shares(park),
        hold=hold,
        operator=weights.weights,
        operator_share=weights.operator_share,
        distribution=adapter.BEST_FIT,
    )
    noted = []  # tasks whose log gained a line, written together at the end
    placed = []
    started = [(tasks[int(request.id)], request, decision) for request, decision in plan.started]
    if started or gangs:
        # The quota of every organization placed for, then the chosen nodes: locked and
        # counted once for the whole pass.
        reservation = reserve_tasks(
            park=park,
            organizations={task.organization for task, _, _ in started}
            | {t.organization for t, _ in gangs},
            node_ids={int(decision.node.id) for _, _, decision in started}
            | {view.node.pk for _, gang in gangs for view in gang.views},
        )
    for task, gang in gangs:
        members = _take(reservation, task, gang.pool.accelerator_model, gang.views, noted, result)
        if members is None:
            continue
        first = gang.views[0]
        record = (
            {
                "policy": "gang",
                "scorer": "gang",
                "currency": park.currency,
                "preference": task.preference,
                "gang": gang.record,
            },
            [],  # its nodes and the pools weighed are in "gang"
        )
        placed.append(_Placed(task=task, view=first, members=members, record=record))
        result.placed.append(task.pk)
    for task_id, considered in gang_waiting.items():
        result.waiting.append(task_id)
        reason = _gang_wait_reason(tasks[task_id], considered)
        if task_id in result.gang_held:
            reason += " " + _(
                "Nodes %(nodes)s are held for it: tasks behind it in the queue do not start there."
            ) % {"nodes": ", ".join(sorted(view.node.hostname for view in held_for_gang))}
        if _note(tasks[task_id], reason):
            noted.append(tasks[task_id])
    for task, request, decision in started:
        view = view_of[decision.node.id]
        members = _take(reservation, task, view.pool.accelerator_model, [view], noted, result)
        if members is None:
            continue
        record = adapter.placement_record(
            decision,
            views,
            request=request,
            park=weights,
            currency=park.currency,
            rejections=refusals[task.pk],
        )
        record[0]["left_free"] = reservation.rooms[view.node.pk].idle_cards
        placed.append(_Placed(task=task, view=view, members=members, record=record))
        result.placed.append(task.pk)
        if request.id in plan.backfilled:
            result.backfilled.append(task.pk)
    _write_placements(placed, park=park, discount=discount)
    if started or gangs:
        # What the pass took (and any room that had drifted), kept on the nodes' rows.
        NodeRoom.save_rooms(reservation.rooms.values())
    result.reserved = {int(t): int(n) for t, n in plan.reserved.items()}
    result.waiting += [int(r.id) for r in plan.waiting] + list(result.held_back)
    for task_id in plan.impossible:
        result.waiting.append(int(task_id))
        codes = set()
        for state in zoned:
            code = filters.check(requests[int(task_id)], state)
            if code in adapter.ZONE_CODES:
                code = refusals[int(task_id)].get(state.id, code)
            codes.add(code or "gpu_count")
        if _note_impossible(tasks[int(task_id)], codes or {"no_nodes"}):
            noted.append(tasks[int(task_id)])
    update_rows(Task, noted, ["logs"])
    return result


@dataclass
class _Placed:
    """A task the pass placed, before it is written."""

    task: Task
    view: adapter.NodeView  # its (first) node
    # Per node (several for a gang task): the allocation (unsaved) and the accelerators whose
    # holder it becomes.
    members: list[tuple[Allocation, list[int]]]
    record: tuple[dict, list[dict]]  # Placement.weights, Placement.candidates


def _gang_wait_reason(task, considered: list[dict]) -> str:
    """Why a gang task waits, pool by pool: how many of its nodes could take a member now."""
    parts = []
    for pool in considered:
        code = pool.get("rejected")
        if code == "gang_nodes":
            parts.append(
                _("%(pool)s: %(fit)d of the %(need)d nodes have room now")
                % {"pool": pool["pool"], "fit": pool["fitting"], "need": task.node_count}
            )
        elif code:
            parts.append(f"{pool['pool']}: {REJECTION_REASONS.get(code, code)}")
    return _(
        "Waiting for %(nodes)d nodes with %(cards)d free accelerators each on one pool "
        "(all or nothing): %(pools)s."
    ) % {
        "nodes": task.node_count,
        "cards": task.accelerator_milli // 1000,
        "pools": "; ".join(parts) or _("the park has no host in service"),
    }


def _write_placements(placed: list[_Placed], *, park, discount: int) -> None:
    """Keep what the pass placed, one statement per table: the allocations, the cards they
    hold, the placements that explain them, the tasks (pool, node, fixed price, placed) and
    their audit events; then each task's backend job after commit.

    The move to placed is `transition()`'s, for all of them at once: the rows are locked since
    the pass began and still queued, the table allows the move, and each gets its audit event.
    A task that was only queued has no meter to follow (one opens when it runs).
    """
    from apps.orchestration.tasks import run_placed_tasks

    if not placed:
        return
    Allocation.objects.bulk_create([a for p in placed for a, _cards in p.members])
    update_rows(
        Accelerator,
        [
            Accelerator(pk=card, allocation_id=allocation.pk)
            for p in placed
            for allocation, cards in p.members
            for card in cards
        ],
        ["allocation"],
    )
    free_room_changed()
    _insert_placements(placed)
    names = dict(Task._meta.get_field("state").flatchoices)
    user, label = audit_identity(SCHEDULER)
    events = []
    for p in placed:
        task = p.task
        check_transition(
            TASK_TRANSITIONS, task.state, TaskState.PLACED, label=str(task), names=names
        )
        events.append(
            AuditEvent(
                park_id=park.pk,
                organization_id=task.organization_id,
                actor=user,
                actor_label=label[:120],
                action=f"task.{TaskState.PLACED}",
                object_type=Task._meta.label_lower,
                object_id=str(task.pk),
                object_repr=str(task)[:200],
                data={"from": task.state, "to": TaskState.PLACED},
            )
        )
        task.pool, task.node, task.state = p.view.pool, p.view.node, TaskState.PLACED
        task.hourly_minor = adapter.task_price(
            adapter.task_hourly_minor(p.view.price_per_hour_minor, task.total_accelerator_milli),
            discount if task.preemptible else 0,
        )
    update_rows(Task, [p.task for p in placed], ["pool", "node", "hourly_minor", "state"])
    AuditEvent.objects.bulk_create(events)
    # One message for the pass (a broker round trip per task was a tenth of its time).
    on_commit_task(run_placed_tasks, [p.task.pk for p in placed])


def _insert_placements(placed: list[_Placed]) -> None:
    """The placements that explain what the pass placed, in one statement.

    A pass placing 500 tasks keeps about 12 MB of candidates. On PostgreSQL they are COPYed
    as JSON text, which the server reads as it comes; an INSERT had the driver escape every
    document into the statement first, and Django compare them as expressions (a third of
    the write's time). Elsewhere (the embedded SQLite) bulk_create writes them.
    """
    connection = connections[router.db_for_write(Placement)]
    if connection.vendor != "postgresql":
        Placement.objects.bulk_create(
            Placement(
                workload_id=p.task.workload_id,
                chosen_pool=p.view.pool,
                chosen_node=p.view.node,
                weights=p.record[0],
                candidates=p.record[1],
            )
            for p in placed
        )
        return
    encoder = Placement._meta.get_field("candidates").encoder
    columns = (
        "workload_id",
        "chosen_pool_id",
        "chosen_node_id",
        "weights",
        "candidates",
        "created_at",
    )
    now = timezone.now()
    with (
        connection.cursor() as cursor,
        cursor.copy(
            f"COPY {connection.ops.quote_name(Placement._meta.db_table)} "
            f"({', '.join(connection.ops.quote_name(c) for c in columns)}) FROM STDIN"
        ) as copy,
    ):
        for p in placed:
            weights, candidates = p.record
            copy.write_row(
                (
                    p.task.workload_id,
                    p.view.pool.pk,
                    p.view.node.pk,
                    json.dumps(weights, cls=encoder),
                    json.dumps(candidates, cls=encoder),
                    now,
                )
            )


# --- what a task holds ----------------------------------------------------------------------


def live_task_allocations(task) -> list[Allocation]:
    """What the task holds, one allocation per node (several for a gang task), by node name."""
    return list(
        Allocation.objects.filter(workload_id=task.workload_id, released_at__isnull=True)
        .select_related("node", "shared_accelerator")
        .order_by("node__hostname")
    )


def task_device_indices(task) -> tuple[int, ...]:
    """The cards the task holds on its (first) node."""
    allocations = [a for a in live_task_allocations(task) if a.node_id == task.node_id]
    if not allocations:
        return ()
    (allocation,) = allocations
    if allocation.is_share:
        return (allocation.shared_accelerator.index,)
    return tuple(allocation.accelerators.order_by("index").values_list("index", flat=True))


def task_node_names(task) -> tuple[str, ...]:
    """The hostnames of every node the task holds room on, by name."""
    return tuple(a.node.hostname for a in live_task_allocations(task))


# --- what the backend reports ----------------------------------------------------------------


@transaction.atomic(durable=True)
def task_submitted(*, task_id: int, handle: str) -> Task | None:
    """The backend took the task and named it; it stays placed until the backend runs it.
    Which build of its image it runs in is kept (`Task.image_digest`). None if it is no longer
    placed (cancelled meanwhile)."""
    task = Task.objects.select_for_update(no_key=True).get(pk=task_id)
    if task.state != TaskState.PLACED:
        return None
    Task.objects.filter(pk=task_id).update(backend_handle=handle, image_digest=ran_digest(task))
    return task


def ran_digest(task: Task) -> str:
    """The digest of the task's image as its pool reported it ("" where the pool runs none)."""
    images = Pool.objects.filter(pk=task.pool_id).values_list("images", flat=True).first()
    return (images or {}).get(task.image.code, "")


@transaction.atomic(durable=True)
def task_started(*, task_id: int, at=None) -> Task | None:
    """The backend runs it (since `at`, where it says): placed → running."""
    task = Task.objects.select_for_update(no_key=True).get(pk=task_id)
    if task.state != TaskState.PLACED:
        return None
    return move_task(task=task, to=TaskState.RUNNING, actor=SCHEDULER, at=at)


@transaction.atomic(durable=True)
def task_progress(
    *, task_id: int, logs: str, backend_status: dict, running_at=None, now=None
) -> None:
    """What the backend says of a task it has: its output so far and its own view of the run
    (state, node, devices, exit code, why it waits), and, where it says the task runs, when it
    was asked (`running_at`: the task's meter may be measured up to there). A task the backend
    keeps waiting longer than LOAM_TASK_PENDING_REPORT_S is reported once in the audit log, not
    left silent. An answer ends what `task_unreachable` said."""
    now = now or timezone.now()
    task = _task_at_backend(task_id)
    if task is None:
        return
    if running_at is not None:
        known_to_run(task.workload_id, until=running_at)
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


def _task_at_backend(task_id: int) -> Task | None:
    """The task, locked, while its backend has it (placed or running)."""
    return (
        Task.objects.select_for_update(no_key=True)
        .filter(pk=task_id, state__in=(TaskState.PLACED, TaskState.RUNNING))
        .first()
    )


@transaction.atomic(durable=True)
def task_unreachable(*, task_id: int, error: str, now=None) -> None:
    """The backend could not be asked how a task does: its state is unknown from the first
    time it could not be (`unreachable_since`, kept until the backend answers again), and its
    meter is measured no further than the backend last said it ran."""
    now = now or timezone.now()
    task = _task_at_backend(task_id)
    if task is None:
        return
    status = dict(task.backend_status or {})
    status.setdefault("unreachable_since", now.isoformat())
    status["unreachable_error"] = error[:500]
    Task.objects.filter(pk=task_id).update(backend_status=status)


@transaction.atomic(durable=True)
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
    release(task)
    _schedule_pass_after_commit(task.organization.park_id)
    return task


# --- the park's policy -----------------------------------------------------------------------

MAX_WEIGHT = Decimal("100")


@transaction.atomic(durable=True)
def set_scheduling_policy(
    *, park, operator, operator_share=None, preemptible_discount_pct=None, **weights
) -> SchedulingPolicy:
    """An operator sets how much each score part weighs in the park (region, performance,
    energy, price, fragmentation; 0–100 each, not all 0), the share of the say the park
    keeps over the tenant's preference (0–1) and how much less a preemptible task pays (0–90
    %). Parts not given keep their value. Audited."""
    require_operator(
        operator, park, _("Only this park's operators may change its scheduling policy.")
    )
    unknown = set(weights) - set(SchedulingPolicy.WEIGHT_FIELDS)
    if unknown:
        raise TypeError(f"unknown weights: {', '.join(sorted(unknown))}")
    lock(type(park), park.pk)
    policy = SchedulingPolicy.objects.filter(park=park).first() or SchedulingPolicy(park=park)
    before = _policy_record(policy)
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
    if preemptible_discount_pct is not None:
        discount = _decimal(preemptible_discount_pct)
        if discount is None or discount != int(discount) or not 0 <= discount <= 90:
            errors["preemptible_discount_pct"] = _(
                "The preemptible discount is a whole percent from 0 to 90."
            )
        else:
            policy.preemptible_discount_pct = int(discount)
    if not errors and not any(policy.weights().values()):
        errors["__all__"] = _("At least one weight must be above 0.")
    if errors:
        raise ValidationError(errors)
    policy.updated_by = audit_identity(operator)[0]
    policy.save()
    after = _policy_record(policy)
    record_event(
        action="scheduling_policy.changed",
        actor=operator,
        target=policy,
        park=park,
        data={"from": before, "to": after},
    )
    return policy


def _policy_record(policy: SchedulingPolicy) -> dict:
    return {
        **policy.weights(),
        "operator_share": float(policy.operator_share),
        "preemptible_discount_pct": policy.preemptible_discount_pct,
    }


MAX_FAIR_SHARE = 1000


@transaction.atomic(durable=True)
def set_fair_share(*, organization, operator, shares) -> FairShare:
    """An operator sets the organization's share of the park (1–1000; every organization has 1
    until set): the queue orders waiting tasks by recent usage over share, and each Slurm
    backend that runs the organization's tasks gets it as its account's fairshare (after
    commit). Audited."""
    from apps.orchestration.tasks import sync_tenant_fair_share

    park = organization.park
    require_operator(
        operator, park, _("Only this park's operators may change an organization's share.")
    )
    if not isinstance(shares, int) or isinstance(shares, bool) or not 1 <= shares <= MAX_FAIR_SHARE:
        raise ValidationError(
            {"shares": _("A share is a whole number from 1 to %(max)d.") % {"max": MAX_FAIR_SHARE}}
        )
    lock(Organization, organization.pk)
    share = FairShare.objects.filter(organization=organization).first() or FairShare(
        organization=organization
    )
    before = share.shares if share.pk else 1
    share.shares = shares
    share.updated_by = audit_identity(operator)[0]
    share.save()
    record_event(
        action="fair_share.changed",
        actor=operator,
        target=organization,
        data={"from": before, "to": shares},
    )
    on_commit_task(sync_tenant_fair_share, organization.pk)
    return share


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
    """Add a line to the task's log (in memory: the caller saves it)."""
    text = f"{task.logs}\n[loam] {line}" if task.logs else f"[loam] {line}"
    task.logs = _clip(text)


def _take(reservation: TaskReservation, task, model, views, noted: list, result):
    """`task`'s quota and its room on the nodes of `views` (`TaskReservation.take`), or None
    when it is held back this pass: over a quota (its log says why, once) or its room taken
    meanwhile."""
    try:
        members = reservation.take(task, model, [view.node.pk for view in views])
    except QuotaExceeded as exc:
        if _note(task, exc.message):
            noted.append(task)
        result.held_back[task.pk] = "quota"
        return None
    if members is None:
        result.held_back[task.pk] = "taken"
    return members


def _note(task: Task, line: str) -> bool:
    """Say once in the task's log why it still waits (not again on every pass); True when it
    says it now, and the log is to be saved."""
    if task.logs.endswith(f"[loam] {line}"):
        return False
    _append_logs(task, line)
    return True


def _note_impossible(task: Task, codes: set[str]) -> bool:
    reasons = "; ".join(sorted(str(REJECTION_REASONS.get(c, c)) for c in codes))
    return _note(
        task, _("No host of the park can take it as asked (%(reasons)s).") % {"reasons": reasons}
    )
