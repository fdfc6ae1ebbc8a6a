from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class OrdersConfig(AppConfig):
    name = "apps.orders"
    verbose_name = _("Orders")

    def ready(self):
        from apps.billing.services import RESUME_HOSTS, SUSPEND_HOSTS
        from apps.orchestration.services import NODE_DRAINED
        from apps.orders.funds import resume_suspended, suspend_for_funds
        from apps.orders.idle import tell_owners_of_drained_node
        from apps.orders.selectors import held_by_instances, pending_growth
        from apps.orders.shared_storage import hosts_mounting
        from apps.quotas.services import QUOTA_HOLDERS
        from apps.sharedfs.services import MOUNTING_HOSTS

        # The quotas' holders for hosts: instances in a holding state and their open growth.
        QUOTA_HOLDERS.plug(held_by_instances)
        QUOTA_HOLDERS.plug(pending_growth)
        SUSPEND_HOSTS.plug(suspend_for_funds)
        RESUME_HOSTS.plug(resume_suspended)
        NODE_DRAINED.plug(tell_owners_of_drained_node)
        MOUNTING_HOSTS.plug(hosts_mounting)
