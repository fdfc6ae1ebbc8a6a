"""Reaching hosts from outside: port mappings (端口映射) and security groups (安全组).

A host's network is desired state kept by its backend (a driver with the NETWORK capability):
the private network of its organization, its security group's ingress rules, and the ports
forwarded to it (its SSH port, allocated when it is provisioned, and its port mappings). A
driver's `set_network` records it at once and the backend applies it live, so every change
here writes it inside the use case's own transaction: a refusal by the backend (no free port
left) rolls the whole change back, and nothing is half applied.

Locks, in this order: a security group, then its hosts (by id), then whatever the backend's
store locks. A change computes the host's whole network from the rows under the host's lock,
so two changes crossing each other (a rule added while a mapping is) end with both applied.
"""

import ipaddress
import logging

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from apps.core.audit import audit_identity, record_event
from apps.core.errors import DomainError, InvalidTransition
from apps.core.transactions import lock, lock_all, locked
from apps.orchestration.backends.base import SSH_PORT, BackendError, Capability, HostPorts
from apps.orchestration.backends.registry import supports
from apps.orders.hosts import host_driver, host_network
from apps.orders.models import (
    DEFAULT_SECURITY_RULES,
    PORT_MAX,
    PORT_MIN,
    Instance,
    InstanceState,
    PortMapping,
    PortProtocol,
    SecurityGroup,
    SecurityGroupRule,
)
from apps.orders.selectors import hosts_of_group, port_mappings_of
from apps.tenants.access import authorize
from apps.tenants.models import Organization
from apps.tenants.roles import Action

log = logging.getLogger(__name__)

DEFAULT_GROUP_NAME = "default"
MAX_RULES = 50
MAX_GROUPS = 50
_I = InstanceState
# A host whose mappings may change: it exists on its backend and no release is under way.
MAPPABLE_STATES = frozenset({_I.RUNNING, _I.STOPPED})
# A host whose network its backend keeps now (a provisioning host gets it when it is done).
NETWORKED_STATES = frozenset({_I.RUNNING, _I.STOPPED, _I.STOPPING, _I.STARTING, _I.RESIZING})


# --- the backend ------------------------------------------------------------------------------


def has_network(instance: Instance) -> bool:
    """Whether the host's backend networks hosts (forwards ports, applies ingress rules)."""
    return instance.pool is not None and supports(instance.pool.backend.driver, Capability.NETWORK)


def _not_networked(instance: Instance) -> DomainError:
    backend = instance.pool.backend if instance.pool else None
    return DomainError(
        _("%(name)s runs on %(backend)s, which does not forward ports or apply security groups.")
        % {"name": instance.name, "backend": backend.name if backend else _("no backend yet")},
        code="not_supported",
        status=409,
    )


def apply_network(instance: Instance) -> HostPorts:
    """Write the host's whole network to its backend (in the caller's transaction, the host
    locked) and keep the public port the backend chose for each mapping. A backend refusal is
    a DomainError (409; 503 when it may pass)."""
    try:
        ports = host_driver(instance).set_network(instance.backend_handle, host_network(instance))
    except BackendError as exc:
        raise DomainError(
            str(exc),
            code="backend_busy" if exc.transient else "backend_refused",
            status=503 if exc.transient else 409,
        ) from exc
    address = ports.address or None
    for mapping in port_mappings_of(instance):
        port = ports.server_port(mapping.protocol, mapping.host_port)
        if (mapping.server_port, mapping.address) != (port, address):
            mapping.server_port, mapping.address = port, address
            mapping.save(update_fields=["server_port", "address"])
    return ports


def _is_live(instance: Instance) -> bool:
    return bool(instance.backend_handle) and instance.state in NETWORKED_STATES


def sync_provisioned(instance: Instance) -> None:
    """A host just came up: give it its network as it is now, should it have changed while it
    was being created (its group switched, its group's rules edited). Asks nothing of a
    backend without NETWORK. The host is usable either way, so a refusal is logged, not
    raised: it keeps the network it was created with until its next change."""
    if not has_network(instance) or not instance.backend_handle:
        return
    try:
        with transaction.atomic():
            apply_network(instance)
    except DomainError as exc:
        log.warning("instance %s: its network could not be updated: %s", instance.pk, exc)


def _locked_instance(instance: Instance) -> Instance:
    return locked(
        Instance, instance.pk, related=("organization", "pool__backend", "security_group")
    )


# --- security groups --------------------------------------------------------------------------


