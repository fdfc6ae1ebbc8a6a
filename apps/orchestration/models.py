from django.db import models
from django.db.models import Q
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import AcceleratorModel, Region
from apps.tenants.models import Park


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

    class Meta:
        verbose_name = _("backend")
        verbose_name_plural = _("backends")
        ordering = ["park", "name"]
        constraints = [
            models.UniqueConstraint(fields=["park", "name"], name="backend_name_unique"),
        ]

    def __str__(self):
        return f"{self.name} ({self.driver})"


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


class Node(models.Model):
    """A host in a pool. Free capacity is derived from allocations, never kept as a counter;
    placement locks the node row while it allocates (SELECT ... FOR UPDATE)."""

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

    class Meta:
        verbose_name = _("node")
        verbose_name_plural = _("nodes")
        ordering = ["pool", "hostname"]
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


class Accelerator(models.Model):
    """One physical accelerator. At most one live allocation holds it (the FK is the lock)."""

    node = models.ForeignKey(
        Node, on_delete=models.CASCADE, related_name="accelerators", verbose_name=_("node")
    )
    index = models.PositiveSmallIntegerField(_("index"))
    serial = models.CharField(_("serial / UUID"), max_length=80, blank=True)
    allocation = models.ForeignKey(
        "Allocation",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="accelerators",
        verbose_name=_("held by"),
    )

    class Meta:
        verbose_name = _("accelerator")
        verbose_name_plural = _("accelerators")
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="accelerator_index_unique"),
        ]
        indexes = [models.Index(fields=["node", "allocation"])]

    def __str__(self):
        return f"{self.node}#{self.index}"


class Allocation(models.Model):
    """What one instance or task holds on a node: CPU, memory and (via Accelerator) devices."""

    node = models.ForeignKey(
        Node, on_delete=models.PROTECT, related_name="allocations", verbose_name=_("node")
    )
    instance = models.ForeignKey(
        "orders.Instance",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="allocations",
        verbose_name=_("instance"),
    )
    task = models.ForeignKey(
        "orders.Task",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="allocations",
        verbose_name=_("task"),
    )
    vcpu = models.PositiveIntegerField(_("vCPU"))
    ram_gb = models.PositiveIntegerField(_("RAM (GB)"))
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    released_at = models.DateTimeField(_("released at"), null=True, blank=True)

    class Meta:
        verbose_name = _("allocation")
        verbose_name_plural = _("allocations")
        constraints = [
            models.CheckConstraint(
                condition=(Q(instance__isnull=False) & Q(task__isnull=True))
                | (Q(instance__isnull=True) & Q(task__isnull=False)),
                name="allocation_one_holder",
            ),
            # An instance or task holds at most one live allocation at a time.
            models.UniqueConstraint(
                fields=["instance"],
                condition=Q(released_at__isnull=True, instance__isnull=False),
                name="allocation_one_live_per_instance",
            ),
            models.UniqueConstraint(
                fields=["task"],
                condition=Q(released_at__isnull=True, task__isnull=False),
                name="allocation_one_live_per_task",
            ),
        ]
        indexes = [models.Index(fields=["node", "released_at"])]

    def __str__(self):
        return f"{self.instance or self.task} @ {self.node}"


class Placement(models.Model):
    """One scheduling decision with every candidate and its score parts, kept to explain it."""

    order = models.ForeignKey(
        "orders.Order",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="placements",
        verbose_name=_("order"),
    )
    task = models.ForeignKey(
        "orders.Task",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="placements",
        verbose_name=_("task"),
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
        constraints = [
            models.CheckConstraint(
                condition=Q(order__isnull=False) | Q(task__isnull=False),
                name="placement_has_subject",
            ),
        ]

    def __str__(self):
        return f"{self.order or self.task} → {self.chosen_node or '—'}"

    def describe(self) -> str:
        """Why here, in the reader's language (so it is built when shown, not when stored)."""
        if self.chosen_node is None:
            return gettext("No host fitted.")
        return gettext(
            "Placed on %(node)s in %(region)s: of the %(fitting)d hosts with room, it is left "
            "with the fewest free accelerators (%(left)d), keeping large holes for large hosts."
        ) % {
            "node": self.chosen_node.hostname,
            "region": self.chosen_pool.region.name,
            "fitting": sum(1 for c in self.candidates if c.get("fits")),
            "left": self.weights.get("left_free", 0),
        }
