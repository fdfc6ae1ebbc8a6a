"""Use cases of the host agents (docs/agent-protocol.md): join tokens, enrolment, heartbeats,
credentials, silent servers, the agents' host reports, and tidying old samples and orphaned
hosts. The hosts the portal wants on a server are written by the agent driver's store
(`apps.agents.hosts`).

Secrets: a join token and a server's credential are 256 random bits each, shown once and kept
as their SHA-256 (a slow hash protects guessable passwords; these cannot be guessed), so
checking one is one indexed read.
"""

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Max, Q
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.agents.models import (
    AGENT_HOST_TRANSITIONS,
    AgentCard,
    AgentHost,
    AgentHostPort,
    AgentServer,
    CardHealth,
    CardSample,
    JoinToken,
    ReportedState,
    TokenState,
    WantedState,
)
from apps.agents.usage import record_host_usage
from apps.catalog.selectors import free_room_changed
from apps.core.audit import record_event
from apps.core.errors import DomainError, InvalidTransition
from apps.core.transactions import lock
from apps.core.transitions import check_transition, transition
from apps.orchestration.models import (
    NODE_HEALTH_TRANSITIONS,
    Accelerator,
    Backend,
    Node,
    NodeHealth,
    Pool,
)
from apps.orchestration.rooms import recount
from apps.orders.models import Instance, InstanceState
from apps.storage.services import record_volume_reports as record_volumes
from apps.tenants.access import require_operator
from apps.tenants.models import Park

AGENT_DRIVER = "agent"
AGENT_BACKEND_NAME = "agents"  # the backend add_agent_pool makes for a park's first pool
TOKEN_PREFIX = "loamjt"
CREDENTIAL_PREFIX = "loamsc"
MIN_TOKEN_HOURS, MAX_TOKEN_HOURS = 1, 24 * 30
NODE_NAME_MAX = 100  # leaves room for "-<n>" within Node.hostname's 120


class AgentRefused(DomainError):
    """A join token or a credential the portal does not accept: the agent stops (401)."""

    code = "unauthorized"
    status = 401


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _audit_label(server: AgentServer) -> str:
    return f"agent:{server.node.hostname}"


# --- join tokens -----------------------------------------------------------------------------


@transaction.atomic(durable=True)
def add_agent_pool(*, park: Park, operator, name: str, region, accelerator_model) -> Pool:
    """A pool that servers join with a join token, with no JSON to write: a pool of the park's
    agent backend, which is made here (named "agents") for the park's first such pool, and
    listed in that backend's config as the driver reads it."""
    require_operator(operator, park, _("Only this park's operators may add pools."))
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": _("Give the pool a name.")})
    if region.park_id != park.pk:
        raise ValidationError({"region": _("This region is not in the park.")})
    lock(Park, park.pk)  # two first pools at once would make two backends
    backend = Backend.objects.filter(park=park, driver=AGENT_DRIVER).order_by("pk").first()
    if backend is None:
        if Backend.objects.filter(park=park, name=AGENT_BACKEND_NAME).exists():
            raise ValidationError(
                _("This park has a backend called “%(name)s” whose driver is not agent.")
                % {"name": AGENT_BACKEND_NAME}
            )
        backend = Backend.objects.create(
            park=park,
            name=AGENT_BACKEND_NAME,
            driver=AGENT_DRIVER,
            config={"pools": []},
            last_checked_at=timezone.now(),
        )
        record_event(
            action="backend.registered",
            actor=operator,
            target=backend,
            park=park,
            data={"driver": AGENT_DRIVER, "pools": [], "nodes": 0},
        )
    else:
        lock(Backend, backend.pk)
        backend.refresh_from_db(fields=["config"])
    if Pool.objects.filter(backend=backend, name=name).exists():
        raise ValidationError(
            {
                "name": _("%(backend)s already has a pool called “%(name)s”.")
                % {"backend": backend.name, "name": name}
            }
        )
    listed = {"name": name, "accelerator_model": accelerator_model.slug}
    backend.config = {**backend.config, "pools": [*backend.config.get("pools", []), listed]}
    backend.save(update_fields=["config"])
    pool = Pool.objects.create(
        backend=backend, region=region, name=name, accelerator_model=accelerator_model
    )
    record_event(
        action="agent.pool_added",
        actor=operator,
        target=pool,
        park=park,
        data={"backend": backend.name, "region": region.code, "model": accelerator_model.slug},
    )
    return pool


