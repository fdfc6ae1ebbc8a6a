from django.db import transaction

from apps.orchestration.models import Accelerator, Node, Pool


@transaction.atomic
def register_node(*, pool: Pool, hostname: str, accelerators: int, vcpu: int, ram_gb: int) -> Node:
    """Create or update a node and make sure it has exactly `accelerators` devices (0..n-1).

    Devices beyond the new count are removed only while free; one still allocated makes this
    refuse, so shrinking a node can never take an accelerator from a running instance.
    """
    node, _ = Node.objects.update_or_create(
        pool=pool, hostname=hostname, defaults={"vcpu_total": vcpu, "ram_gb_total": ram_gb}
    )
    node = Node.objects.select_for_update().get(pk=node.pk)
    existing = set(node.accelerators.values_list("index", flat=True))
    Accelerator.objects.bulk_create(
        Accelerator(node=node, index=i, serial=f"{hostname}-{i}")
        for i in range(accelerators)
        if i not in existing
    )
    surplus = node.accelerators.filter(index__gte=accelerators)
    if surplus.filter(allocation__isnull=False).exists():
        raise ValueError(f"{hostname}: cannot remove accelerators that are allocated")
    surplus.delete()
    return node
