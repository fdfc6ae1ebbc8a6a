import base64
import dataclasses
import hashlib

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import Flavor, Image, Region
from apps.core.money import Currency
from apps.orchestration.backends.base import OPEN_INGRESS
from apps.orchestration.models import Node, Pool
from apps.tenants.models import Organization, Park
from apps.workloads.models import Workload


class InstanceState(models.TextChoices):
    PENDING = "pending", _("Pending")
    PROVISIONING = "provisioning", _("Provisioning")
    RUNNING = "running", _("Running")
    STOPPING = "stopping", _("Stopping")
    STOPPED = "stopped", _("Stopped")
    STARTING = "starting", _("Starting")
    RESIZING = "resizing", _("Resizing")
    RELEASING = "releasing", _("Releasing")
    RELEASED = "released", _("Released")
    ERROR = "error", _("Error")


_S = InstanceState
INSTANCE_TRANSITIONS = {
    # pending -> released: an order rejected or cancelled before anything was provisioned.
    _S.PENDING: frozenset({_S.PROVISIONING, _S.RELEASED, _S.ERROR}),
    _S.PROVISIONING: frozenset({_S.RUNNING, _S.RELEASING, _S.ERROR}),
    _S.RUNNING: frozenset({_S.STOPPING, _S.RESIZING, _S.RELEASING, _S.ERROR}),
    _S.STOPPING: frozenset({_S.STOPPED, _S.ERROR}),
    _S.STOPPED: frozenset({_S.STARTING, _S.RESIZING, _S.RELEASING, _S.ERROR}),
    _S.STARTING: frozenset({_S.RUNNING, _S.ERROR}),
    _S.RESIZING: frozenset({_S.RUNNING, _S.STOPPED, _S.ERROR}),
    _S.RELEASING: frozenset({_S.RELEASED, _S.ERROR}),
    _S.ERROR: frozenset({_S.RELEASING}),
    _S.RELEASED: frozenset(),
}
# States that hold quota and accelerators. An instance in error has given both back.
INSTANCE_HOLDING_STATES = frozenset(set(_S.values) - {_S.RELEASED, _S.ERROR})
# States in which the page polls for progress.
INSTANCE_BUSY_STATES = frozenset(
    {_S.PENDING, _S.PROVISIONING, _S.STOPPING, _S.STARTING, _S.RESIZING, _S.RELEASING}
)


class PortProtocol(models.TextChoices):
    TCP = "tcp", "TCP"
    UDP = "udp", "UDP"


PORT_MIN, PORT_MAX = 1, 65535
# The rules of every organization's default group when it is made: everything forwarded to a
# host (its SSH port, its port mappings) open to all.
DEFAULT_SECURITY_RULES = tuple(dataclasses.asdict(rule) for rule in OPEN_INGRESS)


class SecurityGroup(models.Model):
    """An organization's set of ingress rules (安全组): what may reach the forwarded ports
    (SSH, port mappings) of the hosts that use it. Each organization has a default group
    (`networking.default_security_group`, created when first needed); a host without a group
    of its own uses it."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.CASCADE,
        related_name="security_groups",
        verbose_name=_("organization"),
    )
    name = models.CharField(_("name"), max_length=63)
    description = models.CharField(_("description"), max_length=200, blank=True)
    is_default = models.BooleanField(_("default"), default=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("security group")
        verbose_name_plural = _("security groups")
        ordering = ["-is_default", "name", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "name"], name="security_group_name_unique"
            ),
            models.UniqueConstraint(
                fields=["organization"],
                condition=Q(is_default=True),
                name="security_group_one_default",
            ),
        ]

    def __str__(self):
        return self.name

    @property
    def label(self) -> str:
        """The name as people read it: the default group's in their language."""
        return str(_("default")) if self.is_default else self.name