@transaction.atomic(durable=True)
def issue_join_token(
    *, pool: Pool, operator, valid_hours: int | None = None, note: str = ""
) -> tuple[JoinToken, str]:
    """A single-use token for one server to join `pool` (of an agent backend). Returns (token,
    secret): the secret is shown once, only its hash is kept."""
    pool = Pool.objects.select_related("backend__park").get(pk=pool.pk)
    park = pool.backend.park
    require_operator(operator, park, _("Only this park's operators may issue join tokens."))
    if pool.backend.driver != AGENT_DRIVER:
        raise ValidationError(
            {
                "pool": _(
                    "%(pool)s is run by %(backend)s (%(driver)s): servers join only the pools "
                    "of a backend whose driver is “agent”."
                )
                % {"pool": pool.name, "backend": pool.backend.name, "driver": pool.backend.driver}
            }
        )
    hours = settings.LOAM_AGENT_TOKEN_HOURS if valid_hours is None else valid_hours
    if not MIN_TOKEN_HOURS <= hours <= MAX_TOKEN_HOURS:
        raise ValidationError(
            {
                "valid_hours": _("A join token is valid for %(min)d to %(max)d hours.")
                % {"min": MIN_TOKEN_HOURS, "max": MAX_TOKEN_HOURS}
            }
        )
    secret = f"{TOKEN_PREFIX}_{secrets.token_urlsafe(32)}"
    now = timezone.now()
    token = JoinToken.objects.create(
        pool=pool,
        token_hash=secret_hash(secret),
        prefix=secret[: len(TOKEN_PREFIX) + 7],
        note=(note or "").strip()[:200],
        created_by=operator,
        expires_at=now + timedelta(hours=hours),
    )
    record_event(
        action="agent.join_token_issued",
        actor=operator,
        target=token,
        park=park,
        data={"pool": pool.name, "hours": hours, "note": token.note},
    )
    return token, secret


@transaction.atomic(durable=True)
def revoke_join_token(*, token: JoinToken, operator) -> JoinToken:
    park = JoinToken.objects.select_related("pool__backend__park").get(pk=token.pk)
    park = park.pool.backend.park
    require_operator(operator, park, _("Only this park's operators may revoke join tokens."))
    lock(JoinToken, token.pk)
    token = JoinToken.objects.select_related("pool").get(pk=token.pk)
    if token.state != TokenState.UNUSED:
        raise InvalidTransition(
            _("This join token is %(state)s already; only an unused one can be revoked.")
            % {"state": token.get_state_display().lower()}
        )
    token.revoked_at, token.revoked_by = timezone.now(), operator
    token.save(update_fields=["revoked_at", "revoked_by"])
    record_event(action="agent.join_token_revoked", actor=operator, target=token, park=park)
    return token


# --- enrolment -------------------------------------------------------------------------------


def _refused_token() -> AgentRefused:
    return AgentRefused(
        _(
            "This join token is unknown, expired, revoked or already used. Ask the park's "
            "operator for a new one (console: Infrastructure → Agent servers → Join tokens) and "
            "run “loam-agent enrol” with it."
        )
    )


