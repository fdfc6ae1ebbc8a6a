"""Volumes (`storage`) on this app's hosts: attached to a stopped or running host on the server
that keeps the volume, detached from a stopped or released one; a host's data disk kept or
deleted when the host is released. The host's row is locked first (LOCK_ORDER), so its state
can't change under the attachment."""

from django.db import transaction
from django.utils.translation import gettext as _

from apps.core.transactions import locked
from apps.orders.models import Instance, InstanceState
from apps.orders.services import lock_host
from apps.storage import services as storage
from apps.storage.models import Volume
from apps.tenants.access import authorize
from apps.tenants.roles import Action

ATTACHABLE_TO = frozenset({InstanceState.RUNNING, InstanceState.STOPPED})
# A volume bound into a running host stays there until it stops: detach only then.
DETACHABLE_FROM = frozenset({InstanceState.STOPPED, InstanceState.RELEASED, InstanceState.ERROR})


@transaction.atomic(durable=True)
def attach_volume(*, volume: Volume, instance: Instance, mount_path: str, actor) -> bool:
    """`volume` attached to `instance` at `mount_path`; True when it appears only at the host's
    next start (the host runs: nspawn binds nothing into a running host here)."""
    instance = locked(Instance, instance.pk, related=("workload", "node__pool"))
    if instance.organization_id != volume.organization_id:
        raise storage.VolumeRefused(_("That host is not your organization's."))
    if instance.state not in ATTACHABLE_TO or instance.node is None:
        raise storage.VolumeRefused(
            _("A volume is attached to a running or stopped host; this one is %(state)s.")
            % {"state": instance.get_state_display()}
        )
    storage.attach(
        volume=volume,
        actor=actor,
        workload=instance.workload,
        node=instance.node,
        mount_path=mount_path,
    )
    return instance.state == InstanceState.RUNNING


@transaction.atomic(durable=True)
def detach_volume(*, volume: Volume, actor) -> Volume:
    """`volume` off the host it is attached to, which must not run."""
    workload_id, data_disk_of = (
        Volume.objects.filter(pk=volume.pk).values_list("workload_id", "data_disk_of_id").get()
    )
    if workload_id is not None and data_disk_of is None:  # a data disk is refused as it is
        instance = Instance.objects.filter(workload_id=workload_id).first()
        if instance is not None:
            instance = locked(Instance, instance.pk)
            if instance.state not in DETACHABLE_FROM:
                raise storage.VolumeRefused(
                    _("Stop the host %(host)s before detaching its volume (it is %(state)s).")
                    % {"host": instance.name, "state": instance.get_state_display()}
                )
    return storage.detach(volume=volume, actor=actor, workload_id=workload_id)


@transaction.atomic(durable=True)
def keep_data_disk(*, instance: Instance, actor, keep: bool) -> Volume:
    """Whether the host's data disk is kept as a volume of its own when the host is released
    (by the tenant, or by the park's auto-release), or deleted with it (the default): the choice
    a release that says none follows. Keeping it is counted in the storage quota now."""
    authorize(actor, instance.organization, Action.RELEASE)
    instance = lock_host(instance.pk)
    if instance.state in (InstanceState.RELEASING, InstanceState.RELEASED):
        raise storage.VolumeRefused(
            _("%(host)s is %(state)s: its data disk's fate is settled.")
            % {"host": instance.name, "state": instance.get_state_display()}
        )
    return storage.choose_data_disk_fate(workload_id=instance.workload_id, actor=actor, keep=keep)