class SecurityGroupRule(models.Model):
    """Let `protocol` traffic from `source` (a CIDR network) reach the host ports
    `from_port`..`to_port` (inclusive)."""

    group = models.ForeignKey(
        SecurityGroup, on_delete=models.CASCADE, related_name="rules", verbose_name=_("group")
    )
    protocol = models.CharField(_("protocol"), max_length=3, choices=PortProtocol.choices)
    from_port = models.PositiveIntegerField(_("from port"))
    to_port = models.PositiveIntegerField(_("to port"))
    source = models.CharField(_("source (CIDR)"), max_length=49)
    description = models.CharField(_("description"), max_length=200, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("security group rule")
        verbose_name_plural = _("security group rules")
        ordering = ["pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(protocol__in=PortProtocol.values), name="security_rule_protocol_known"
            ),
            models.CheckConstraint(
                condition=Q(from_port__gte=PORT_MIN, to_port__lte=PORT_MAX)
                & Q(from_port__lte=models.F("to_port")),
                name="security_rule_port_range",
            ),
        ]

    def __str__(self):
        ports = (
            str(self.from_port)
            if self.from_port == self.to_port
            else f"{self.from_port}-{self.to_port}"
        )
        return f"{self.protocol}/{ports} ← {self.source}"


class Instance(models.Model):
    """A GPU cloud host."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.PROTECT,
        related_name="instances",
        verbose_name=_("organization"),
    )
    # What it reserves, in the rows billing and orchestration keep (allocations, meters, holds).
    workload = models.OneToOneField(
        Workload, on_delete=models.PROTECT, related_name="instance", verbose_name=_("workload")
    )
    name = models.CharField(_("name"), max_length=63)
    flavor = models.ForeignKey(
        Flavor, on_delete=models.PROTECT, related_name="instances", verbose_name=_("flavor")
    )
    image = models.ForeignKey(
        Image, on_delete=models.PROTECT, related_name="instances", verbose_name=_("image")
    )
    region = models.ForeignKey(
        Region, on_delete=models.PROTECT, related_name="instances", verbose_name=_("region")
    )
    pool = models.ForeignKey(
        Pool,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="instances",
        verbose_name=_("pool"),
    )
    node = models.ForeignKey(
        Node,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="instances",
        verbose_name=_("node"),
    )
    state = models.CharField(
        _("state"), max_length=16, choices=InstanceState.choices, default=InstanceState.PENDING
    )
    system_disk_gb = models.PositiveIntegerField(_("system disk (GB)"))
    data_disk_gb = models.PositiveIntegerField(_("cloud disk (GB)"), default=0)
    bandwidth_mbps = models.PositiveIntegerField(_("bandwidth (Mbps)"), default=0)
    ssh_public_key = models.TextField(_("SSH public key"), blank=True)
    # Its ingress rules; null: its organization's default group.
    security_group = models.ForeignKey(
        SecurityGroup,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="instances",
        verbose_name=_("security group"),
    )
    backend_handle = models.CharField(_("backend handle"), max_length=200, blank=True)
    access = models.JSONField(_("access details"), default=dict, blank=True)
    # The unit prices fixed when it was ordered (a resize fixes the new size's): metering
    # charges these, so a later price change never re-prices a running host.
    rates = models.JSONField(_("rates"), default=dict, blank=True)
    error_message = models.TextField(_("error"), blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    released_at = models.DateTimeField(_("released at"), null=True, blank=True)
    # When the tenant's scheduled stop (定时关机) is due; cleared once the host stops.
    stop_at = models.DateTimeField(_("stop at"), null=True, blank=True)
    # Its last stop, from which the park's auto-release counts; cleared when it starts again.
    stopped_at = models.DateTimeField(_("stopped at"), null=True, blank=True)
    # Started in GPU-less mode (无卡模式): running on a small CPU share without its cards, at the
    # region's no-card price (`orders.without_cards`); cleared when it stops.
    without_cards = models.BooleanField(_("without cards"), default=False)

    class Meta:
        verbose_name = _("instance")
        verbose_name_plural = _("instances")
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=InstanceState.values), name="instance_state_known"
            ),
            models.CheckConstraint(
                condition=Q(system_disk_gb__gte=20), name="instance_system_disk_min"
            ),
            models.CheckConstraint(
                condition=Q(data_disk_gb__lte=32768), name="instance_data_disk_max"
            ),
            models.CheckConstraint(
                condition=Q(bandwidth_mbps__lte=10000), name="instance_bandwidth_max"
            ),
            models.CheckConstraint(
                condition=~Q(state=InstanceState.RELEASED) | Q(released_at__isnull=False),
                name="instance_released_has_time",
            ),
            # Disks only grow: enforced by a trigger (see migration 0002), since a check
            # constraint cannot compare a row with its previous version.
        ]
        indexes = [
            models.Index(fields=["organization", "state"]),
            models.Index(fields=["node", "state"]),
            # The beat jobs' scans: due scheduled stops, hosts stopped long enough to release.
            models.Index(fields=["state", "stop_at"], name="instance_state_stop_at"),
            models.Index(fields=["state", "stopped_at"], name="instance_state_stopped_at"),
        ]

    def __str__(self):
        return self.name

    @property
    def is_simulated(self) -> bool:
        """Placed on a simulator's pool (a demo park): the host does not exist."""
        return self.pool_id is not None and self.pool.backend.is_simulator

    @property
    def ssh_command(self) -> str:
        """How the tenant logs in, once the host has an address ("" before)."""
        address = self.access.get("address")
        if not address:
            return ""
        port = self.access.get("ssh_port") or 22
        return f"ssh -p {port} {self.access.get('ssh_user') or 'root'}@{address}"

    @property
    def ssh_host_key_fingerprints(self) -> list[str]:
        """Its sshd's keys as `ssh` shows them at a first login ("ED25519 SHA256:…"), where
        its backend read them: the tenant checks the host is the one answering."""
        return [fingerprint(key) for key in self.access.get("ssh_host_keys") or ()]


