from django.db.models import Count, Q

from apps.orchestration.models import Pool


def pool_capacity(parks):
    """Accelerators total / allocated / free per pool in the given parks, with region and model."""
    return (
        Pool.objects.filter(backend__park__in=parks)
        .select_related("region", "accelerator_model", "backend")
        .annotate(
            total=Count("nodes__accelerators"),
            allocated=Count(
                "nodes__accelerators", filter=Q(nodes__accelerators__allocation__isnull=False)
            ),
            node_count=Count("nodes", distinct=True),
        )
        .order_by("region__level", "region__name", "name")
    )