def default_security_group(organization: Organization) -> SecurityGroup:
    """The organization's default group, made the first time it is needed with
    DEFAULT_SECURITY_RULES (every forwarded port open to all)."""
    group = SecurityGroup.objects.filter(organization=organization, is_default=True).first()
    if group is not None:
        return group
    try:
        with transaction.atomic():  # a concurrent first use makes it instead: take that one
            group = SecurityGroup.objects.create(
                organization=organization,
                name=DEFAULT_GROUP_NAME,
                description=_("Every forwarded port (SSH, port mappings) open to all."),
                is_default=True,
            )
            SecurityGroupRule.objects.bulk_create(
                SecurityGroupRule(group=group, **rule) for rule in DEFAULT_SECURITY_RULES
            )
    except IntegrityError:
        return SecurityGroup.objects.get(organization=organization, is_default=True)
    return group


def _gone(message: str) -> DomainError:
    return DomainError(message, code="not_found", status=404)


def _locked_group(group: SecurityGroup) -> SecurityGroup:
    """The group, locked until the transaction ends, as it is now (deleted meanwhile: 404)."""
    lock(SecurityGroup, group.pk)
    found = SecurityGroup.objects.select_related("organization").filter(pk=group.pk).first()
    if found is None:
        raise _gone(_("This security group was deleted meanwhile."))
    return found


def _clean_group_fields(name: str, description: str) -> tuple[str, str]:
    name, description = (name or "").strip(), (description or "").strip()
    errors = {}
    if not name:
        errors["name"] = _("Give the group a name.")
    elif len(name) > 63:
        errors["name"] = _("A name has at most 63 characters.")
    if len(description) > 200:
        errors["description"] = _("A description has at most 200 characters.")
    if errors:
        raise ValidationError(errors)
    return name, description


def _name_taken(organization, name: str, *, other_than=None) -> bool:
    taken = SecurityGroup.objects.filter(organization=organization, name__iexact=name)
    if other_than is not None:
        taken = taken.exclude(pk=other_than.pk)
    return taken.exists()


@transaction.atomic(durable=True)
def create_security_group(
    *, organization: Organization, actor, name: str, description: str = ""
) -> SecurityGroup:
    """A new group with no rules: a host in it is reached by nothing until rules are added."""
    authorize(actor, organization, Action.ORDER)
    name, description = _clean_group_fields(name, description)
    lock(Organization, organization.pk)
    default_security_group(organization)  # first, so "default" stays the default's name
    if _name_taken(organization, name):
        raise ValidationError({"name": _("This organization has a group of that name.")})
    if SecurityGroup.objects.filter(organization=organization).count() >= MAX_GROUPS:
        raise ValidationError(
            _("An organization has at most %(max)d security groups.") % {"max": MAX_GROUPS}
        )
    group = SecurityGroup.objects.create(
        organization=organization, name=name, description=description
    )
    record_event(
        action="security_group.created",
        actor=actor,
        target=group,
        data={"name": name},
    )
    return group


@transaction.atomic(durable=True)
def update_security_group(
    *, group: SecurityGroup, actor, name: str, description: str = ""
) -> SecurityGroup:
    """Rename a group or change its description (the default group keeps its name)."""
    authorize(actor, group.organization, Action.ORDER)
    group = _locked_group(group)
    name, description = _clean_group_fields(name, description)
    if group.is_default and name != group.name:
        raise ValidationError({"name": _("The default group keeps its name.")})
    if _name_taken(group.organization, name, other_than=group):
        raise ValidationError({"name": _("This organization has a group of that name.")})
    changed = {"name": name, "description": description}
    for field, value in changed.items():
        setattr(group, field, value)
    group.save(update_fields=["name", "description", "updated_at"])
    record_event(action="security_group.updated", actor=actor, target=group, data=changed)
    return group


@transaction.atomic(durable=True)
def delete_security_group(*, group: SecurityGroup, actor) -> None:
    """Delete a group no host uses (released hosts do not count); never the default."""
    authorize(actor, group.organization, Action.ORDER)
    # FOR UPDATE, not the house's NO KEY UPDATE: it waits for an order that holds the group's
    # key (`share_key` in submit_create) and then counts that order's host among the users.
    list(
        SecurityGroup.objects.select_for_update(of=("self",))
        .filter(pk=group.pk)
        .order_by()
        .values_list("pk", flat=True)
    )
    group = _locked_group(group)
    if group.is_default:
        raise InvalidTransition(
            _("The default group cannot be deleted: hosts without a group of their own use it.")
        )
    users = list(hosts_of_group(group).values_list("name", flat=True)[:6])
    if users:
        names = ", ".join(users[:5]) + ("…" if len(users) > 5 else "")
        raise InvalidTransition(
            _(
                "%(group)s is in use by %(hosts)s. Move those hosts to another group (or release "
                "them) first."
            )
            % {"group": group.name, "hosts": names}
        )
    record_event(action="security_group.deleted", actor=actor, target=group)
    group.delete()


