from collections import Counter
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Mod
from django.db.models.lookups import Exact
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import AcceleratorModel, Image, Region
from apps.core.money import format_money
from apps.orchestration.backends.registry import is_simulator
from apps.tenants.models import Organization, Park
from apps.workloads.models import Workload


class Backend(models.Model):
    """A registered provisioning backend: a driver name from the registry plus its config."""

    park = models.ForeignKey(
        Park, on_delete=models.CASCADE, related_name="backends", verbose_name=_("park")
    )
    name = models.CharField(_("name"), max_length=80)
    driver = models.CharField(_("driver"), max_length=40)
    config = models.JSONField(_("config"), default=dict, blank=True)
    is_enabled = models.BooleanField(_("enabled"), default=True)
    last_error = models.TextField(_("last error"), blank=True)
    last_checked_at = models.DateTimeField(_("last checked at"), null=True, blank=True)
    # The outside system its config reaches, as the driver names it (registry.endpoint_of);
    # empty where the driver names none. Unique across parks, so two registrations of one
    # cluster cannot both commit, however they race.
    endpoint = models.CharField(_("endpoint"), max_length=300, blank=True, editable=False)

    class Meta:
        verbose_name = _("backend")
        verbose_name_plural = _("backends")
        ordering = ["park", "name"]
        constraints = [
            models.UniqueConstraint(fields=["park", "name"], name="backend_name_unique"),
            models.UniqueConstraint(
                fields=["endpoint"],
                condition=~models.Q(endpoint=""),
                name="backend_endpoint_unique",
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.driver})"

    @property
    def is_simulator(self) -> bool:
        """Its driver simulates: every page that shows its pools and hosts says so."""
        return is_simulator(self.driver)


class Pool(models.Model):
    """One backend's capacity of one accelerator model at one site, with its energy facts."""

    backend = models.ForeignKey(
        Backend, on_delete=models.CASCADE, related_name="pools", verbose_name=_("backend")
    )
    region = models.ForeignKey(
        Region, on_delete=models.PROTECT, related_name="pools", verbose_name=_("region")
    )
    name = models.CharField(_("name"), max_length=80)
    accelerator_model = models.ForeignKey(
        AcceleratorModel,
        on_delete=models.PROTECT,
        related_name="pools",
        verbose_name=_("accelerator model"),
    )
    pue = models.DecimalField(_("PUE"), max_digits=4, decimal_places=2, default="1.30")
    power_price_minor_per_kwh = models.PositiveIntegerField(
        _("power price (minor units per kWh)"), default=60
    )
    carbon_g_per_kwh = models.PositiveIntegerField(
        _("grid carbon intensity (gCO₂/kWh)"), default=550
    )
    is_schedulable = models.BooleanField(_("schedulable"), default=True)
    # {image code: digest} of the images its backend runs tasks in, as it last reported them
    # (`ReportedPool.images`): a task of another image is refused at submit and never placed
    # here. None: the backend brings no images of its own (any image's tasks may come).
    images = models.JSONField(_("images it runs"), null=True, blank=True)

    class Meta:
        verbose_name = _("pool")
        verbose_name_plural = _("pools")
        ordering = ["region", "name"]
        constraints = [
            models.UniqueConstraint(fields=["backend", "name"], name="pool_name_unique"),
            models.CheckConstraint(condition=Q(pue__gte=1), name="pool_pue_at_least_1"),
        ]

    def __str__(self):
        return f"{self.name} · {self.region}"


class NodeHealth(models.TextChoices):
    HEALTHY = "healthy", _("Healthy")
    DEGRADED = "degraded", _("Degraded")
    DOWN = "down", _("Down")
    # Its backend could not be asked (slurmrestd or slurmctld unreachable): what runs there may
    # run on, but nothing new is placed until the backend answers again.
    UNKNOWN = "unknown", _("Unknown: backend unreachable")


_H = NodeHealth
# Every move between two states is one the code makes: a probe takes a node down and back up,
# and to unknown while its backend cannot be asked and out of it when it answers
# (apps.orchestration.services); its agent's heartbeats move it between healthy and degraded and
# out of down, and silence or a revoked credential take it down (apps.agents.services).
NODE_HEALTH_TRANSITIONS = {
    _H.HEALTHY: frozenset({_H.DEGRADED, _H.DOWN, _H.UNKNOWN}),
    _H.DEGRADED: frozenset({_H.HEALTHY, _H.DOWN, _H.UNKNOWN}),
    _H.DOWN: frozenset({_H.HEALTHY, _H.DEGRADED, _H.UNKNOWN}),
    _H.UNKNOWN: frozenset({_H.HEALTHY, _H.DEGRADED, _H.DOWN}),
}


# What tells one kind of room from another: a node's fields that say what it has free
# (`rooms.NodeRoom` keeps them), as `RoomTally` counts nodes by them.
ROOM_KIND = [
    "pool",
    "room_cards",
    "room_idle",
    "vcpu_total",
    "room_vcpu_held",
    "ram_gb_total",
    "room_ram_gb_held",
]


