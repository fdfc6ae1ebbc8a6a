"""How the back office names what the audit log stores as codes: actions (`task.succeeded`),
actors (`system:scheduler`, `api-key:ab12cd`) and object types (`orders.instance`).

The log keeps the codes (they are what filters and exports match on); people read the labels.
A code without a label is shown as it is, so a new action is never hidden."""

from django.apps import apps
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.billing.models import InvoiceState, PaymentState
from apps.orchestration.models import TaskState
from apps.orders.models import InstanceState, OrderState
from apps.tenants.models import VerificationState
from apps.webhooks.models import DeliveryState

ACTIONS = {
    "agent.credential_revoked": gettext_lazy("Agent credential revoked"),
    "agent.join_token_issued": gettext_lazy("Agent join token issued"),
    "agent.join_token_revoked": gettext_lazy("Agent join token revoked"),
    "agent.pool_added": gettext_lazy("Pool for agent servers added"),
    "agent.server_enrolled": gettext_lazy("Agent server enrolled"),
    "api_key.created": gettext_lazy("API key created"),
    "api_key.revoked": gettext_lazy("API key revoked"),
    "auth.login": gettext_lazy("Signed in"),
    "auth.login_failed": gettext_lazy("Sign-in failed"),
    "backend.error": gettext_lazy("Backend error"),
    "backend.recovered": gettext_lazy("Backend recovered"),
    "backend.registered": gettext_lazy("Backend registered"),
    "bank_transfer.announced": gettext_lazy("Bank transfer announced"),
    "bank_transfer.cancelled": gettext_lazy("Bank transfer cancelled"),
    "bank_transfer.credited": gettext_lazy("Bank transfer credited"),
    "bank_transfer.rejected": gettext_lazy("Bank transfer rejected"),
    "billing.balance_adjusted": gettext_lazy("Balance adjusted"),
    "billing.low_balance": gettext_lazy("Low balance warning"),
    "billing.spend_quota": gettext_lazy("Monthly spend limit reached"),
    "billing.terms_changed": gettext_lazy("Billing terms changed"),
    "catalog.family_created": gettext_lazy("Flavor family created"),
    "catalog.flavor_created": gettext_lazy("Flavor created"),
    "catalog.flavor_on_sale": gettext_lazy("Flavor put on sale"),
    "catalog.flavor_withdrawn": gettext_lazy("Flavor withdrawn from sale"),
    "catalog.image_available": gettext_lazy("Image made available"),
    "catalog.image_created": gettext_lazy("Image created"),
    "catalog.image_extended": gettext_lazy("Image made to run on another accelerator"),
    "catalog.image_withdrawn": gettext_lazy("Image withdrawn"),
    "catalog.price_scheduled": gettext_lazy("Price set"),
    "catalog.price_withdrawn": gettext_lazy("Scheduled price withdrawn"),
    "instance.auto_released": gettext_lazy("Stopped instance released by the park's policy"),
    "instance.force_released": gettext_lazy("Instance force-released"),
    "instance.idle_notice": gettext_lazy("Idle instance notice"),
    "instance.idle_stopped": gettext_lazy("Idle instance stopped"),
    "instance.port_mapping_added": gettext_lazy("Port mapping added"),
    "instance.port_mapping_removed": gettext_lazy("Port mapping removed"),
    "instance.release_notice": gettext_lazy("Notice of a stopped instance's release"),
    "instance.scheduled_stop": gettext_lazy("Instance stopped as scheduled"),
    "instance.security_group_changed": gettext_lazy("Instance moved to another security group"),
    "instance.stop_scheduled": gettext_lazy("Instance stop scheduled"),
    "instance.stop_unscheduled": gettext_lazy("Scheduled instance stop cleared"),
    "instance.terminal_closed": gettext_lazy("Web terminal closed"),
    "instance.terminal_opened": gettext_lazy("Web terminal opened"),
    "invitation.accepted": gettext_lazy("Invitation accepted"),
    "invitation.created": gettext_lazy("Member invited"),
    "invitation.resent": gettext_lazy("Invitation resent"),
    "invitation.revoked": gettext_lazy("Invitation revoked"),
    "invoice.issued": gettext_lazy("Invoice issued"),
    "membership.removed": gettext_lazy("Member removed"),
    "membership.role_changed": gettext_lazy("Member role changed"),
    "node.drained": gettext_lazy("Node drained"),
    "node.health_changed": gettext_lazy("Node health changed"),
    "node.undrained": gettext_lazy("Node back in service"),
    "order.submitted": gettext_lazy("Order submitted"),
    "organization.created": gettext_lazy("Organization created"),
    "park.approval_policy": gettext_lazy("Approval policy changed"),
    "park.idle_policy": gettext_lazy("Idle policy changed"),
    "park.mfa_policy": gettext_lazy("Security policy changed"),
    "park.operator_added": gettext_lazy("Park operator added"),
    "partner.created": gettext_lazy("Partner created"),
    "partner.floor_price_set": gettext_lazy("Partner floor price set"),
    "partner.pool_assigned": gettext_lazy("Pool given to a partner"),
    "partner.pool_unassigned": gettext_lazy("Pool given back to the park"),
    "partner.settlement_computed": gettext_lazy("Partner statement computed"),
    "partner.settlement_confirmed": gettext_lazy("Partner statement confirmed"),
    "partner.settlement_paid": gettext_lazy("Partner statement paid"),
    "partner.share_changed": gettext_lazy("Partner revenue share changed"),
    "pool.updated": gettext_lazy("Pool updated"),
    "quota.changed": gettext_lazy("Quota changed"),
    "scheduling_policy.changed": gettext_lazy("Scheduling policy changed"),
    "fair_share.changed": gettext_lazy("Organization's fair share changed"),
    "saved_image.requested": gettext_lazy("Host saved as an image"),
    "saved_image_copy.requested": gettext_lazy("Saved image copied to another server"),
    "security_group.created": gettext_lazy("Security group created"),
    "security_group.deleted": gettext_lazy("Security group deleted"),
    "security_group.rule_added": gettext_lazy("Security group rule added"),
    "security_group.rule_removed": gettext_lazy("Security group rule removed"),
    "security_group.updated": gettext_lazy("Security group changed"),
    "sharedfs.created": gettext_lazy("Shared file storage created"),
    "sharedfs.deleted": gettext_lazy("Shared file storage deleted"),
    "task.pending_at_backend": gettext_lazy("Task waiting at the backend"),
    "task.made_room": gettext_lazy("Preemptible tasks requeued to make room for a task"),
    "task.preempted": gettext_lazy("Task preempted and requeued"),
    "task.submitted": gettext_lazy("Training task submitted"),
    "vat_invoice.cancelled": gettext_lazy("VAT invoice request cancelled"),
    "volume.attached": gettext_lazy("Cloud disk attached"),
    "volume.created": gettext_lazy("Cloud disk created"),
    "volume.detached": gettext_lazy("Cloud disk detached"),
    "volume.grown": gettext_lazy("Cloud disk grown"),
    "volume.kept_on_release": gettext_lazy("Data disk to be kept when its host is released"),
    "volume.deleted_on_release": gettext_lazy("Data disk to be deleted with its host"),
    "volume.snapshotted": gettext_lazy("Cloud disk snapshot made"),
    "vat_invoice.issued": gettext_lazy("VAT invoice issued"),
    "vat_invoice.rejected": gettext_lazy("VAT invoice request rejected"),
    "vat_invoice.requested": gettext_lazy("VAT invoice requested"),
    "webhook.created": gettext_lazy("Webhook created"),
    "webhook.deleted": gettext_lazy("Webhook deleted"),
    "webhook.redelivered": gettext_lazy("Webhook redelivered"),
    "webhook.updated": gettext_lazy("Webhook updated"),
}