def fingerprint(public_key: str) -> str:
    """An OpenSSH public key ("type base64") as `ssh-keygen -l -E sha256` names it."""
    key_type, blob = public_key.split()[:2]
    digest = base64.b64encode(hashlib.sha256(base64.b64decode(blob)).digest()).decode()
    kind = {"ssh-ed25519": "ED25519", "ssh-rsa": "RSA"}.get(key_type, key_type.split("-")[0])
    return f"{kind.upper()} SHA256:{digest.rstrip('=')}"


class PortMapping(models.Model):
    """A port of the host reachable from outside (端口映射): its backend forwards `server_port`
    of the server's public address to `host_port`. The server port is the backend's choice,
    kept here to show the endpoint."""

    instance = models.ForeignKey(
        Instance,
        on_delete=models.CASCADE,
        related_name="port_mappings",
        verbose_name=_("instance"),
    )
    protocol = models.CharField(_("protocol"), max_length=3, choices=PortProtocol.choices)
    host_port = models.PositiveIntegerField(_("host port"))
    # Where the backend forwards it from: the server's public address (null: it has none the
    # portal knows) and its port there.
    address = models.GenericIPAddressField(_("public address"), null=True, blank=True)
    server_port = models.PositiveIntegerField(_("public port"), null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("port mapping")
        verbose_name_plural = _("port mappings")
        ordering = ["host_port", "protocol", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["instance", "protocol", "host_port"], name="port_mapping_unique"
            ),
            models.CheckConstraint(
                condition=Q(protocol__in=PortProtocol.values), name="port_mapping_protocol_known"
            ),
            models.CheckConstraint(
                condition=Q(host_port__gte=PORT_MIN, host_port__lte=PORT_MAX),
                name="port_mapping_host_port_range",
            ),
        ]

    def __str__(self):
        return f"{self.protocol}/{self.host_port}"

    @property
    def endpoint(self) -> str:
        """ "198.51.100.2:20001" ("[2001:db8::2]:20001"): where it is reached; empty while the
        backend names no public address."""
        if not self.address or self.server_port is None:
            return ""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.server_port}"

    @property
    def url(self) -> str:
        """An http:// link to a TCP mapping's endpoint (a web UI, a notebook)."""
        if self.protocol != PortProtocol.TCP or not self.endpoint:
            return ""
        return f"http://{self.endpoint}/"


class OrderKind(models.TextChoices):
    CREATE = "create", _("Create")
    RESIZE = "resize", _("Resize")
    EXPAND_DISK = "expand_disk", _("Expand disk")
    SET_BANDWIDTH = "set_bandwidth", _("Change bandwidth")
    STOP = "stop", _("Stop")
    START = "start", _("Start")
    RELEASE = "release", _("Release")


class OrderState(models.TextChoices):
    SUBMITTED = "submitted", _("Submitted")
    AWAITING_APPROVAL = "awaiting_approval", _("Awaiting approval")
    APPROVED = "approved", _("Approved")
    FULFILLING = "fulfilling", _("Fulfilling")
    DONE = "done", _("Done")
    FAILED = "failed", _("Failed")
    REJECTED = "rejected", _("Rejected")
    CANCELLED = "cancelled", _("Cancelled")