class Node(models.Model):
    """A host in a pool. What it has free is counted from its cards and live allocations under
    its row lock (`rooms.NodeRoom`), which placement takes while it allocates (SELECT ... FOR
    UPDATE); the `room_*` columns keep the last count, written under the same lock, so that
    placement's shortlist reads a few rows per pool instead of counting every node's cards.
    They only propose: a node is always re-counted under its lock before anything is taken,
    and a count that differs from them is written back (`rooms.correct_rooms` too, on the
    capacity sampler's beat)."""

    pool = models.ForeignKey(
        Pool, on_delete=models.CASCADE, related_name="nodes", verbose_name=_("pool")
    )
    hostname = models.CharField(_("hostname"), max_length=120)
    vcpu_total = models.PositiveIntegerField(_("vCPU"))
    ram_gb_total = models.PositiveIntegerField(_("RAM (GB)"))
    health = models.CharField(
        _("health"), max_length=16, choices=NodeHealth.choices, default=NodeHealth.HEALTHY
    )
    is_drained = models.BooleanField(
        _("drained"), default=False, help_text=_("No new placements; running ones stay.")
    )
    telemetry = models.JSONField(_("telemetry"), default=dict, blank=True)
    last_seen_at = models.DateTimeField(_("last seen at"), null=True, blank=True)
    # The room counted under the node's lock (see above): its cards, those idle (in service,
    # nothing holds them), the milli-accelerators free on its cards (idle ones whole, shared
    # ones less their live shares), and what its live allocations hold. A new node holds
    # nothing and has no cards yet.
    room_cards = models.PositiveSmallIntegerField(_("accelerators counted"), default=0)
    room_idle = models.PositiveSmallIntegerField(_("idle accelerators counted"), default=0)
    room_free_milli = models.PositiveIntegerField(_("free milli-accelerators counted"), default=0)
    room_vcpu_held = models.PositiveIntegerField(_("vCPU held counted"), default=0)
    room_ram_gb_held = models.PositiveIntegerField(_("RAM held counted (GB)"), default=0)
    # What one loaded card draws, from the telemetry it was read in (`adapter.measured_power`,
    # written with the telemetry), and when that telemetry was taken: placement's energy
    # score reads it while fresh, and the TDP otherwise. None: nothing loaded was measured.
    loaded_watts = models.FloatField(_("measured power under load (W)"), null=True, blank=True)
    loaded_watts_at = models.DateTimeField(_("measured at"), null=True, blank=True)
    # When the telemetry was taken (its `updated_at`), kept with it (`keep_card_readings`) with
    # each card's reading (`Accelerator.idle_since`), so that finding idle hosts reads columns
    # rather than decoding every node's telemetry. None: no telemetry, or no readable time.
    telemetry_at = models.DateTimeField(_("telemetry taken at"), null=True, blank=True)

    class Meta:
        verbose_name = _("node")
        verbose_name_plural = _("nodes")
        ordering = ["pool", "hostname"]
        # Placement's reads of the nodes that may take new work (`shortlist`): each pool's
        # few best nodes for each amount of free room, drawing least first (and the unmeasured
        # ones, by id, after them); the first nodes of one kind of room (`RoomTally`'s), by
        # id, a decision lists as rejected; and those whose measured power went stale.
        indexes = [
            models.Index(
                fields=["pool", "room_free_milli", "loaded_watts", "id"],
                condition=Q(health="healthy", is_drained=False),
                name="node_shortlist",
            ),
            models.Index(
                fields=[*ROOM_KIND, "id"],
                condition=Q(health="healthy", is_drained=False),
                name="node_room_counts",
            ),
            models.Index(
                fields=["pool", "loaded_watts_at"],
                condition=Q(health="healthy", is_drained=False, loaded_watts__isnull=False),
                name="node_power_measured_at",
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["pool", "hostname"], name="node_hostname_unique"),
            models.CheckConstraint(
                condition=Q(health__in=NodeHealth.values), name="node_health_known"
            ),
            models.CheckConstraint(condition=Q(vcpu_total__gt=0), name="node_vcpu_positive"),
            models.CheckConstraint(condition=Q(ram_gb_total__gt=0), name="node_ram_positive"),
        ]

    def __str__(self):
        return self.hostname


class RoomTally(models.Model):
    """How many schedulable nodes (healthy, not drained) of a pool have one room, as
    `Node.room_*` keeps it with the node's size: what placement counts the nodes that fitted
    and were rejected with (`shortlist.Shortlist.census`), in as many rows as a park has kinds
    of room, however many nodes it has. Never written by Django: on PostgreSQL a statement
    trigger on the nodes' table adds what each statement changed (migration 0020), so the
    tally is exact in every snapshot; SQLite has no trigger and counts the nodes instead.

    Each backend process adds to rows of its own (`backend`, PostgreSQL's process id), so two
    transactions never wait for each other on a tally row, whatever nodes they change; the
    capacity sampler's beat folds the rows of committed transactions into `backend` 0 and
    corrects any drift from the nodes (`rooms.correct_tallies`). A row is a delta: only the
    sum over backends is a count."""

    # No foreign key: deleting a pool deletes its nodes and its tally rows in either order
    # (the unique constraint's index serves a pool's rows).
    pool = models.ForeignKey(
        Pool, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    room_cards = models.PositiveSmallIntegerField()
    room_idle = models.PositiveSmallIntegerField()
    vcpu_total = models.PositiveIntegerField()
    room_vcpu_held = models.PositiveIntegerField()
    ram_gb_total = models.PositiveIntegerField()
    room_ram_gb_held = models.PositiveIntegerField()
    backend = models.IntegerField()
    nodes = models.IntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=[*ROOM_KIND, "backend"], name="room_tally_unique")
        ]

    def __str__(self):
        return f"{self.nodes} of pool {self.pool_id} (backend {self.backend})"


