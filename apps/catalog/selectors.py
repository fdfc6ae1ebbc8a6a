from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, Q
from django.utils import timezone

from apps.catalog.models import AcceleratorModel, Flavor, Price, PriceKind
from apps.orchestration.models import Accelerator, NodeHealth


def free_accelerators_by_node() -> dict[int, list[int]]:
    """Free accelerators of each schedulable node, grouped by accelerator model id."""
    rows = (
        Accelerator.objects.filter(
            allocation__isnull=True,
            node__health=NodeHealth.HEALTHY,
            node__is_drained=False,
            node__pool__is_schedulable=True,
            node__pool__backend__is_enabled=True,
        )
        .values("node", "node__pool__accelerator_model")
        .annotate(free=Count("id"))
    )
    by_model = defaultdict(list)
    for row in rows:
        by_model[row["node__pool__accelerator_model"]].append(row["free"])
    return by_model


def current_flavor_prices(at=None) -> dict[int, list[Price]]:
    """The price in force per flavor and region (latest `effective_from` not in the future)."""
    at = at or timezone.now()
    prices = (
        Price.objects.filter(kind=PriceKind.FLAVOR_HOUR, effective_from__lte=at)
        .select_related("region")
        .order_by("flavor_id", "region_id", "-effective_from")
    )
    seen, by_flavor = set(), defaultdict(list)
    for price in prices:
        if (price.flavor_id, price.region_id) not in seen:
            seen.add((price.flavor_id, price.region_id))
            by_flavor[price.flavor_id].append(price)
    return by_flavor


@dataclass(frozen=True)
class FlavorCard:
    flavor: Flavor
    prices: list[Price]
    free_per_node: list[int]

    @property
    def cheapest(self) -> Price | None:
        return min(self.prices, key=lambda p: p.amount_minor, default=None)

    @property
    def cheapest_per_second_minor(self) -> Decimal | None:
        return Decimal(self.cheapest.amount_minor) / 3600 if self.cheapest else None

    @property
    def available_now(self) -> int:
        """How many hosts of this flavor still fit; an instance's cards sit on one node."""
        return sum(free // self.flavor.accelerator_count for free in self.free_per_node)


def catalog_flavors(*, vendor: str = "", domestic_only: bool = False) -> list[FlavorCard]:
    flavors = Flavor.objects.filter(is_active=True).select_related("family__accelerator_model")
    if vendor:
        flavors = flavors.filter(family__accelerator_model__vendor=vendor)
    if domestic_only:
        flavors = flavors.filter(family__accelerator_model__domestic=True)
    prices = current_flavor_prices()
    free = free_accelerators_by_node()
    return [
        FlavorCard(
            flavor=flavor,
            prices=prices.get(flavor.pk, []),
            free_per_node=free.get(flavor.family.accelerator_model_id, []),
        )
        for flavor in flavors.order_by(
            "family__accelerator_model__vendor", "family__code", "accelerator_count"
        )
    ]


def catalog_summary() -> list[dict]:
    """Accelerator models side by side with their total and free counts, for the home page."""
    free = free_accelerators_by_node()
    models = (
        AcceleratorModel.objects.annotate(
            total=Count("pools__nodes__accelerators", filter=Q(pools__is_schedulable=True))
        )
        .filter(total__gt=0)
        .order_by("domestic", "vendor", "name")
    )
    return [{"model": m, "total": m.total, "free": sum(free.get(m.pk, []))} for m in models]


def price_in_force(*, region, kind: str, flavor=None, at=None) -> Price | None:
    at = at or timezone.now()
    return (
        Price.objects.filter(region=region, kind=kind, flavor=flavor, effective_from__lte=at)
        .order_by("-effective_from")
        .first()
    )


def compatible_images(flavor):
    return flavor.family.accelerator_model.images.filter(
        is_active=True, park=flavor.family.park
    ).order_by("software_stack", "name")