_O = OrderState
ORDER_TRANSITIONS = {
    _O.SUBMITTED: frozenset({_O.AWAITING_APPROVAL, _O.APPROVED, _O.CANCELLED, _O.FAILED}),
    _O.AWAITING_APPROVAL: frozenset({_O.APPROVED, _O.REJECTED, _O.CANCELLED}),
    _O.APPROVED: frozenset({_O.FULFILLING, _O.CANCELLED, _O.FAILED}),
    _O.FULFILLING: frozenset({_O.DONE, _O.FAILED}),
    _O.DONE: frozenset(),
    _O.FAILED: frozenset(),
    _O.REJECTED: frozenset(),
    _O.CANCELLED: frozenset(),
}
ORDER_TERMINAL_STATES = frozenset({_O.DONE, _O.FAILED, _O.REJECTED, _O.CANCELLED})


class Order(models.Model):
    """A request to change what an organization runs; every lifecycle operation is one."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.PROTECT,
        related_name="orders",
        verbose_name=_("organization"),
    )
    kind = models.CharField(_("kind"), max_length=16, choices=OrderKind.choices)
    state = models.CharField(
        _("state"), max_length=20, choices=OrderState.choices, default=OrderState.SUBMITTED
    )
    instance = models.ForeignKey(
        Instance,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="orders",
        verbose_name=_("instance"),
    )
    parameters = models.JSONField(_("parameters"), default=dict, blank=True)
    quote = models.JSONField(_("quote"), default=dict, blank=True)
    hourly_minor = models.BigIntegerField(_("hourly price (minor units)"), default=0)
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    idempotency_key = models.CharField(_("idempotency key"), max_length=80, blank=True)
    reason = models.TextField(_("reason"), blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("decided by"),
    )
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("order")
        verbose_name_plural = _("orders")
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=OrderKind.values), name="order_kind_known"),
            models.CheckConstraint(
                condition=Q(state__in=OrderState.values), name="order_state_known"
            ),
            models.CheckConstraint(
                condition=Q(currency__in=Currency.values), name="order_currency_known"
            ),
            models.CheckConstraint(
                condition=Q(hourly_minor__gte=0), name="order_price_not_negative"
            ),
            # Only a create order may exist before its instance does.
            models.CheckConstraint(
                condition=Q(kind=OrderKind.CREATE) | Q(instance__isnull=False),
                name="order_operation_has_instance",
            ),
            models.UniqueConstraint(
                fields=["organization", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="order_idempotency_key_unique",
            ),
        ]
        indexes = [
            models.Index(fields=["organization", "-created_at"]),
            models.Index(fields=["state"]),
        ]

    def __str__(self):
        return f"#{self.pk} {self.get_kind_display()}"

    @property
    def is_terminal(self):
        return self.state in ORDER_TERMINAL_STATES


class ApprovalPolicy(models.Model):
    """Which create orders of a park wait for an operator (the rest are approved at once)."""

    park = models.OneToOneField(
        Park, on_delete=models.CASCADE, related_name="approval_policy", verbose_name=_("park")
    )
    unverified_needs_approval = models.BooleanField(
        _("orders of unverified organizations need approval"), default=True
    )
    max_accelerators = models.PositiveIntegerField(
        _("approval above this many accelerators"),
        null=True,
        blank=True,
        help_text=_("Per order; empty: no limit."),
    )
    max_hourly_minor = models.BigIntegerField(
        _("approval above this hourly price (minor units)"),
        null=True,
        blank=True,
        help_text=_("Per order; empty: no limit."),
    )

    class Meta:
        verbose_name = _("approval policy")
        verbose_name_plural = _("approval policies")
        constraints = [
            models.CheckConstraint(
                condition=Q(max_hourly_minor__isnull=True) | Q(max_hourly_minor__gte=0),
                name="approval_policy_price_not_negative",
            ),
        ]

    def __str__(self):
        return f"{self.park}"


class IdlePolicy(models.Model):
    """How a park treats hosts it is not using: those whose accelerators stay idle (after how
    long they count as idle, and whether they are stopped on their own; their owners are told
    either way), and those left stopped (after how many days they are released)."""

    park = models.OneToOneField(
        Park, on_delete=models.CASCADE, related_name="idle_policy", verbose_name=_("park")
    )
    threshold_minutes = models.PositiveIntegerField(
        _("idle after (minutes)"),
        default=120,
        help_text=_("An instance counts as idle once all its accelerators stayed idle this long."),
    )
    auto_stop = models.BooleanField(_("stop idle instances automatically"), default=False)
    release_stopped_after_days = models.PositiveIntegerField(
        _("release instances stopped for more than (days)"),
        default=15,
        help_text=_("Owners are mailed 3 days and 1 day before; 0: never released."),
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        # Moved from the operations app; the table keeps its name (a state-only migration).
        db_table = "operations_idlepolicy"
        verbose_name = _("idle policy")
        verbose_name_plural = _("idle policies")
        constraints = [
            models.CheckConstraint(
                condition=models.Q(threshold_minutes__gte=10, threshold_minutes__lte=10080),
                name="idle_policy_threshold_range",
            ),
            models.CheckConstraint(
                condition=models.Q(release_stopped_after_days__lte=365),
                name="idle_policy_release_days_range",
            ),
        ]

    def __str__(self):
        return f"{self.park}"


class HostSample(models.Model):
    """One host's figures over one minute: what the monitoring charts of its page draw over
    1 h, 24 h or 7 d, averaged per bucket in the database (`monitoring.host_series`).

    Written from two sources: the host agent's reports on agent servers (`apps.agents.usage`,
    the cards' figures with the host's CPU, memory, disk and network), and, for the backends
    whose driver has METRICS (the simulator's model), by `tasks.sample_hosts` every minute.
    One row per host and minute: `at` is the portal's clock at the minute. Only running hosts
    are sampled, so a stopped host shows a gap. Pruned after LOAM_HOST_SAMPLES_KEPT_S
    (`monitoring.prune_samples`). A figure its source cannot tell is null, never 0, and is
    left out of an average."""

    instance = models.ForeignKey(
        Instance, on_delete=models.CASCADE, related_name="samples", verbose_name=_("instance")
    )
    at = models.DateTimeField(_("at"))
    gpu_count = models.PositiveSmallIntegerField(_("accelerators held"), default=0)
    gpu_utilization_pct = models.FloatField(_("GPU utilization (%)"), null=True, blank=True)
    gpu_memory_used_mib = models.PositiveBigIntegerField(
        _("GPU memory used (MiB)"), null=True, blank=True
    )
    gpu_memory_total_mib = models.PositiveBigIntegerField(
        _("GPU memory (MiB)"), null=True, blank=True
    )
    power_w = models.FloatField(_("power (W)"), null=True, blank=True)
    cpu_pct = models.FloatField(_("CPU (%)"), null=True, blank=True)
    memory_used_mib = models.PositiveBigIntegerField(_("memory used (MiB)"), null=True, blank=True)
    memory_limit_mib = models.PositiveBigIntegerField(_("memory (MiB)"), null=True, blank=True)
    disk_used_mib = models.PositiveBigIntegerField(_("disk used (MiB)"), null=True, blank=True)
    disk_size_mib = models.PositiveBigIntegerField(_("disk size (MiB)"), null=True, blank=True)
    net_rx_bytes_per_s = models.FloatField(_("received (bytes/s)"), null=True, blank=True)
    net_tx_bytes_per_s = models.FloatField(_("sent (bytes/s)"), null=True, blank=True)
    simulated = models.BooleanField(_("simulated"), default=False)

    class Meta:
        verbose_name = _("host sample")
        verbose_name_plural = _("host samples")
        ordering = ["instance", "at"]
        constraints = [
            # Also the index a chart's range read walks: one host, from a time on.
            models.UniqueConstraint(fields=["instance", "at"], name="host_sample_one_a_minute"),
            models.CheckConstraint(
                condition=(
                    Q(gpu_utilization_pct__isnull=True)
                    | Q(gpu_utilization_pct__gte=0, gpu_utilization_pct__lte=100)
                )
                & (Q(cpu_pct__isnull=True) | Q(cpu_pct__gte=0, cpu_pct__lte=100)),
                name="host_sample_percentages",
            ),
            models.CheckConstraint(
                condition=(Q(power_w__isnull=True) | Q(power_w__gte=0))
                & (Q(net_rx_bytes_per_s__isnull=True) | Q(net_rx_bytes_per_s__gte=0))
                & (Q(net_tx_bytes_per_s__isnull=True) | Q(net_tx_bytes_per_s__gte=0)),
                name="host_sample_not_negative",
            ),
        ]
        # Pruning walks this one.
        indexes = [models.Index(fields=["at"], name="host_sample_at")]

    def __str__(self):
        return f"{self.instance_id} @ {self.at:%Y-%m-%d %H:%M}"