class Accelerator(models.Model):
    """One physical accelerator. At most one live allocation holds it (the FK is the lock).

    A card shared by training tasks (`Allocation.share_milli`) is held, through this FK, by one
    of its live share allocations for as long as any share is live: whole-card placements and
    every count of free cards then pass it by, and releasing a share hands the FK to another
    live share of the card, or frees it with the last one.
    """

    node = models.ForeignKey(
        Node, on_delete=models.CASCADE, related_name="accelerators", verbose_name=_("node")
    )
    index = models.PositiveSmallIntegerField(_("index"))
    serial = models.CharField(_("serial / UUID"), max_length=80, blank=True)
    # Set by the card's server (the host agent: ECC errors, a card that stopped answering or
    # vanished): no new work is given this card, whoever holds it keeps it.
    out_of_service = models.BooleanField(
        _("out of service"),
        default=False,
        help_text=_("Reported faulty or missing by its server: no new work is placed on it."),
    )
    allocation = models.ForeignKey(
        "Allocation",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="accelerators",
        verbose_name=_("held by"),
    )
    # The card's reading in its node's telemetry (`Node.telemetry_at`), kept with it: since
    # when it reads idle (None: busy, unread or unreadable) and its utilization.
    idle_since = models.DateTimeField(_("idle since"), null=True, blank=True)
    utilization_pct = models.FloatField(_("utilization (%)"), null=True, blank=True)

    class Meta:
        verbose_name = _("accelerator")
        verbose_name_plural = _("accelerators")
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="accelerator_index_unique"),
        ]
        indexes = [
            models.Index(fields=["node", "allocation"]),
            # Held cards that read idle, and those that don't: the idle hosts' query
            # (apps.orders.idle) starts from the first and probes the second, so a busy
            # host's cards are never joined.
            models.Index(
                fields=["allocation"],
                condition=Q(allocation__isnull=False, idle_since__isnull=False),
                name="accelerator_held_idle",
            ),
            models.Index(
                fields=["allocation"],
                condition=Q(allocation__isnull=False, idle_since__isnull=True),
                name="accelerator_held_busy",
            ),
        ]

    def __str__(self):
        return f"{self.node}#{self.index}"