@transaction.atomic(durable=True)
def enrol_server(
    *,
    token: str,
    server: dict,
    readers: list[dict],
    cards: list[dict],
    images: list[dict] | None = None,
    ip_address=None,
) -> tuple[AgentServer, str]:
    """Trade a join token for a server's credential: the server becomes a node of the token's
    pool, named by its hostname (with "-2", "-3", … where the backend has that name), and its
    cards become the node's accelerators. Returns (server, credential); only the credential's
    hash is kept. Raises AgentRefused for a token that cannot be used."""
    token_id = (
        JoinToken.objects.filter(token_hash=secret_hash(token)).values_list("pk", flat=True).first()
    )
    if token_id is None:
        raise _refused_token()
    lock(JoinToken, token_id)
    join = JoinToken.objects.select_related("pool__backend__park").get(pk=token_id)
    now = timezone.now()
    if join.state_at(now) != TokenState.UNUSED or join.pool.backend.driver != AGENT_DRIVER:
        raise _refused_token()
    pool = join.pool
    backend = pool.backend
    lock(Backend, backend.pk)  # one enrolment at a time per backend picks a free name
    node = Node.objects.create(
        pool=pool,
        hostname=_free_node_name(backend, server["hostname"]),
        vcpu_total=max(1, server.get("cpu_count") or 1),
        ram_gb_total=max(1, (server.get("memory_total_mib") or 0) // 1024),
        health=NodeHealth.HEALTHY,
        last_seen_at=now,
    )
    free_room_changed()
    credential = f"{CREDENTIAL_PREFIX}_{secrets.token_urlsafe(32)}"
    agent = AgentServer.objects.create(
        public_id=f"srv-{secrets.token_hex(8)}",
        node=node,
        join_token=join,
        credential_hash=secret_hash(credential),
        hostname=server["hostname"],
        os=server.get("os") or "",
        kernel=server.get("kernel") or "",
        arch=server.get("arch") or "",
        cpu_count=server.get("cpu_count"),
        memory_total_mib=server.get("memory_total_mib"),
        agent_version=server.get("agent_version") or "",
        readers=readers,
        last_heartbeat_at=now,
        **({"images": images, "images_reported_at": now} if images is not None else {}),
        **_public_network(server),
    )
    _sync_cards(agent, cards, {}, now)
    join.used_at = now
    join.save(update_fields=["used_at"])
    record_event(
        action="agent.server_enrolled",
        actor_label=_audit_label(agent),
        target=node,
        park=backend.park,
        ip_address=ip_address,
        data={
            "server": agent.public_id,
            "pool": pool.name,
            "hostname": agent.hostname,
            "cards": len(cards),
            "token": join.prefix,
        },
    )
    return agent, credential


def _public_network(facts: dict) -> dict:
    """The AgentServer fields of the public address and port range the agent sent, for those
    it sent (an older agent sends neither: what the portal knows stays)."""
    fields = {}
    if "public_address" in facts:
        fields["public_address"] = facts["public_address"] or None
    if "public_ports" in facts:
        first, last = facts["public_ports"] or (None, None)
        fields.update(public_port_first=first, public_port_last=last)
    return fields


def _free_node_name(backend: Backend, hostname: str) -> str:
    """The hostname, or the hostname with the first free "-<n>": unique in the backend, where
    the driver's telemetry names nodes."""
    base = hostname[:NODE_NAME_MAX]
    taken = set(
        Node.objects.filter(pool__backend=backend, hostname__startswith=base).values_list(
            "hostname", flat=True
        )
    )
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


# --- credentials -----------------------------------------------------------------------------


def authenticate_server(credential: str) -> AgentServer | None:
    """The server whose credential this is, unless it was revoked."""
    if not credential or "\x00" in credential:
        return None
    return (
        AgentServer.objects.select_related("node")
        .filter(credential_hash=secret_hash(credential), revoked_at__isnull=True)
        .first()
    )


@transaction.atomic(durable=True)
def revoke_server(*, server: AgentServer, operator) -> AgentServer:
    """The server's credential stops working (its agent stops at its next call and must enrol
    again, as a new server); its node is down: no new placements."""
    park = AgentServer.objects.select_related("node__pool__backend__park").get(pk=server.pk)
    park = park.node.pool.backend.park
    require_operator(operator, park, _("Only this park's operators may revoke a server."))
    lock(AgentServer, server.pk)
    server = AgentServer.objects.select_related("node").get(pk=server.pk)
    if server.revoked_at is not None:
        raise InvalidTransition(
            _("The credential of %(node)s is revoked already.") % {"node": server.node.hostname}
        )
    server.revoked_at, server.revoked_by = timezone.now(), operator
    server.save(update_fields=["revoked_at", "revoked_by"])
    _set_node_health(server, NodeHealth.DOWN, reason="revoked", park=park)
    record_event(
        action="agent.credential_revoked",
        actor=operator,
        target=server.node,
        park=park,
        data={"server": server.public_id},
    )
    return server


# --- heartbeats ------------------------------------------------------------------------------


@transaction.atomic(durable=True)
def record_heartbeat(
    *,
    server: AgentServer,
    agent_version: str,
    taken_at,
    readers: list[dict],
    cards: list[dict],
    samples: list[dict],
    network: dict | None = None,
    images: list[dict] | None = None,
    now=None,
) -> AgentServer:
    """One heartbeat: the inventory (new cards join the node, vanished ones are marked), each
    card's latest figures and a sample for the charts, and the node's health: degraded while a
    card is faulty or missing (that card takes no new work), healthy otherwise, and back up
    from down (silent). `network`: the `public_address` and `public_ports` the agent sent (a
    key it left out leaves what the portal knows); ports handed out before a range change keep
    their numbers. `images`: the host images built there, [{"name", "digest"}] (None: the agent
    left them out, what the portal knows stays)."""
    now = now or timezone.now()
    lock(AgentServer, server.pk)
    server = AgentServer.objects.select_related("node__pool__backend").get(pk=server.pk)
    if server.revoked_at is not None:
        raise AgentRefused(_revoked_detail())
    by_uuid = {sample["uuid"]: sample for sample in samples}
    known = _sync_cards(server, cards, by_uuid, now)
    CardSample.objects.bulk_create(
        CardSample(
            card=card,
            at=now,
            utilization_pct=by_uuid[card.uuid].get("utilization_pct"),
            memory_used_mib=by_uuid[card.uuid].get("memory_used_mib"),
            power_w=by_uuid[card.uuid].get("power_w"),
        )
        for card in known
        if card.uuid in by_uuid
    )
    AgentServer.objects.filter(pk=server.pk).update(
        last_heartbeat_at=now,
        last_taken_at=taken_at,
        agent_version=agent_version or server.agent_version,
        readers=readers,
        **_public_network(network or {}),
        **({"images": images, "images_reported_at": now} if images is not None else {}),
    )
    healthy = all(card.in_service for card in known)
    _set_node_health(server, NodeHealth.HEALTHY if healthy else NodeHealth.DEGRADED)
    server.last_heartbeat_at = now
    return server


def _revoked_detail() -> str:
    return _(
        "This server's credential was revoked. Ask the park's operator for a join token and "
        "run “loam-agent enrol --force” with it."
    )


CARD_FIGURES = (
    "utilization_pct",
    "memory_used_mib",
    "power_w",
    "temperature_c",
    "ecc_errors_uncorrected",
)


def _sync_cards(server: AgentServer, cards: list[dict], samples: dict, now) -> list[AgentCard]:
    """Bring the server's cards in line with the inventory the agent sent, apply `samples`
    ({uuid: sample}), and keep each card's Accelerator out of service while it is faulty or
    missing. Returns every card of the server. Takes the node's lock only when the node's
    cards change (a new card, or one going in or out of service)."""
    node = server.node
    existing = {card.uuid: card for card in server.cards.select_related("accelerator")}
    reported = {card["uuid"]: card for card in cards}
    new = [uuid for uuid in reported if uuid not in existing]
    if new:
        lock(Node, node.pk)
        next_index = (
            Accelerator.objects.filter(node=node).aggregate(n=Max("index"))["n"] or -1
        ) + 1
        for offset, uuid in enumerate(new):
            accelerator = Accelerator.objects.create(
                node=node, index=next_index + offset, serial=uuid
            )
            existing[uuid] = AgentCard(
                server=server,
                accelerator=accelerator,
                uuid=uuid,
                vendor_index=0,
                memory_total_mib=0,
            )
    changed = []
    for uuid, card in existing.items():
        facts = reported.get(uuid)
        if facts is None:
            card.vanished_at = card.vanished_at or now
        else:
            card.vanished_at = None
            card.vendor = facts["vendor"]
            card.model = facts.get("model") or ""
            card.vendor_index = facts["index"]
            card.memory_total_mib = facts["memory_total_mib"]
            card.device_path = facts.get("device_path") or ""
            sample = samples.get(uuid)
            if sample is not None:
                card.sampled_at = now
                for figure in CARD_FIGURES:
                    setattr(card, figure, sample.get(figure))
                card.health = sample.get("health") or CardHealth.OK
                card.health_message = (sample.get("health_message") or "")[:500]
        changed.append(card)
    AgentCard.objects.bulk_create([card for card in changed if card.pk is None])
    AgentCard.objects.bulk_update(
        [card for card in changed if card.uuid not in new],
        [
            "vanished_at",
            "vendor",
            "model",
            "vendor_index",
            "memory_total_mib",
            "device_path",
            "sampled_at",
            *CARD_FIGURES,
            "health",
            "health_message",
        ],
    )
    out = {card.accelerator_id for card in changed if not card.in_service}
    flips = [
        card.accelerator_id
        for card in changed
        if card.accelerator.out_of_service != (card.accelerator_id in out)
    ]
    if flips:
        lock(Node, node.pk)
        Accelerator.objects.filter(pk__in=[pk for pk in flips if pk in out]).update(
            out_of_service=True
        )
        Accelerator.objects.filter(pk__in=[pk for pk in flips if pk not in out]).update(
            out_of_service=False
        )
    if new or flips:
        recount([node.pk])  # locked above
        free_room_changed()
    return changed


def _set_node_health(server: AgentServer, health: str, *, reason: str = "", park=None) -> bool:
    """Move the server's node to `health` (audited); False when it was there already. The move
    is checked against its table here rather than made by transition(), whose audit event would
    name neither the park (a node has none of its own) nor the agent."""
    node = server.node
    current = Node.objects.filter(pk=node.pk).values_list("health", flat=True).first()
    if current == health:
        return False
    names = dict(Node._meta.get_field("health").flatchoices)
    check_transition(NODE_HEALTH_TRANSITIONS, current, health, label=str(node), names=names)
    node.health = health
    node.save(update_fields=["health"])
    free_room_changed()
    park = park or Pool.objects.select_related("backend__park").get(pk=node.pool_id).backend.park
    record_event(
        action="node.health_changed",
        actor_label=_audit_label(server),
        target=node,
        park=park,
        data={"from": current, "to": health, **({"reason": reason} if reason else {})},
    )
    return True


# --- silent servers ----------------------------------------------------------------------------


def mark_silent_servers(*, now=None) -> list[int]:
    """Every server silent for LOAM_AGENT_SILENT_AFTER_S (or revoked) whose node is not down
    yet: down, so nothing new is placed there (its next heartbeat brings it back). Returns the
    ids of the servers marked."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.LOAM_AGENT_SILENT_AFTER_S)
    silent = (
        AgentServer.objects.filter(
            Q(revoked_at__isnull=False)
            | Q(last_heartbeat_at__lt=cutoff)
            | Q(last_heartbeat_at__isnull=True, enrolled_at__lt=cutoff)
        )
        .exclude(node__health=NodeHealth.DOWN)
        .values_list("pk", flat=True)
    )
    marked = []
    for server_id in list(silent):
        with transaction.atomic():
            lock(AgentServer, server_id)
            server = AgentServer.objects.select_related("node").get(pk=server_id)
            if server.revoked_at is None and not server.is_silent(now):
                continue  # a heartbeat came in meanwhile
            reason = "revoked" if server.revoked_at else "silent"
            if _set_node_health(server, NodeHealth.DOWN, reason=reason):
                marked.append(server_id)
    return marked


# --- host reports ------------------------------------------------------------------------------


@transaction.atomic(durable=True)
def record_volume_reports(*, server: AgentServer, reports: list[dict]) -> None:
    """What the agent says of its server's volumes (before the server's lock: LOCK_ORDER)."""
    record_volumes(node=server.node, reports=reports)


@transaction.atomic  # may join a caller that already holds the server (it locks the server first)
def record_host_reports(
    *, server: AgentServer, sequence: int, reports: list[dict], now=None
) -> int:
    """What the agent says its hosts are, in its report number `sequence`. A report for a host
    the portal does not know here is ignored (the agent may report what it has); so is one
    not newer than the report applied last to that host (a retry whose first attempt got
    through, a full report that crossed a newer change on the way) or older than the
    generation the host reported before. A stopped host growing its disk is started once the
    stop is reported. A running host reported gets its monitoring sample of the minute, once a
    minute (`usage.record_host_usage`: its cards' figures, and its `usage` where the agent sent
    it). Returns how many hosts changed."""
    now = now or timezone.now()
    lock(AgentServer, server.pk)
    hosts = {
        host.handle: host
        for host in AgentHost.objects.filter(
            server=server, handle__in=[report["id"] for report in reports]
        )
    }
    changed, restarted, running = [], False, []
    by_handle = {report["id"]: report for report in reports}
    for report in reports:
        host = hosts.get(report["id"])
        generation = report["generation"]
        if host is None or generation > host.generation:
            continue
        if host.reported_sequence is not None and sequence <= host.reported_sequence:
            continue
        # An agent restarted since it last saw the host reports its removal with generation 0
        # (it kept no status for it): a removal asked for is taken from any generation.
        removal = host.state == WantedState.REMOVED and report["state"] == ReportedState.REMOVED
        older = host.reported_generation is not None and generation < host.reported_generation
        if older and not removal:
            continue
        host.reported_sequence = sequence
        host.reported_generation = generation
        host.reported_state = report["state"]
        host.reported_message = report.get("message") or ""
        is_running = report["state"] == ReportedState.RUNNING
        host.address = (report.get("address") or "") if is_running else ""
        host.ssh_port = report.get("ssh_port") if is_running else None
        if is_running and report.get("ssh_host_keys"):
            host.ssh_host_keys = report["ssh_host_keys"]
        host.reported_at = now
        if is_running and host.state == WantedState.RUNNING:
            running.append((host, report.get("usage")))
        if (
            host.start_after is not None
            and generation >= host.start_after
            and report["state"] == ReportedState.STOPPED
            and host.state == WantedState.STOPPED
        ):
            transition(
                host,
                WantedState.RUNNING,
                table=AGENT_HOST_TRANSITIONS,
                changes={
                    "generation": host.generation + 1,
                    "card_uuids": held_card_uuids(host),
                    "start_after": None,
                },
            )
            restarted = True
        changed.append(host)
    # What was reported; a restart above wrote its own fields.
    AgentHost.objects.bulk_update(
        changed,
        [
            "reported_sequence",
            "reported_generation",
            "reported_state",
            "reported_message",
            "address",
            "ssh_port",
            "ssh_host_keys",
            "reported_at",
        ],
    )
    saves = {host.handle: by_handle[host.handle] for host in changed if host.save_image}
    if saves:
        from apps.agents.saved_images import record_saves  # it builds on this module

        record_saves(server=server, reports=saves, now=now)
    if restarted:
        bump_hosts_version(server)
    if running:
        record_host_usage(server=server, reports=running, now=now)
    return len(changed)


def bump_hosts_version(server: AgentServer) -> None:
    """The hosts wanted on the server changed: its agent's next poll gets the new list."""
    AgentServer.objects.filter(pk=server.pk).update(hosts_version=F("hosts_version") + 1)