# State transitions are logged as "<model>.<new state>" (apps.core.transitions).
TRANSITIONS = {
    "order": (gettext_lazy("Order"), OrderState),
    "instance": (gettext_lazy("Instance"), InstanceState),
    "task": (gettext_lazy("Training task"), TaskState),
    "organization": (gettext_lazy("Verification"), VerificationState),
    "payment": (gettext_lazy("Payment"), PaymentState),
    "invoice": (gettext_lazy("Invoice"), InvoiceState),
    "webhookdelivery": (gettext_lazy("Webhook delivery"), DeliveryState),
    # The agents app stands above this one: its states are read from the model's field.
    "agenthost": (gettext_lazy("Host on an agent server"), "agents.AgentHost"),
    "savedimage": (gettext_lazy("Saved image"), "agents.SavedImage"),
}

SYSTEM_ACTORS = {
    "system": gettext_lazy("System"),
    "system:auto-release": gettext_lazy("System · auto-release"),
    "system:billing": gettext_lazy("System · billing"),
    "system:idle-policy": gettext_lazy("System · idle policy"),
    "system:scheduled-stop": gettext_lazy("System · scheduled stop"),
    "system:scheduler": gettext_lazy("System · scheduler"),
}


def action_label(code: str) -> str:
    """`task.succeeded` -> "Training task: Succeeded"; an unknown code is returned as it is."""
    if code in ACTIONS:
        return str(ACTIONS[code])
    subject, _dot, state = code.partition(".")
    if subject in TRANSITIONS:
        name, states = TRANSITIONS[subject]
        if isinstance(states, str):
            states = dict(apps.get_model(states)._meta.get_field("state").flatchoices)
        else:
            states = dict(states.choices)
        if state in states:
            return _("%(object)s: %(state)s") % {"object": name, "state": states[state]}
    return code


def actor_label(label: str) -> str:
    """A user's e-mail stays; the system, park operators acting for the park, API keys and host
    agents get a readable name."""
    if label in SYSTEM_ACTORS:
        return str(SYSTEM_ACTORS[label])
    kind, _colon, name = label.partition(":")
    if kind == "system" and name.startswith("park-operator:"):
        return _("Park operator %(name)s") % {"name": name.removeprefix("park-operator:")}
    if kind == "api-key" and name:
        return _("API key %(prefix)s…") % {"prefix": name}
    if kind == "agent" and name:
        return _("Host agent on %(host)s") % {"host": name}
    return label


def object_type_label(label: str) -> str:
    """`orders.instance` -> the model's verbose name; an unknown label is returned as it is."""
    try:
        return str(apps.get_model(label)._meta.verbose_name)
    except (LookupError, ValueError):
        return label
