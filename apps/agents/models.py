"""GPU servers that run the Loam host agent (docs/agent-protocol.md): the join tokens they
enrol with, each server and its cards with their latest figures and an hour of samples, and the
hosts the portal wants on each server (desired state) beside what the agent last reported.

Secrets are kept as SHA-256 hashes only (a join token, a server's credential): both are 256
random bits, so a fast hash is as safe as a slow one and lets the lookup be one indexed read.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from apps.orchestration.backends.base import (
    PORT_PROTOCOLS,
    PURPOSE_MAPPING,
    PURPOSE_SERVICE,
    PURPOSE_SSH,
)
from apps.orchestration.models import Accelerator, Node, NodeHealth, Pool

# The base host image (agent/loam_agent/hosts/recipes/debian-12.toml): the one image an agent
# from before agents reported their images could build, so such a server is taken to hold it.
BASE_IMAGE = "debian-12"

# The ports a server may offer on its public address: never the privileged ones.
PUBLIC_PORT_MIN, PUBLIC_PORT_MAX = 1024, 65535


class TokenState(models.TextChoices):
    UNUSED = "unused", _("Unused")
    USED = "used", _("Used")
    EXPIRED = "expired", _("Expired")
    REVOKED = "revoked", _("Revoked")


class JoinToken(models.Model):
    """A single-use, expiring secret an operator issues for one pool: a server trades it for its
    own credential (`services.enrol_server`). Shown once; only its hash is kept."""

    pool = models.ForeignKey(
        Pool, on_delete=models.CASCADE, related_name="join_tokens", verbose_name=_("pool")
    )
    token_hash = models.CharField(_("token hash"), max_length=64, unique=True)
    prefix = models.CharField(_("prefix"), max_length=16)
    note = models.CharField(_("note"), max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="+",
        verbose_name=_("issued by"),
    )
    created_at = models.DateTimeField(pgettext_lazy("join token", "issued at"), auto_now_add=True)
    expires_at = models.DateTimeField(_("expires at"))
    used_at = models.DateTimeField(_("used at"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("revoked by"),
    )

    class Meta:
        verbose_name = _("join token")
        verbose_name_plural = _("join tokens")
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(used_at__isnull=True) | Q(revoked_at__isnull=True),
                name="join_token_used_or_revoked",
            ),
        ]

    def __str__(self):
        return f"{self.prefix}… ({self.pool.name})"

    def state_at(self, now=None) -> str:
        now = now or timezone.now()
        if self.used_at is not None:
            return TokenState.USED
        if self.revoked_at is not None:
            return TokenState.REVOKED
        if self.expires_at <= now:
            return TokenState.EXPIRED
        return TokenState.UNUSED

    @property
    def state(self) -> str:
        return self.state_at()

    def get_state_display(self) -> str:
        return TokenState(self.state).label


class ServerCondition(models.TextChoices):
    HEALTHY = "healthy", _("Healthy")
    DEGRADED = "degraded", _("Degraded")
    SILENT = "silent", _("Silent")
    REVOKED = "revoked", _("Revoked")


class AgentServer(models.Model):
    """One enrolled server: a Node of its token's pool, reached through its credential."""

    public_id = models.CharField(_("server id"), max_length=40, unique=True)
    node = models.OneToOneField(
        Node, on_delete=models.CASCADE, related_name="agent_server", verbose_name=_("node")
    )
    join_token = models.OneToOneField(
        JoinToken,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="server",
        verbose_name=_("join token"),
    )
    credential_hash = models.CharField(_("credential hash"), max_length=64, unique=True)
    hostname = models.CharField(_("reported hostname"), max_length=255)
    os = models.CharField(_("operating system"), max_length=200, blank=True)
    kernel = models.CharField(_("kernel"), max_length=200, blank=True)
    arch = models.CharField(_("architecture"), max_length=40, blank=True)
    cpu_count = models.PositiveIntegerField(_("CPUs"), null=True, blank=True)
    memory_total_mib = models.PositiveBigIntegerField(_("memory (MiB)"), null=True, blank=True)
    agent_version = models.CharField(_("agent version"), max_length=40, blank=True)
    # [{"vendor", "state", "message"}, ...] as the agent sent them last.
    readers = models.JSONField(_("readers"), default=list, blank=True)
    enrolled_at = models.DateTimeField(_("enrolled at"), auto_now_add=True)
    last_heartbeat_at = models.DateTimeField(_("last heartbeat"), null=True, blank=True)
    last_taken_at = models.DateTimeField(_("last reading taken at"), null=True, blank=True)
    # Where tenants reach the server's hosts (the agent says, at enrolment and every heartbeat):
    # its address, and the range of its ports the portal hands out there (null: the default
    # range, LOAM_AGENT_PUBLIC_PORTS).
    public_address = models.GenericIPAddressField(_("public address"), null=True, blank=True)
    public_port_first = models.PositiveIntegerField(_("first public port"), null=True, blank=True)
    public_port_last = models.PositiveIntegerField(_("last public port"), null=True, blank=True)
    # [{"name", "digest"}, ...]: the host images built on the server (`loam-agent image build`),
    # as its agent last reported them, and when; the pool offers only images a server holds.
    images = models.JSONField(_("host images"), default=list, blank=True)
    images_reported_at = models.DateTimeField(_("images reported at"), null=True, blank=True)
    # Bumped with every change to the hosts the portal wants here: the ETag of GET hosts.
    hosts_version = models.PositiveBigIntegerField(_("hosts version"), default=0)
    revoked_at = models.DateTimeField(_("credential revoked at"), null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("revoked by"),
    )

    class Meta:
        verbose_name = _("agent server")
        verbose_name_plural = _("agent servers")
        ordering = ["node__hostname", "pk"]
        indexes = [models.Index(fields=["revoked_at", "last_heartbeat_at"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(public_port_first__isnull=True, public_port_last__isnull=True)
                | Q(
                    public_port_first__gte=PUBLIC_PORT_MIN,
                    public_port_last__lte=PUBLIC_PORT_MAX,
                    public_port_first__lte=models.F("public_port_last"),
                ),
                name="agent_server_public_ports_range",
            ),
        ]

    def __str__(self):
        return f"{self.node.hostname} ({self.public_id})"

    @property
    def public_ports(self) -> tuple[int, int]:
        """The inclusive range of ports handed out on the public address."""
        if self.public_port_first is not None and self.public_port_last is not None:
            return self.public_port_first, self.public_port_last
        return tuple(settings.LOAM_AGENT_PUBLIC_PORTS)

    @property
    def image_names(self) -> set[str]:
        """The images built here, by name (the catalog image's code)."""
        if self.images_reported_at is None:  # an older agent
            return {BASE_IMAGE}
        return {image["name"] for image in self.images}

    def is_silent(self, now=None) -> bool:
        """No heartbeat for LOAM_AGENT_SILENT_AFTER_S (or revoked): unhealthy, no new work."""
        if self.revoked_at is not None:
            return True
        seen = self.last_heartbeat_at or self.enrolled_at
        if seen is None:
            return True
        now = now or timezone.now()
        return (now - seen).total_seconds() > settings.LOAM_AGENT_SILENT_AFTER_S

    def condition(self, now=None) -> str:
        """What the console shows: revoked, silent, degraded (a card faulty or missing: it takes
        no new work) or healthy."""
        if self.revoked_at is not None:
            return ServerCondition.REVOKED
        if self.is_silent(now):
            return ServerCondition.SILENT
        if self.node.health == NodeHealth.DEGRADED:
            return ServerCondition.DEGRADED
        return ServerCondition.HEALTHY


class CardHealth(models.TextChoices):
    OK = "ok", _("OK")
    ECC_ERRORS = "ecc_errors", _("ECC errors")
    UNREACHABLE = "unreachable", _("Unreachable")


class AgentCard(models.Model):
    """One card of a server, kept by its UUID, with its latest sample. Its Accelerator's serial
    is the UUID. A card that vanished from the inventory keeps its row (and its Accelerator's
    index), marked, out of service, until it comes back."""

    server = models.ForeignKey(
        AgentServer, on_delete=models.CASCADE, related_name="cards", verbose_name=_("server")
    )
    accelerator = models.OneToOneField(
        Accelerator,
        on_delete=models.CASCADE,
        related_name="agent_card",
        verbose_name=_("accelerator"),
    )
    uuid = models.CharField(_("UUID"), max_length=80)
    vendor = models.CharField(_("vendor"), max_length=20)
    model = models.CharField(_("model"), max_length=120, blank=True)
    vendor_index = models.PositiveIntegerField(_("vendor index"))
    memory_total_mib = models.PositiveIntegerField(_("memory (MiB)"))
    device_path = models.CharField(_("device file"), max_length=200, blank=True)
    vanished_at = models.DateTimeField(_("vanished at"), null=True, blank=True)
    sampled_at = models.DateTimeField(_("sampled at"), null=True, blank=True)
    utilization_pct = models.PositiveSmallIntegerField(_("utilization (%)"), null=True, blank=True)
    memory_used_mib = models.PositiveIntegerField(_("memory used (MiB)"), null=True, blank=True)
    power_w = models.FloatField(_("power (W)"), null=True, blank=True)
    temperature_c = models.SmallIntegerField(_("temperature (°C)"), null=True, blank=True)
    ecc_errors_uncorrected = models.PositiveBigIntegerField(
        _("uncorrected ECC errors"), null=True, blank=True
    )
    health = models.CharField(
        _("health"), max_length=16, choices=CardHealth.choices, default=CardHealth.OK
    )
    health_message = models.CharField(_("health message"), max_length=500, blank=True)

    class Meta:
        verbose_name = _("agent card")
        verbose_name_plural = _("agent cards")
        ordering = ["server", "accelerator__index"]
        constraints = [
            models.UniqueConstraint(fields=["server", "uuid"], name="agent_card_uuid_unique"),
            models.CheckConstraint(
                condition=Q(health__in=CardHealth.values), name="agent_card_health_known"
            ),
        ]

    def __str__(self):
        return self.uuid

    @property
    def in_service(self) -> bool:
        return self.vanished_at is None and self.health == CardHealth.OK


class CardSample(models.Model):
    """One card's figures at one heartbeat: what the charts draw. One row per card and
    heartbeat, inserted in one statement per heartbeat and pruned to the last
    LOAM_AGENT_SAMPLES_KEPT_S by `tasks.tidy_agent_state`. `at` is the portal's clock (when
    the heartbeat arrived), so a server with a wrong clock neither hides nor floods a chart."""

    card = models.ForeignKey(
        AgentCard, on_delete=models.CASCADE, related_name="samples", verbose_name=_("card")
    )
    at = models.DateTimeField(_("at"))
    utilization_pct = models.PositiveSmallIntegerField(_("utilization (%)"), null=True)
    memory_used_mib = models.PositiveIntegerField(_("memory used (MiB)"), null=True)
    power_w = models.FloatField(_("power (W)"), null=True)

    class Meta:
        verbose_name = _("card sample")
        verbose_name_plural = _("card samples")
        ordering = ["card", "at"]
        indexes = [models.Index(fields=["card", "at"]), models.Index(fields=["at"])]

    def __str__(self):
        return f"{self.card_id} @ {self.at:%H:%M:%S}"


class WantedState(models.TextChoices):
    RUNNING = "running", _("Running")
    STOPPED = "stopped", _("Stopped")
    REMOVED = "removed", _("Removed")


_W = WantedState
# A removed host has left its server for good: a later host is a new one.
AGENT_HOST_TRANSITIONS = {
    _W.RUNNING: frozenset({_W.STOPPED, _W.REMOVED}),
    _W.STOPPED: frozenset({_W.RUNNING, _W.REMOVED}),
    _W.REMOVED: frozenset(),
}


class ReportedState(models.TextChoices):
    CREATING = "creating", _("Creating")
    RUNNING = "running", _("Running")
    STOPPED = "stopped", _("Stopped")
    FAILED = "failed", _("Failed")
    REMOVED = "removed", _("Removed")


class AgentHost(models.Model):
    """A GPU cloud host the portal wants on a server: its shape at `generation` (bumped with
    every change), and what the agent reported last. A host wanted `removed` is left out of the
    list the agent polls, which is how the portal asks for it to go."""

    handle = models.CharField(_("host id"), max_length=40, unique=True)
    server = models.ForeignKey(
        AgentServer, on_delete=models.CASCADE, related_name="hosts", verbose_name=_("server")
    )
    name = models.CharField(_("name"), max_length=63)
    generation = models.PositiveIntegerField(_("generation"), default=1)
    state = models.CharField(
        _("wanted state"),
        max_length=16,
        choices=WantedState.choices,
        default=WantedState.RUNNING,
    )
    # Growing the disk of a running host: the generation that stops it is followed by one that
    # starts it again (set here while that stop is under way).
    start_after = models.PositiveIntegerField(_("start again after generation"), null=True)
    card_uuids = models.JSONField(_("cards"), default=list, blank=True)
    vcpu = models.PositiveIntegerField(_("vCPU"))
    memory_mib = models.PositiveIntegerField(_("memory (MiB)"))
    system_disk_gb = models.PositiveIntegerField(_("system disk (GB)"))
    data_disk_gb = models.PositiveIntegerField(_("cloud disk (GB)"), default=0)
    # The volume that is its data disk, at /data (`HostSpec.data_disk_volume`): listed with it
    # from its creation, before its instance knows this handle.
    data_disk_volume = models.CharField(_("data disk volume"), max_length=40, blank=True)
    bandwidth_mbps = models.PositiveIntegerField(_("bandwidth (Mbps)"), default=0)
    image = models.CharField(_("image"), max_length=120)
    # The saved image (its code) asked of this stopped host, until the agent reports it saved.
    save_image = models.CharField(_("image being saved"), max_length=60, blank=True)
    ssh_public_keys = models.JSONField(_("SSH public keys"), default=list, blank=True)
    # The private network it joins (hosts of one group on a server reach each other) and what
    # reaches its forwarded ports from outside: [{"protocol", "from_port", "to_port",
    # "source"}]. Its forwarded ports are AgentHostPort rows.
    network_group = models.CharField(_("network group"), max_length=64, blank=True)
    ingress = models.JSONField(_("ingress rules"), default=list, blank=True)
    # The web services its image starts ([{"name", "port", "base_url"}], `HostService`), each
    # given a port of the server's public address (an AgentHostPort) that only the portal's
    # networks reach, and the secret the portal's proxy presents to them: made with the host,
    # never shown to anyone.
    services = models.JSONField(_("web services"), default=list, blank=True)
    service_token = models.CharField(_("web service token"), max_length=64, blank=True)
    reported_generation = models.PositiveIntegerField(_("reported generation"), null=True)
    # The `sequence` of the agent's report applied last: an older or repeated report (a retry,
    # a full report that crossed a newer change) is not applied over it.
    reported_sequence = models.PositiveBigIntegerField(_("reported sequence"), null=True)
    reported_state = models.CharField(
        _("reported state"), max_length=16, choices=ReportedState.choices, blank=True
    )
    reported_message = models.TextField(_("reported message"), blank=True)
    address = models.CharField(_("address"), max_length=45, blank=True)
    ssh_port = models.PositiveIntegerField(_("SSH port"), null=True, blank=True)
    # The public keys its sshd presented to its agent when it last started ("type base64"):
    # the web terminal accepts no other, and tenants see their fingerprints to check their own
    # first login. Kept while it is stopped.
    ssh_host_keys = models.JSONField(_("SSH host keys"), default=list, blank=True)
    # A public address of its own, where its pool has some ("public_ips" in the backend's
    # config): routed by the park to the server, every port of it the host's. Freed (null) at
    # removal.
    public_ip = models.GenericIPAddressField(
        _("public IP"), protocol="IPv4", null=True, blank=True, unique=True
    )
    reported_at = models.DateTimeField(_("reported at"), null=True, blank=True)
    # The host's usage counters as its last monitoring sample read them ({"taken_at",
    # "cpu_usage_usec", "net_rx_bytes", "net_tx_bytes"}), which the next sample's rates are
    # taken from, and when that sample was recorded (`usage.record_host_usage`).
    usage_counters = models.JSONField(_("usage counters"), default=dict, blank=True)
    usage_sampled_at = models.DateTimeField(_("usage sampled at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("agent host")
        verbose_name_plural = _("agent hosts")
        ordering = ["server", "created_at", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=WantedState.values), name="agent_host_state_known"
            ),
        ]
        indexes = [models.Index(fields=["server", "state"])]

    def __str__(self):
        return f"{self.handle} ({self.name})"

    def request(self, generation: int | None = None) -> str:
        """The handle of the request that asked for `generation` (by default the current)."""
        return f"{self.handle}@{generation or self.generation}"


class PortPurpose(models.TextChoices):
    SSH = PURPOSE_SSH, _("SSH")
    MAPPING = PURPOSE_MAPPING, _("Port mapping")
    SERVICE = PURPOSE_SERVICE, _("Web service")


class AgentHostPort(models.Model):
    """A port of a server's public address forwarded to a port of one of its hosts. A server
    port is one host's per protocol: allocated (the lowest free in the server's range) when
    the host is provisioned (SSH, its image's web services) or a mapping is added, kept across
    stops, starts, resizes and agent restarts, and deleted, so free again, when the host is
    removed."""

    host = models.ForeignKey(
        AgentHost, on_delete=models.CASCADE, related_name="ports", verbose_name=_("host")
    )
    server = models.ForeignKey(
        AgentServer, on_delete=models.CASCADE, related_name="ports", verbose_name=_("server")
    )
    protocol = models.CharField(
        _("protocol"), max_length=3, choices=[(p, p.upper()) for p in PORT_PROTOCOLS]
    )
    server_port = models.PositiveIntegerField(_("server port"))
    host_port = models.PositiveIntegerField(_("host port"))
    purpose = models.CharField(_("purpose"), max_length=16, choices=PortPurpose.choices)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("forwarded port")
        verbose_name_plural = _("forwarded ports")
        ordering = ["protocol", "server_port"]
        constraints = [
            models.UniqueConstraint(
                fields=["server", "protocol", "server_port"], name="agent_port_server_unique"
            ),
            models.UniqueConstraint(
                fields=["host", "protocol", "host_port"], name="agent_port_host_unique"
            ),
            models.CheckConstraint(
                condition=Q(protocol__in=PORT_PROTOCOLS), name="agent_port_protocol_known"
            ),
            models.CheckConstraint(
                condition=Q(purpose__in=PortPurpose.values), name="agent_port_purpose_known"
            ),
            models.CheckConstraint(
                condition=Q(server_port__gte=1, server_port__lte=65535)
                & Q(host_port__gte=1, host_port__lte=65535),
                name="agent_port_range",
            ),
        ]

    def __str__(self):
        return f"{self.protocol}/{self.server_port} → {self.host_id}:{self.host_port}"


class SavedImageState(models.TextChoices):
    SAVING = "saving", _("Saving")
    READY = "ready", _("Ready")
    FAILED = "failed", _("Failed")
    DELETED = "deleted", _("Deleted")


_S = SavedImageState
SAVED_IMAGE_TRANSITIONS = {
    _S.SAVING: frozenset({_S.READY, _S.FAILED}),
    _S.READY: frozenset({_S.DELETED}),
    _S.FAILED: frozenset({_S.DELETED}),
    _S.DELETED: frozenset(),
}


class SavedImage(models.Model):
    """A stopped agent host's root file system, saved on its server by the agent as a private
    image of the organization (`agents.saved_images`): its catalog `image` (the organization's
    own, named by the tenant), the server that holds it, and its size, billed per GB-month from
    the moment it is ready until it is deleted (a meter of its `workload`)."""

    image = models.OneToOneField(
        "catalog.Image",
        on_delete=models.PROTECT,
        related_name="saved",
        verbose_name=_("image"),
    )
    organization = models.ForeignKey(
        "tenants.Organization",
        on_delete=models.PROTECT,
        related_name="saved_images",
        verbose_name=_("organization"),
    )
    workload = models.OneToOneField(
        "workloads.Workload",
        on_delete=models.PROTECT,
        related_name="image",
        verbose_name=_("workload"),
    )
    server = models.ForeignKey(
        AgentServer, on_delete=models.PROTECT, related_name="saved_images", verbose_name=_("server")
    )
    instance = models.ForeignKey(
        "orders.Instance",
        on_delete=models.SET_NULL,
        null=True,
        related_name="saved_images",
        verbose_name=_("saved from host"),
    )
    host = models.ForeignKey(
        AgentHost,
        on_delete=models.SET_NULL,
        null=True,
        related_name="saved_images",
        verbose_name=_("agent host"),
    )
    # The host's generation that asks for the save: a later one reported without the image
    # (the host started again first) means the save will not happen.
    generation = models.PositiveIntegerField(_("requested at generation"))
    state = models.CharField(
        _("state"), max_length=16, choices=SavedImageState.choices, default=_S.SAVING
    )
    digest = models.CharField(_("digest"), max_length=71, blank=True)
    size_bytes = models.PositiveBigIntegerField(_("size (bytes)"), default=0)
    message = models.TextField(_("message"), blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="+",
        verbose_name=_("saved by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("saved image")
        verbose_name_plural = _("saved images")
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=SavedImageState.values), name="saved_image_state_known"
            ),
        ]

    def __str__(self):
        return self.image.name

    @property
    def size_gb(self) -> int:
        return billed_gb(self.size_bytes)