class Allocation(models.Model):
    """What one instance or task holds on a node: CPU, memory and (via Accelerator) devices."""

    node = models.ForeignKey(
        Node, on_delete=models.PROTECT, related_name="allocations", verbose_name=_("node")
    )
    workload = models.ForeignKey(
        Workload, on_delete=models.CASCADE, related_name="allocations", verbose_name=_("workload")
    )
    vcpu = models.PositiveIntegerField(_("vCPU"))
    ram_gb = models.PositiveIntegerField(_("RAM (GB)"))
    # A training task asking for less than one card holds a share of one card: thousandths of
    # it, on `shared_accelerator`. 0 for an allocation of whole cards (held through the FK of
    # Accelerator). What a card has left is 1000 minus its live shares, re-counted under the
    # node's lock before a share is added, so a card is never sold past 1000.
    share_milli = models.PositiveSmallIntegerField(
        _("share of one accelerator (thousandths)"), default=0
    )
    shared_accelerator = models.ForeignKey(
        Accelerator,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="shares",
        verbose_name=_("shared accelerator"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    released_at = models.DateTimeField(_("released at"), null=True, blank=True)

    class Meta:
        verbose_name = _("allocation")
        verbose_name_plural = _("allocations")
        constraints = [
            models.CheckConstraint(
                condition=(Q(share_milli=0) & Q(shared_accelerator__isnull=True))
                | (
                    Q(share_milli__gt=0)
                    & Q(share_milli__lt=1000)
                    & Q(shared_accelerator__isnull=False)
                ),
                name="allocation_share_of_one_card",
            ),
            # A host or a task holds at most one live allocation on a node at a time; a
            # multi-node (gang) task holds one on each of its nodes.
            models.UniqueConstraint(
                fields=["workload", "node"],
                condition=Q(released_at__isnull=True),
                name="allocation_one_live_per_workload_node",
            ),
        ]
        indexes = [
            models.Index(fields=["node", "released_at"]),
            models.Index(fields=["shared_accelerator", "released_at"]),
        ]

    def __str__(self):
        return f"{self.workload} @ {self.node}"

    @property
    def is_share(self) -> bool:
        return self.share_milli > 0


class SchedulingPolicy(models.Model):
    """How much a park's operator weighs each part of a placement's score (DESIGN.md,
    Scheduling). A park without a row schedules by `SchedulingPolicy.default_for(park)`: every
    part weighs the same and the tenant's preference has half the say."""

    park = models.OneToOneField(
        Park, on_delete=models.CASCADE, related_name="scheduling_policy", verbose_name=_("park")
    )
    region_weight = models.DecimalField(
        _("region and latency"), max_digits=5, decimal_places=2, default=Decimal("1.00")
    )
    performance_weight = models.DecimalField(
        _("performance"), max_digits=5, decimal_places=2, default=Decimal("1.00")
    )
    energy_weight = models.DecimalField(
        _("energy and carbon"), max_digits=5, decimal_places=2, default=Decimal("1.00")
    )
    price_weight = models.DecimalField(
        _("price"), max_digits=5, decimal_places=2, default=Decimal("1.00")
    )
    fragmentation_weight = models.DecimalField(
        _("fragmentation"), max_digits=5, decimal_places=2, default=Decimal("1.00")
    )
    operator_share = models.DecimalField(
        _("operator's share of the say"),
        max_digits=3,
        decimal_places=2,
        default=Decimal("0.50"),
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        help_text=_("0: the tenant's preference alone decides; 1: these weights alone."),
    )
    # What a preemptible task pays less than the pool's price: it may be requeued (its run
    # ended, billed up to then) to make room for a task that may not.
    preemptible_discount_pct = models.PositiveSmallIntegerField(
        _("preemptible discount (%)"),
        default=30,
        validators=[MaxValueValidator(90)],
        help_text=_(
            "How much less a preemptible task pays per hour; the park may requeue it to make "
            "room for a task that is not preemptible."
        ),
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("updated by"),
    )

    WEIGHT_FIELDS = {
        "region": "region_weight",
        "performance": "performance_weight",
        "energy": "energy_weight",
        "price": "price_weight",
        "fragmentation": "fragmentation_weight",
    }

    class Meta:
        verbose_name = _("scheduling policy")
        verbose_name_plural = _("scheduling policies")
        constraints = [
            models.CheckConstraint(
                condition=Q(region_weight__gte=0)
                & Q(performance_weight__gte=0)
                & Q(energy_weight__gte=0)
                & Q(price_weight__gte=0)
                & Q(fragmentation_weight__gte=0),
                name="scheduling_weights_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(region_weight__gt=0)
                | Q(performance_weight__gt=0)
                | Q(energy_weight__gt=0)
                | Q(price_weight__gt=0)
                | Q(fragmentation_weight__gt=0),
                name="scheduling_weights_not_all_zero",
            ),
            models.CheckConstraint(
                condition=Q(operator_share__gte=0) & Q(operator_share__lte=1),
                name="scheduling_operator_share_0_to_1",
            ),
            models.CheckConstraint(
                condition=Q(preemptible_discount_pct__lte=90),
                name="scheduling_preemptible_discount_at_most_90",
            ),
        ]

    def __str__(self):
        return gettext("Scheduling policy of %(park)s") % {"park": self.park}

    @classmethod
    def default_for(cls, park) -> "SchedulingPolicy":
        """The policy a park without its own row schedules by (not saved)."""
        return cls(park=park)

    def weights(self) -> dict[str, float]:
        """{"region": 1.0, ...}: the operator's weights as the scorer takes them."""
        return {part: float(getattr(self, name)) for part, name in self.WEIGHT_FIELDS.items()}


# Why a node was not a candidate: the placement engine's filter codes, and the portal's own.
REJECTION_REASONS = {
    "drained": _("drained for maintenance"),
    "gpu_model": _("the task does not run on this accelerator model"),
    "image": _("its backend cannot run the task's image"),
    "region": _("outside the allowed regions"),
    "cpu": _("not enough free vCPU"),
    "memory": _("not enough free RAM"),
    "gpu_count": _("not enough whole accelerators free"),
    "gpu_share": _("no accelerator has a large enough share free"),
    "not_priced": _("the accelerator is not priced in this region"),
    "max_price": _("above the task's maximum price"),
    "taken": _("taken by another placement at the last moment"),
    "other_region": _("in another region than the one the host was priced in"),
    "reserved": _("held for a task waiting ahead in the queue"),
    "no_nodes": _("the park has no host in service"),
    "single_node": _("its servers run a task on one server only, not across several nodes"),
    "gang_nodes": _("too few of its nodes have room for one member each"),
}

SCORE_PARTS = ("region", "performance", "energy", "price", "fragmentation")
SCORE_PART_LABELS = {
    "region": _("Region / latency"),
    "performance": _("Performance"),
    "energy": _("Energy / carbon"),
    "price": _("Price"),
    "fragmentation": _("Fragmentation"),
}


class Placement(models.Model):
    """One scheduling decision with every candidate and its score parts, kept to explain it.

    `weights`: {"policy": the fragmentation measure ("best-fit"), "weights": the normalized
    weights the scores were combined with, "operator": the park's weights, "operator_share",
    "park_policy" ("park" or "default"), "preference": the tenant's, "currency", "left_free":
    whole accelerators the chosen node kept free}. `candidates`: one dict per node looked at:
    "node", "node_id", "pool", "pool_id", "region", "region_name", "free_accelerators",
    "free_vcpu", "free_ram_gb", "fits", "total" (None when rejected), "parts" (0..1 per score
    part, 1 = best candidate), "raw" (the measures behind them: latency_ms, perf_units,
    carbon_g, price_minor, left_free, ...), "rejected" (a code of REJECTION_REASONS or None).
    Only the best hosts that fitted and the first that did not are kept (see
    `adapter.placement_record`); `weights["considered"]` counts them all ({"fitted": n,
    "rejected": {code: n}}; absent from rows kept before, which listed every candidate).
    Rows kept from before the weighted scorer have only the best-fit keys.
    """

    workload = models.ForeignKey(
        Workload, on_delete=models.CASCADE, related_name="placements", verbose_name=_("workload")
    )
    chosen_pool = models.ForeignKey(
        Pool,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("chosen pool"),
    )
    chosen_node = models.ForeignKey(
        Node,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("chosen node"),
    )
    weights = models.JSONField(_("weights"), default=dict)
    candidates = models.JSONField(_("candidates"), default=list)
    created_at = models.DateTimeField(_("decided at"), auto_now_add=True)

    class Meta:
        verbose_name = _("placement")
        verbose_name_plural = _("placements")
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.workload} → {self.chosen_node or '—'}"

    # --- reading the stored decision ----------------------------------------------------------

    @property
    def is_scored(self) -> bool:
        """Stored by the weighted scorer (older rows kept only the best-fit facts)."""
        return "weights" in (self.weights or {})

    def chosen_candidate(self) -> dict | None:
        if self.chosen_node_id is None:
            return None
        return next((c for c in self.candidates if c.get("node_id") == self.chosen_node_id), None)

    def feasible_candidates(self) -> list[dict]:
        return [c for c in self.candidates if c.get("total") is not None]

    def fitted_count(self) -> int:
        """How many hosts had room, kept or not."""
        considered = (self.weights or {}).get("considered")
        if considered:
            return considered["fitted"]
        return len(self.feasible_candidates() if self.is_scored else self._fitting())

    def rejected_counts(self) -> list[tuple[str, int]]:
        """[(why not, in the reader's words, how many hosts)], most first: every host that
        had no room, kept or not."""
        considered = (self.weights or {}).get("considered")
        counts = (
            considered["rejected"]
            if considered
            else Counter(c["rejected"] for c in self.candidates if c.get("rejected"))
        )
        return [
            (str(REJECTION_REASONS.get(code, code)), count)
            for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        ]

    def rejected_candidates(self) -> list[dict]:
        """The nodes that could not take it, each with `reason`: why, in the reader's words."""
        return [
            {**c, "reason": str(REJECTION_REASONS.get(c["rejected"], c["rejected"]))}
            for c in self.candidates
            if c.get("rejected")
        ]

    def reasons(self, top: int = 2) -> list[dict]:
        """Why the chosen node won: the score parts where it beat the runner-up most (weighted),
        each {"part", "best", "text"}. On a full tie the fragmentation part stands in (the
        best-fit measure is what keeps large holes for large requests)."""
        chosen = self.chosen_candidate()
        if chosen is None or not self.is_scored:
            return []
        weights = self.weights["weights"]
        others = [c for c in self.feasible_candidates() if c is not chosen]
        runner = max(others, key=lambda c: c["total"], default=None)

        def lead(part):
            theirs = runner["parts"][part] if runner else 0.0
            return weights.get(part, 0) * (chosen["parts"][part] - theirs)

        weighted = [p for p in SCORE_PARTS if weights.get(p, 0) > 0]
        ahead = sorted((p for p in weighted if lead(p) > 1e-9), key=lead, reverse=True)
        if not ahead:
            if "fragmentation" in weighted:
                ahead = ["fragmentation"]
            else:
                ahead = sorted(weighted, key=lambda p: weights[p], reverse=True)[:1]
        return [
            {
                "part": part,
                "best": chosen["parts"][part] >= 1.0 - 1e-9,
                "text": self._reason_text(part, chosen, chosen["parts"][part] >= 1.0 - 1e-9),
            }
            for part in ahead[:top]
        ]

    def _reason_text(self, part: str, chosen: dict, best: bool) -> str:
        raw = chosen.get("raw", {})
        if part == "region":
            text = (
                gettext("lowest latency (%(ms)s ms)")
                if best
                else gettext("low latency (%(ms)s ms)")
            )
            return text % {"ms": _number(raw.get("latency_ms", 0))}
        if part == "performance":
            text = (
                gettext("fastest accelerators (%(units)s compute units per card)")
                if best
                else gettext("fast accelerators (%(units)s compute units per card)")
            )
            return text % {"units": _number(raw.get("perf_units", 0), 3)}
        if part == "energy":
            text = (
                gettext("lowest carbon (%(grams)s g CO₂e per compute-unit-hour)")
                if best
                else gettext("low carbon (%(grams)s g CO₂e per compute-unit-hour)")
            )
            return text % {"grams": _number(raw.get("carbon_g", 0))}
        if part == "price":
            text = (
                gettext("lowest price (%(price)s/h)")
                if best
                else gettext("low price (%(price)s/h)")
            )
            return text % {"price": self._hourly(raw.get("price_minor", 0))}
        text = (
            gettext("fewest accelerators left free (%(left)s)")
            if best
            else gettext("few accelerators left free (%(left)s)")
        )
        return text % {"left": _number(raw.get("left_free", 0), 2)}

    @property
    def currency(self) -> str:
        return (self.weights or {}).get("currency", "CNY")

    def plain_reason(self) -> str:
        """Why here in a tenant's words, one short phrase; the figures are `describe`'s, for
        the park's operators."""
        if self.chosen_node is None:
            return gettext("No host had room for it yet.")
        region = self.chosen_pool.region.name
        if self.gang:
            return gettext("%(region)s: %(count)d nodes of one pool, all free for it at once.") % {
                "region": region,
                "count": self.gang["node_count"],
            }
        if self.fitted_count() <= 1:
            return gettext("%(region)s: the only place with free cards for it.") % {
                "region": region
            }
        reasons = self.reasons(top=1)
        text = str(PLAIN_REASONS.get(reasons[0]["part"] if reasons else "fragmentation"))
        return " ".join(filter(None, [text % {"region": region}, self.price_note()]))

    def price_note(self) -> str:
        """What the choice costs against the cheapest host that had room, and what it gains
        for it (a task may run on any of several models at very different prices); or, when
        faster cards were passed over because the same work would cost too much more there,
        that. Empty when the choice is the cheapest and nothing was passed over."""
        chosen = self.chosen_candidate()
        cheapest = ((self.weights or {}).get("considered") or {}).get("cheapest")
        if chosen is None or not self.is_scored or not cheapest:
            return ""
        raw = chosen["raw"]
        times = raw["price_minor"] / cheapest["price_minor"]
        speed = raw["perf_units"] / cheapest["perf_units"] if cheapest["perf_units"] else 1
        if times > 1.005:
            values = {
                "times": _number(times, 1),
                "model": cheapest["model"],
                "region": cheapest["region_name"],
                "price": self._hourly(cheapest["price_minor"]),
            }
            if speed <= 1.005:
                return (
                    gettext(
                        "It costs %(times)s× the cheapest host with room (%(model)s in "
                        "%(region)s, %(price)s/h)."
                    )
                    % values
                )
            return gettext(
                "It costs %(times)s× the cheapest host with room (%(model)s in %(region)s, "
                "%(price)s/h); its cards are %(speed)s× as fast, so the same work costs "
                "%(work)s× as much."
            ) % {**values, "speed": _number(speed, 1), "work": _number(times / speed, 1)}
        passed = [c for c in self.feasible_candidates() if c.get("dearer")]
        if not passed:
            return ""
        faster = max(passed, key=lambda c: c["total"])
        work = (faster["raw"]["price_minor"] / faster["raw"]["perf_units"]) / (
            raw["price_minor"] / raw["perf_units"]
        )
        return gettext(
            "Faster cards had room (%(model)s, %(price)s/h), but the same work would cost "
            "%(work)s× as much there; choose “Fastest” to put speed first."
        ) % {
            "model": faster.get("model", faster["node"]),
            "price": self._hourly(faster["raw"]["price_minor"]),
            "work": _number(work, 1),
        }

    def _hourly(self, price_minor) -> str:
        return format_money(minor_units(price_minor), self.currency)

    def _fitting(self) -> list[dict]:
        return [c for c in self.candidates if c.get("fits")]

    @property
    def gang(self) -> dict | None:
        """A gang task's decision (`orchestration.gangs`): {"nodes", "node_count",
        "cards_per_node", "pool", "pools": [{"pool", "nodes", "fitting", "chosen",
        "hourly_minor", "left_free", "rejected"}]}; None for one node's."""
        return (self.weights or {}).get("gang")

    def gang_pools(self) -> list[dict]:
        """The pools a gang decision weighed, each with `reason` (why not) in the reader's
        words."""
        return [
            {**pool, "reason": str(REJECTION_REASONS.get(pool.get("rejected"), ""))}
            for pool in (self.gang or {}).get("pools", [])
        ]

    def _describe_gang(self) -> str:
        gang = self.gang
        chosen = next((p for p in gang["pools"] if p.get("chosen")), {})
        others = sum(1 for p in gang["pools"] if not p.get("chosen") and not p.get("rejected"))
        text = gettext(
            "Placed all or nothing on %(count)d nodes of %(pool)s (%(nodes)s), %(cards)d "
            "accelerators on each, %(price)s/h for all of them; %(left)d accelerators stay "
            "free on those nodes."
        ) % {
            "count": gang["node_count"],
            "pool": gang["pool"],
            "nodes": gettext(", ").join(gang["nodes"]),
            "cards": gang["cards_per_node"],
            "price": self._hourly(chosen.get("hourly_minor", 0)),
            "left": chosen.get("left_free", 0),
        }
        if others:
            text += " " + gettext(
                "Of the %(pools)d pools with enough nodes it is the cheapest, and among equals "
                "the one leaving the fewest cards idle."
            ) % {"pools": others + 1}
        else:
            text += " " + gettext("It is the only pool with enough nodes free for it now.")
        return text

    def describe(self) -> str:
        """Why here, in the reader's language (so it is built when shown, not when stored)."""
        return " ".join(filter(None, [self._describe(), self.preemption_note()]))

    def preemption_note(self) -> str:
        """Which preemptible tasks were requeued to make this room (apps.orchestration.preemption),
        and why those; empty when none were."""
        requeued = list(
            Preemption.objects.filter(
                preempted_by__workload_id=self.workload_id, at__lte=self.created_at
            ).order_by("task_id")
        )
        if not requeued:
            return ""
        return gettext(
            "No host had room: the preemptible tasks %(tasks)s were requeued to make it "
            "(%(seconds)d s of run lost, the fewest of the ways to make room, then the "
            "cheapest)."
        ) % {
            "tasks": gettext(", ").join(f"#{p.task_id}" for p in requeued),
            "seconds": sum(p.billed_seconds for p in requeued),
        }

    def _describe(self) -> str:
        if self.chosen_node is None:
            return gettext("No host fitted.")
        if self.gang:
            return self._describe_gang()
        values = {"node": self.chosen_node.hostname, "region": self.chosen_pool.region.name}
        if not self.is_scored:
            return gettext(
                "Placed on %(node)s in %(region)s: of the %(fitting)d hosts with room, it is left "
                "with the fewest free accelerators (%(left)d), keeping large holes for large "
                "hosts."
            ) % {
                **values,
                "fitting": self.fitted_count(),
                "left": self.weights.get("left_free", 0),
            }
        separator = gettext(", ")
        if self.fitted_count() <= 1:
            raw = (self.chosen_candidate() or {}).get("raw") or {}
            facts = []
            if raw.get("price_minor"):
                facts.append(gettext("%(price)s/h") % {"price": self._hourly(raw["price_minor"])})
            facts.append(
                gettext("%(left)s accelerators left free")
                % {"left": _number(raw.get("left_free", 0), 2)}
            )
            return gettext(
                "Placed on %(node)s in %(region)s, the only host with room (%(facts)s)."
            ) % {
                **values,
                "facts": separator.join(facts),
            }
        because = gettext("Placed on %(node)s in %(region)s because: %(reasons)s.") % {
            **values,
            "reasons": separator.join(r["text"] for r in self.reasons()),
        }
        return " ".join(filter(None, [because, self.price_note()]))


# The score part that decided a placement, as a tenant reads it.
PLAIN_REASONS = {
    "price": _("%(region)s: the cheapest place with free cards."),
    "region": _("%(region)s: the closest place to the regions you prefer."),
    "energy": _("%(region)s: the lowest energy use and carbon for the same work."),
    "performance": _("%(region)s: the fastest cards with room for it."),
    "fragmentation": _(
        "%(region)s: a host your size fits exactly, keeping whole hosts free for large orders."
    ),
}


def minor_units(amount) -> int:
    """A stored measure of money (a float) as whole minor units, half up."""
    return int(Decimal(str(amount)).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _number(value, places: int = 0) -> str:
    """A measure for a sentence: at most `places` decimals, no trailing zeros."""
    text = f"{float(value):.{places}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


class TaskPreference(models.TextChoices):
    BALANCED = "balanced", _("Balanced")
    FAST = "fast", _("Fastest")
    CHEAP = "cheap", _("Cheapest")
    GREEN = "green", _("Greenest")


class TaskState(models.TextChoices):
    QUEUED = "queued", _("Queued")
    PLACED = "placed", _("Placed")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


_T = TaskState
TASK_TRANSITIONS = {
    _T.QUEUED: frozenset({_T.PLACED, _T.CANCELLED, _T.FAILED}),
    _T.PLACED: frozenset({_T.RUNNING, _T.QUEUED, _T.CANCELLED, _T.FAILED}),
    # Running → queued: a preemptible task requeued to make room (apps.orchestration.preemption).
    _T.RUNNING: frozenset({_T.SUCCEEDED, _T.FAILED, _T.CANCELLED, _T.QUEUED}),
    _T.SUCCEEDED: frozenset(),
    _T.FAILED: frozenset(),
    _T.CANCELLED: frozenset(),
}


class Task(models.Model):
    """A training job, queued until the scheduler places it (apps.orchestration.scheduling)."""

    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="tasks", verbose_name=_("organization")
    )
    # What it reserves, in the rows billing and orchestration keep (allocations, meters).
    workload = models.OneToOneField(
        Workload, on_delete=models.PROTECT, related_name="task", verbose_name=_("workload")
    )
    name = models.CharField(_("name"), max_length=80)
    image = models.ForeignKey(
        Image, on_delete=models.PROTECT, related_name="tasks", verbose_name=_("image")
    )
    command = models.TextField(_("command"))
    accelerator_model = models.ForeignKey(
        AcceleratorModel,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="tasks",
        help_text=_("Empty: any model compatible with the image."),
        verbose_name=_("accelerator model"),
    )
    # Thousandths of an accelerator: 1000 is one whole card, 250 a quarter share. On each of its
    # `node_count` nodes, as its vCPU and RAM are (a gang task: N nodes × M whole cards).
    accelerator_milli = models.PositiveIntegerField(_("accelerators (thousandths)"), default=1000)
    vcpu = models.PositiveIntegerField(_("vCPU"), default=8)
    ram_gb = models.PositiveIntegerField(_("RAM (GB)"), default=32)
    node_count = models.PositiveSmallIntegerField(
        _("nodes"),
        default=1,
        help_text=_("Above 1: placed all or nothing on that many nodes of one pool."),
    )
    max_hourly_minor = models.BigIntegerField(
        _("max price per hour (minor units)"), null=True, blank=True
    )
    # Fixed when the task is placed; metering charges it per second of running time.
    hourly_minor = models.BigIntegerField(_("price per hour (minor units)"), default=0)
    deadline = models.DateTimeField(_("deadline"), null=True, blank=True)
    allowed_regions = models.ManyToManyField(
        Region, blank=True, related_name="+", verbose_name=_("allowed regions")
    )
    preference = models.CharField(
        _("preference"),
        max_length=16,
        choices=TaskPreference.choices,
        default=TaskPreference.BALANCED,
    )
    priority = models.SmallIntegerField(_("priority"), default=0)
    preemptible = models.BooleanField(
        _("preemptible"),
        default=False,
        help_text=_(
            "Cheaper; the park may stop it to make room for a task that is not preemptible, "
            "and queue it again (billed up to the stop)."
        ),
    )
    state = models.CharField(
        _("state"), max_length=16, choices=TaskState.choices, default=TaskState.QUEUED
    )
    pool = models.ForeignKey(
        Pool,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="tasks",
        verbose_name=_("pool"),
    )
    node = models.ForeignKey(
        Node,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="tasks",
        verbose_name=_("node"),
    )
    backend_handle = models.CharField(_("backend handle"), max_length=200, blank=True)
    # The digest of the image it was handed to its backend to run in, as the pool reported it
    # (`Pool.images`); empty where the pool runs no images (the command ran on the bare node).
    image_digest = models.CharField(_("image digest"), max_length=80, blank=True)
    # What the backend said last: {"state", "message", "node", "devices", "exit_code"}.
    backend_status = models.JSONField(_("backend status"), default=dict, blank=True)
    logs = models.TextField(_("logs"), blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    submitted_at = models.DateTimeField(_("submitted at"), auto_now_add=True)
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)

    class Meta:
        # Moved from the orders app; the table keeps its name (a state-only migration).
        db_table = "orders_task"
        verbose_name = _("task")
        verbose_name_plural = _("tasks")
        ordering = ["-submitted_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=TaskState.values), name="task_state_known"
            ),
            models.CheckConstraint(
                condition=Q(preference__in=TaskPreference.values), name="task_preference_known"
            ),
            models.CheckConstraint(
                condition=Q(accelerator_milli__gt=0)
                & (Q(accelerator_milli__lt=1000) | Q(Exact(Mod("accelerator_milli", 1000), 0))),
                name="task_accelerators_share_or_whole",
            ),
            models.CheckConstraint(
                condition=Q(node_count=1)
                | (Q(node_count__gt=1) & Q(Exact(Mod("accelerator_milli", 1000), 0))),
                name="task_gang_whole_cards",
            ),
            models.CheckConstraint(
                condition=Q(max_hourly_minor__isnull=True) | Q(max_hourly_minor__gte=0),
                name="task_max_price_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(finished_at__isnull=True) | Q(started_at__isnull=False),
                name="task_finished_after_started",
            ),
        ]
        indexes = [models.Index(fields=["state", "priority", "submitted_at"])]

    def __str__(self):
        return self.name

    @property
    def total_accelerator_milli(self) -> int:
        """What it holds on all its nodes together (quotas and prices count it all)."""
        return self.accelerator_milli * self.node_count

    @property
    def is_gang(self) -> bool:
        return self.node_count > 1

    def shape_display(self) -> str:
        """ "2 nodes × 2 cards", "1 card", "0.25 card"."""
        cards = self.accelerator_milli / 1000
        per_node = ngettext("%(n)s card", "%(n)s cards", 1 if cards <= 1 else 2) % {
            "n": f"{cards:g}"
        }
        if not self.is_gang:
            return per_node
        return gettext("%(nodes)d nodes × %(per_node)s") % {
            "nodes": self.node_count,
            "per_node": per_node,
        }