def validate_rule(*, protocol: str, from_port, to_port, source: str, description: str = "") -> dict:
    """A rule's fields, checked and in canonical form (the source as
    `ipaddress.ip_network(strict=False)` writes it); a ValidationError names each wrong
    field."""
    errors = {}
    if protocol not in PortProtocol.values:
        errors["protocol"] = _("Choose TCP or UDP.")
    ports = {}
    for field, value in (("from_port", from_port), ("to_port", to_port)):
        try:
            port = int(value)
        except (TypeError, ValueError):
            port = None
        if port is None or isinstance(value, bool) or not PORT_MIN <= port <= PORT_MAX:
            errors[field] = _("A port is a whole number from %(min)d to %(max)d.") % {
                "min": PORT_MIN,
                "max": PORT_MAX,
            }
        ports[field] = port
    if not errors.keys() & {"from_port", "to_port"} and ports["from_port"] > ports["to_port"]:
        errors["to_port"] = _("The range ends at or after the port it starts at.")
    try:
        network = str(ipaddress.ip_network(str(source or "").strip(), strict=False))
    except ValueError:
        network = ""
        errors["source"] = _(
            "Write the source as an IPv4 or IPv6 network in CIDR form, e.g. 0.0.0.0/0, "
            "203.0.113.0/24 or 2001:db8::/32."
        )
    description = (description or "").strip()
    if len(description) > 200:
        errors["description"] = _("A description has at most 200 characters.")
    if errors:
        raise ValidationError(errors)
    return {
        "protocol": protocol,
        "from_port": ports["from_port"],
        "to_port": ports["to_port"],
        "source": network,
        "description": description,
    }


def _apply_group(group: SecurityGroup) -> int:
    """Give every live host of the group (on a backend that networks hosts) its new rules, as
    a new generation of each. Returns how many hosts were changed."""
    candidates = list(hosts_of_group(group).values_list("pk", flat=True))
    if not candidates:
        return 0
    lock_all(Instance, candidates)
    hosts = hosts_of_group(group).filter(pk__in=candidates)  # read again under their locks
    applied = 0
    # By node: a backend locks each host's server before writing it, so two group changes
    # whose hosts share servers take those locks in one order and wait instead of deadlocking.
    hosts = hosts.order_by("node_id", "pk")
    for instance in hosts.select_related("organization", "pool__backend", "security_group"):
        if _is_live(instance) and has_network(instance):
            apply_network(instance)
            applied += 1
    return applied


@transaction.atomic(durable=True)
def add_security_group_rule(
    *,
    group: SecurityGroup,
    actor,
    protocol: str,
    from_port,
    to_port,
    source: str,
    description: str = "",
) -> SecurityGroupRule:
    """Add a rule; every host of the group lets that traffic in at once."""
    authorize(actor, group.organization, Action.ORDER)
    fields = validate_rule(
        protocol=protocol,
        from_port=from_port,
        to_port=to_port,
        source=source,
        description=description,
    )
    group = _locked_group(group)
    rules = group.rules.all()
    if rules.filter(**{k: v for k, v in fields.items() if k != "description"}).exists():
        raise ValidationError(_("The group has this rule already."))
    if rules.count() >= MAX_RULES:
        raise ValidationError(_("A security group has at most %(max)d rules.") % {"max": MAX_RULES})
    rule = SecurityGroupRule.objects.create(group=group, **fields)
    hosts = _apply_group(group)
    record_event(
        action="security_group.rule_added",
        actor=actor,
        target=group,
        data={**fields, "rule": rule.pk, "hosts": hosts},
    )
    return rule


@transaction.atomic(durable=True)
def remove_security_group_rule(*, rule: SecurityGroupRule, actor) -> None:
    """Remove a rule; every host of the group stops letting that traffic in at once."""
    group = rule.group
    authorize(actor, group.organization, Action.ORDER)
    group = _locked_group(group)
    rule = SecurityGroupRule.objects.filter(pk=rule.pk, group=group).first()
    if rule is None:
        raise _gone(_("This rule was removed meanwhile."))
    data = {
        "rule": rule.pk,
        "protocol": rule.protocol,
        "from_port": rule.from_port,
        "to_port": rule.to_port,
        "source": rule.source,
    }
    rule.delete()
    data["hosts"] = _apply_group(group)
    record_event(action="security_group.rule_removed", actor=actor, target=group, data=data)