def billed_gb(size_bytes: int) -> int:
    """What a saved image of `size_bytes` is billed: whole GB, rounded up (a saved root is
    never free)."""
    return max(1, -(-size_bytes // 10**9))


class SavedImageCopyState(models.TextChoices):
    SENDING = "sending", _("Being sent by the server that holds it")
    RECEIVING = "receiving", _("Being copied to this server")
    READY = "ready", _("Ready")
    FAILED = "failed", _("Failed")


_C = SavedImageCopyState
SAVED_IMAGE_COPY_TRANSITIONS = {
    _C.SENDING: frozenset({_C.RECEIVING, _C.FAILED}),
    _C.RECEIVING: frozenset({_C.READY, _C.FAILED}),
    _C.READY: frozenset(),
    # Asked again by the next host that needs it there.
    _C.FAILED: frozenset({_C.SENDING}),
}


class SavedImageCopy(models.Model):
    """A saved image copied to another server of its region, for a host placed there
    (`agents.image_copies`): the server that holds it sends its archive to the portal, this
    server's agent fetches it, checks its digest and unpacks it. `sent_bytes` and
    `received_bytes` are how far each half is, as the portal counts the bytes going through it."""

    saved_image = models.ForeignKey(
        SavedImage, on_delete=models.CASCADE, related_name="copies", verbose_name=_("saved image")
    )
    server = models.ForeignKey(
        AgentServer, on_delete=models.CASCADE, related_name="image_copies", verbose_name=_("server")
    )
    state = models.CharField(
        _("state"), max_length=16, choices=SavedImageCopyState.choices, default=_C.SENDING
    )
    archive_sha256 = models.CharField(_("archive's sha256"), max_length=64, blank=True)
    archive_bytes = models.PositiveBigIntegerField(_("archive's size (bytes)"), default=0)
    sent_bytes = models.PositiveBigIntegerField(_("bytes sent"), default=0)
    received_bytes = models.PositiveBigIntegerField(_("bytes received"), default=0)
    # When bytes of it last went through the portal: a host waiting for it waits while it moves.
    moved_at = models.DateTimeField(_("last moved at"), null=True, blank=True)
    message = models.TextField(_("message"), blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("saved image copy")
        verbose_name_plural = _("saved image copies")
        ordering = ["saved_image", "server"]
        constraints = [
            models.UniqueConstraint(
                fields=["saved_image", "server"], name="saved_image_copy_once_per_server"
            ),
            models.CheckConstraint(
                condition=Q(state__in=SavedImageCopyState.values),
                name="saved_image_copy_state_known",
            ),
        ]

    def __str__(self):
        return f"{self.saved_image} → {self.server}"

    @property
    def progress_pct(self) -> int:
        """How far the copy is: its two halves (to the portal, from it) weigh the same; 100
        only once the server has unpacked it."""
        if self.state == _C.READY:
            return 100
        total = self.archive_bytes or self.saved_image.size_bytes
        if not total:
            return 0
        return min(99, (self.sent_bytes + self.received_bytes) * 50 // total)