class Preemption(models.Model):
    """A preemptible task's run ended to make room for a task that may not be preempted, and
    the task queued again (apps.orchestration.preemption): its state history and its bill."""

    task = models.ForeignKey(
        Task, on_delete=models.CASCADE, related_name="preemptions", verbose_name=_("task")
    )
    preempted_by = models.ForeignKey(
        Task,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="preempted",
        verbose_name=_("preempted by"),
    )
    nodes = models.JSONField(_("nodes"), default=list)  # the hostnames it gave up
    # Its run: from the backend's start to the preemption, every second billed.
    ran_from = models.DateTimeField(_("ran from"), null=True, blank=True)
    at = models.DateTimeField(_("preempted at"))
    billed_seconds = models.PositiveIntegerField(_("seconds billed"))
    hourly_minor = models.BigIntegerField(_("price per hour (minor units)"))

    class Meta:
        verbose_name = _("preemption")
        verbose_name_plural = _("preemptions")
        ordering = ["-at", "-pk"]

    def __str__(self):
        return f"{self.task} @ {self.at:%Y-%m-%d %H:%M:%S}"


class FairShare(models.Model):
    """An organization's share of its park's accelerators when they are contended, set by the
    park's operators (absent: 1). The queue orders waiting tasks by usage over share, and a
    Slurm backend's account gets it as its `fairshare`."""

    organization = models.OneToOneField(
        Organization,
        on_delete=models.CASCADE,
        related_name="fair_share",
        verbose_name=_("organization"),
    )
    shares = models.PositiveIntegerField(
        _("shares"), default=1, validators=[MinValueValidator(1), MaxValueValidator(1000)]
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("updated by"),
    )

    class Meta:
        verbose_name = _("fair share")
        verbose_name_plural = _("fair shares")
        constraints = [
            models.CheckConstraint(
                condition=Q(shares__gte=1) & Q(shares__lte=1000), name="fair_share_1_to_1000"
            ),
        ]

    def __str__(self):
        return f"{self.organization}: {self.shares}"


