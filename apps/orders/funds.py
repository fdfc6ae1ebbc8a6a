"""Hosts stopped when their organization's wallet runs out, and started again once it can pay.
Billing decides when (`SUSPEND_HOSTS`, `RESUME_HOSTS`); these say how, plugged in at ready()."""

import logging

from django.utils import timezone
from django.utils.translation import gettext as _

from apps.billing.models import FundsSuspension, Wallet
from apps.billing.services import BILLING_ACTOR
from apps.core.errors import DomainError
from apps.orders.models import Instance, InstanceState, OrderKind, OrderState
from apps.orders.operations import request_operation

log = logging.getLogger(__name__)


def suspend_for_funds(organization_id: int) -> int:
    """Stop (never release) the organization's running hosts; returns how many were stopped.

    The suspension is recorded first, so a crash before the stop is retried by the next
    metering run, and resuming finds every host it stopped.
    """
    stopped = 0
    running = Instance.objects.filter(organization_id=organization_id, state=InstanceState.RUNNING)
    for instance in running:
        FundsSuspension.objects.get_or_create(workload_id=instance.workload_id, resumed_at=None)
        try:
            request_operation(
                instance=instance,
                actor=BILLING_ACTOR,
                kind=OrderKind.STOP,
                reason=_("The wallet ran out; stopped until it is topped up."),
            )
        except DomainError as refused:  # busy with another operation: the next run tries again
            log.info("not stopping %s for funds yet: %s", instance, refused)
            continue
        stopped += 1
    return stopped


def resume_suspended(organization_id: int) -> int:
    """Start the hosts stopped for funds once the wallet can pay again, each as it ran (a host
    without its cards starts without them again); returns how many."""
    if Wallet.objects.get(organization_id=organization_id).available_minor <= 0:
        return 0
    started = 0
    suspensions = FundsSuspension.objects.filter(
        workload__organization_id=organization_id, resumed_at__isnull=True
    ).select_related("workload__instance")
    for suspension in suspensions:
        instance = suspension.workload.instance
        if instance.state == InstanceState.STOPPED:
            try:
                request_operation(
                    instance=instance,
                    actor=BILLING_ACTOR,
                    kind=OrderKind.START,
                    params=_as_it_ran(instance),
                    reason=_("The wallet can pay again; started as it ran before."),
                )
            except DomainError as refused:  # still stopping: the next top-up or run retries
                log.info("not resuming %s yet: %s", instance, refused)
                continue
            started += 1
        elif instance.state not in (
            InstanceState.RUNNING,
            InstanceState.RELEASED,
            InstanceState.ERROR,
        ):
            continue  # still stopping, or busy: the next metering run retries
        FundsSuspension.objects.filter(pk=suspension.pk).update(resumed_at=timezone.now())
    return started


def _as_it_ran(instance: Instance) -> dict:
    """The start parameters that bring `instance` back as its last stop found it."""
    stop = instance.orders.filter(kind=OrderKind.STOP, state=OrderState.DONE).order_by("-pk")
    ran = stop.values_list("parameters", flat=True).first() or {}
    return {"without_cards": True} if ran.get("without_cards") else {}