@transaction.atomic(durable=True)
def set_instance_security_group(*, instance: Instance, actor, group: SecurityGroup) -> Instance:
    """Move a host to another group of its organization: its ingress rules change at once
    (a host still being created gets them when it is up)."""
    authorize(actor, instance.organization, Action.ORDER)
    if group.organization_id != instance.organization_id:
        raise ValidationError({"security_group": _("Choose a group of this organization.")})
    group = _locked_group(group)  # before the host, as a rule change locks them
    instance = _locked_instance(instance)
    if instance.state in (_I.RELEASING, _I.RELEASED):
        raise InvalidTransition(
            _("%(name)s is %(state)s: its security group no longer matters.")
            % {"name": instance.name, "state": instance.get_state_display()}
        )
    if instance.pool is not None and not has_network(instance):
        raise _not_networked(instance)
    previous = instance.security_group
    instance.security_group = group
    instance.save(update_fields=["security_group", "updated_at"])
    if _is_live(instance):
        apply_network(instance)
    record_event(
        action="instance.security_group_changed",
        actor=actor,
        target=instance,
        data={
            "from": previous.name if previous else None,
            "to": group.name,
            "group": group.pk,
        },
    )
    return instance


# --- port mappings ----------------------------------------------------------------------------


def _require_mappable(instance: Instance) -> None:
    if instance.state not in MAPPABLE_STATES:
        raise InvalidTransition(
            _("%(name)s is %(state)s: port mappings change while a host is running or stopped.")
            % {"name": instance.name, "state": instance.get_state_display()}
        )
    if not has_network(instance):
        raise _not_networked(instance)


def validate_mapping(*, protocol: str, host_port) -> dict:
    errors = {}
    if protocol not in PortProtocol.values:
        errors["protocol"] = _("Choose TCP or UDP.")
    try:
        port = int(host_port)
    except (TypeError, ValueError):
        port = None
    if port is None or isinstance(host_port, bool) or not PORT_MIN <= port <= PORT_MAX:
        errors["host_port"] = _("A port is a whole number from %(min)d to %(max)d.") % {
            "min": PORT_MIN,
            "max": PORT_MAX,
        }
    elif port == SSH_PORT:
        errors["host_port"] = _(
            "Port 22 is the host's SSH port, reached already on its own public port."
        )
    if errors:
        raise ValidationError(errors)
    return {"protocol": protocol, "host_port": port}


@transaction.atomic(durable=True)
def add_port_mapping(*, instance: Instance, actor, protocol: str, host_port) -> PortMapping:
    """Reach `host_port` of the host from outside: its backend forwards a port of the server's
    public address to it (the lowest free one there), at once."""
    authorize(actor, instance.organization, Action.ORDER)
    fields = validate_mapping(protocol=protocol, host_port=host_port)
    instance = _locked_instance(instance)
    _require_mappable(instance)
    served = {service.port: service.label for service in instance.image.services}
    if fields["protocol"] == PortProtocol.TCP and fields["host_port"] in served:
        raise ValidationError(
            {
                "host_port": _(
                    "Port %(port)d is the host's %(service)s, which opens from its page "
                    "through the portal; it can't be mapped."
                )
                % {"port": fields["host_port"], "service": served[fields["host_port"]]}
            }
        )
    mappings = instance.port_mappings.all()
    if mappings.filter(**fields).exists():
        raise ValidationError(
            {
                "host_port": _("%(protocol)s port %(port)d is mapped already.")
                % {"protocol": fields["protocol"].upper(), "port": fields["host_port"]}
            }
        )
    if mappings.count() >= settings.LOAM_MAX_PORT_MAPPINGS:
        raise ValidationError(
            _("A host has at most %(max)d port mappings; remove one first.")
            % {"max": settings.LOAM_MAX_PORT_MAPPINGS}
        )
    mapping = PortMapping.objects.create(
        instance=instance, created_by=audit_identity(actor)[0], **fields
    )
    apply_network(instance)  # a refusal (no free port) undoes the mapping too
    mapping.refresh_from_db()
    record_event(
        action="instance.port_mapping_added",
        actor=actor,
        target=instance,
        data={**fields, "server_port": mapping.server_port, "address": mapping.address},
    )
    return mapping


@transaction.atomic(durable=True)
def remove_port_mapping(*, mapping: PortMapping, actor) -> None:
    """Stop forwarding to a port of the host; its public port is free again."""
    instance = mapping.instance
    authorize(actor, instance.organization, Action.ORDER)
    instance = _locked_instance(instance)
    mapping = PortMapping.objects.filter(pk=mapping.pk, instance=instance).first()
    if mapping is None:
        raise _gone(_("This port mapping was removed meanwhile."))
    _require_mappable(instance)
    data = {
        "protocol": mapping.protocol,
        "host_port": mapping.host_port,
        "server_port": mapping.server_port,
    }
    mapping.delete()
    apply_network(instance)
    record_event(action="instance.port_mapping_removed", actor=actor, target=instance, data=data)