class CapacitySample(models.Model):
    """One pool's capacity at one moment, written by `apps.orchestration.capacity.sample_capacity`:
    what the utilization and energy charts of the overview draw."""

    park = models.ForeignKey(
        Park, on_delete=models.CASCADE, related_name="capacity_samples", verbose_name=_("park")
    )
    pool = models.ForeignKey(
        "Pool",
        on_delete=models.CASCADE,
        related_name="capacity_samples",
        verbose_name=_("pool"),
    )
    taken_at = models.DateTimeField(_("taken at"))
    accelerators_total = models.PositiveIntegerField(_("accelerators"))
    accelerators_allocated = models.PositiveIntegerField(_("allocated"))
    accelerators_idle = models.PositiveIntegerField(
        _("allocated but idle"), default=0, help_text=_("By the backend's telemetry.")
    )
    utilization_pct = models.DecimalField(
        _("measured utilization (%)"),
        max_digits=5,
        decimal_places=1,
        null=True,
        blank=True,
        help_text=_("Mean over the allocated accelerators that report telemetry."),
    )
    watts = models.PositiveIntegerField(
        _("estimated power (W)"), help_text=_("Allocated accelerators × TDP × PUE.")
    )
    measured_watts = models.PositiveIntegerField(
        _("measured power (W)"),
        null=True,
        blank=True,
        help_text=_(
            "What the pool's accelerators that report their power drew (the host agent reads "
            "it through NVML), idle ones included, × PUE; empty when none reports it."
        ),
    )
    measured_accelerators = models.PositiveIntegerField(
        _("accelerators measured"), default=0, help_text=_("How many reported their power.")
    )

    class Meta:
        # Moved from the operations app; the table keeps its name (a state-only migration).
        db_table = "operations_capacitysample"
        verbose_name = _("capacity sample")
        verbose_name_plural = _("capacity samples")
        ordering = ["-taken_at", "pool"]
        constraints = [
            models.UniqueConstraint(fields=["pool", "taken_at"], name="capacity_sample_unique"),
            models.CheckConstraint(
                condition=models.Q(accelerators_allocated__lte=models.F("accelerators_total")),
                name="capacity_sample_allocated_within_total",
            ),
            models.CheckConstraint(
                condition=models.Q(accelerators_idle__lte=models.F("accelerators_allocated")),
                name="capacity_sample_idle_within_allocated",
            ),
            models.CheckConstraint(
                condition=models.Q(utilization_pct__isnull=True)
                | models.Q(utilization_pct__gte=0, utilization_pct__lte=100),
                name="capacity_sample_utilization_pct",
            ),
        ]
        indexes = [models.Index(fields=["park", "taken_at"])]

    def __str__(self):
        return f"{self.pool_id} @ {self.taken_at:%Y-%m-%d %H:%M}"