def free_host_ports(host: AgentHost) -> int:
    """A host is removed: its server ports and its public IP are free for the next host (the
    agent drops its forwards with the host, which has left the list it polls, in the same
    firewall change that gives them to another). Returns how many ports."""
    AgentHost.objects.filter(pk=host.pk).update(public_ip=None)
    deleted, _rows = AgentHostPort.objects.filter(host_id=host.pk).delete()
    return deleted


def held_card_uuids(host: AgentHost) -> list[str]:
    """The UUIDs of the cards the portal allocated to the host's instance now (none while it
    is stopped), in index order."""
    instance = (
        Instance.objects.filter(backend_handle=host.handle, node_id=host.server.node_id)
        .exclude(state=InstanceState.RELEASED)
        .first()
    )
    if instance is None:
        return []
    return list(
        Accelerator.objects.filter(
            allocation__workload_id=instance.workload_id, allocation__released_at__isnull=True
        )
        .order_by("index")
        .values_list("serial", flat=True)
    )


# --- tidying -------------------------------------------------------------------------------------

# A host that never reached its instance (the provisioning failed or timed out, and the portal
# gave its cards back) is removed from its server once this much longer than a request may take.
ORPHAN_GRACE = timedelta(seconds=60)


def prune_samples(*, now=None) -> int:
    """Drop card samples older than LOAM_AGENT_SAMPLES_KEPT_S; returns how many."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.LOAM_AGENT_SAMPLES_KEPT_S)
    deleted, _rows = CardSample.objects.filter(at__lt=cutoff).delete()
    return deleted


def remove_orphaned_hosts(*, now=None) -> list[str]:
    """Ask servers to remove the hosts no instance owns any more: a provisioning the portal
    gave up on (failed, timed out) leaves a host that holds cards the portal gave back.
    Returns the handles of the hosts removed."""
    now = now or timezone.now()
    settled_before = now - timedelta(seconds=settings.LOAM_HOST_REQUEST_TIMEOUT_S) - ORPHAN_GRACE
    candidates = list(
        AgentHost.objects.exclude(state=WantedState.REMOVED)
        .filter(created_at__lt=settled_before)
        .select_related("server")
    )
    if not candidates:
        return []
    owned = set(
        Instance.objects.filter(backend_handle__in=[host.handle for host in candidates])
        .exclude(state=InstanceState.RELEASED)
        .values_list("backend_handle", flat=True)
    )
    provisioning = set(
        Instance.objects.filter(
            state=InstanceState.PROVISIONING,
            node_id__in={host.server.node_id for host in candidates},
        ).values_list("node_id", "name")
    )
    removed = []
    for host in candidates:
        if host.handle in owned or (host.server.node_id, host.name) in provisioning:
            continue
        with transaction.atomic():
            lock(AgentServer, host.server_id)  # the server first, as a report locks them
            lock(AgentHost, host.pk)
            fresh = AgentHost.objects.get(pk=host.pk)
            if fresh.state == WantedState.REMOVED:
                continue
            transition(
                fresh,
                WantedState.REMOVED,
                table=AGENT_HOST_TRANSITIONS,
                held=True,
                changes={"generation": fresh.generation + 1, "card_uuids": [], "start_after": None},
            )
            free_host_ports(host)
            bump_hosts_version(host.server)
        removed.append(host.handle)
    return removed
