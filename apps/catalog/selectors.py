"""Catalog reads shared by the pages and the API: flavors with their prices in force and the
capacity free for them right now (through `FREE_ROOM`)."""

from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from functools import cached_property, partial
from uuid import uuid4

from django.core.cache import cache
from django.db import connections, router, transaction
from django.db.models import Count, Q
from django.utils import timezone

from apps.catalog.models import AcceleratorModel, Flavor, FlavorFamily, Price, PriceKind
from apps.core.extensions import ExtensionPoint
from apps.core.sql import ModelColumns, placeholders


@dataclass(frozen=True)
class NodeRoom:
    """What one schedulable node has free (what `nodes` nodes each have free, once counted
    together: most nodes of a pool have the same room)."""

    region_id: int
    accelerators: int
    vcpu: int
    ram_gb: int
    nodes: int = 1


# Free room lives in the nodes, which the orchestration app (a floor above) owns and plugs in:
# a callable (park or None) -> {accelerator model id: [NodeRoom, …]}.
FREE_ROOM = ExtensionPoint("free room of schedulable nodes, by accelerator model")

# Whether an organization may order a flavor now is decided by its quotas, a floor above: a
# callable (organization, [(flavor, hourly price in minor units or None), …]) -> {flavor id:
# why ordering one host of it now would be refused}.
ORDER_REFUSALS = ExtensionPoint("why ordering a flavor now would be refused")

# Servers that build their own host images (the host agents', `loam-agent image build`) start
# only the images they hold, which they report to the agents app, a floor above: a callable
# (park=, accelerator_model_id=, region=) -> the codes of the images the pools of that model
# (in that region) hold, or None where any image of the catalog starts (a simulator's pool).
HELD_IMAGES = ExtensionPoint("the images the pools of an accelerator model hold")


def with_order_refusals(organization, cards: list["FlavorCard"]) -> list["FlavorCard"]:
    """`cards`, each that `organization` could not order one host of now with its `refusal`
    (the catalog says so on the card, before the order form)."""
    offers = [
        (card.flavor, card.cheapest.amount_minor if card.cheapest else None) for card in cards
    ]
    refusals = {}
    for provider in ORDER_REFUSALS.providers():
        refusals.update(provider(organization, offers))
    return [
        replace(card, refusal=refusals[card.flavor.pk]) if card.flavor.pk in refusals else card
        for card in cards
    ]


# Free room is counted once per change, not once per reader: every catalog (the page, a visitor's
# or a tenant's, and the API's) reads it from the cache, stored under a version that
# `free_room_changed` replaces wherever allocations, nodes or pools change (in the transaction,
# and again once it commits). The time to live only bounds how late a change shows that was
# made past the services (the admin) or in a process that does not share the cache (the
# embedded default's Celery worker, beside runserver's memory): a recount costs three queries.
FREE_ROOM_CACHED_FOR = 10
FREE_ROOM_VERSION_KEY = "catalog:free-room:version"
# The catalog's own rows (accelerator models, flavor families, flavors, regions, prices), versioned
# the same way for the reads kept whole (`apps.catalog.kept_reads`): `catalog_changed` replaces it.
CATALOG_VERSION_KEY = "catalog:rows:version"


def version_in(found: dict, key: str) -> str:
    """The version stored under `key`, from what one `get_many` `found` (or a new one, where
    none was stored yet: never changed since the cache started, or evicted)."""
    version = found.get(key)
    if version is None:
        cache.add(key, uuid4().hex, timeout=None)
        version = cache.get(key)
    return version


def free_room(park=None) -> dict[int, list[NodeRoom]]:
    """The free room of `park`'s schedulable nodes (every park's when None) by accelerator
    model id, as of the last change: one round trip to the cache, three queries after a change."""
    # Not the key the count was cached under before versions (another shape of value).
    key = f"catalog:free-room-by-model:{park.pk if park is not None else 'all'}"
    found = cache.get_many([FREE_ROOM_VERSION_KEY, key])
    version = version_in(found, FREE_ROOM_VERSION_KEY)
    stored = found.get(key)
    if stored is not None and stored[0] == version:
        return stored[1]
    rooms = _alike_together(FREE_ROOM.one()(park))
    cache.set(key, (version, rooms), FREE_ROOM_CACHED_FOR)
    return rooms


def _alike_together(by_model: dict[int, list[NodeRoom]]) -> dict[int, list[NodeRoom]]:
    """Nodes with the same room as one NodeRoom of their number: a park of thousands of nodes
    has a few dozen rooms, which the cache stores and every reader unpickles."""
    together = {}
    for model_id, rooms in by_model.items():
        counted = Counter(replace(room, nodes=1) for room in rooms)
        together[model_id] = [replace(room, nodes=n) for room, n in counted.items()]
    return together


def free_room_changed() -> None:
    """Say that free room changed (an allocation made, resized or released; a node added,
    drained, marked down or back; a pool taken out of scheduling): every catalog counts it again.
    Called inside the transaction that changes it, it moves the cache to a new version now (the
    transaction's own reads count again) and once more when the transaction commits (a count
    read meanwhile, without the change, is not kept)."""
    _version_changed(FREE_ROOM_VERSION_KEY)


def catalog_changed() -> None:
    """Say that a row the catalog shows changed (a flavor, its family or accelerator model, a
    region, a price): the reads kept whole are built again, now and once the change commits, as
    free room's count is (apps.catalog.apps calls it on every save and delete of those rows)."""
    _version_changed(CATALOG_VERSION_KEY)


def _version_changed(key: str) -> None:
    _new_version(key)
    if transaction.get_connection().in_atomic_block:
        transaction.on_commit(partial(_new_version, key), robust=True)


def _new_version(key: str) -> None:
    cache.set(key, uuid4().hex, timeout=None)


def _in_force(*, kind: str, at=None, **filters):
    """Prices of `kind` that have started by `at` (default now), the latest start first: the
    one in force for a flavor (or a resource) and region is the first of its group."""
    at = at or timezone.now()
    return Price.objects.filter(kind=kind, effective_from__lte=at, **filters).order_by(
        "flavor_id", "region_id", "-effective_from"
    )


def prices_in_force(*, kind: str = PriceKind.FLAVOR_HOUR, at=None, **filters) -> list[Price]:
    """The price in force per flavor and region (one query), with region and flavor family."""
    prices = _in_force(kind=kind, at=at, **filters).select_related("region", "flavor__family")
    seen, current = set(), []
    for price in prices:
        if (price.flavor_id, price.region_id) not in seen:
            seen.add((price.flavor_id, price.region_id))
            current.append(price)
    return current


def current_flavor_prices(at=None, *, park=None) -> dict[int, list[Price]]:
    """The flavor-hour prices in force, per flavor (in `park`'s regions where given), each with
    its region: one query, which builds two objects a price (the catalog reads no more)."""
    scope = {"region__park": park} if park is not None else {}
    prices = _in_force(kind=PriceKind.FLAVOR_HOUR, at=at, **scope).select_related("region")
    by_flavor, seen = defaultdict(list), set()
    for price in prices:
        if (price.flavor_id, price.region_id) not in seen:
            seen.add((price.flavor_id, price.region_id))
            by_flavor[price.flavor_id].append(price)
    return by_flavor


def next_price_start(after) -> datetime | None:
    """When the first price scheduled after `after` takes effect, or None: what is in force
    changes then without a write."""
    return (
        Price.objects.filter(effective_from__gt=after)
        .order_by("effective_from")
        .values_list("effective_from", flat=True)
        .first()
    )


def price_in_force(*, region, kind: str, flavor=None, at=None) -> Price | None:
    return _in_force(kind=kind, at=at, region=region, flavor=flavor).first()


def region_prices_in_force(*, region, flavor, at=None) -> dict[str, Price | None]:
    """What a host of `flavor` in `region` is priced by, in one query: {kind: the price in
    force or None} for the flavor's hour, a GB of disk a month and a Mbps a month."""
    return prices_by_region(region_ids=[region.pk], flavor=flavor, at=at)[region.pk]


def _as_column(moment):
    """`moment` as the database keeps a datetime (SQLite: UTC text), which a raw statement's
    parameters are not turned into."""
    return connections[router.db_for_read(Price)].ops.adapt_datetimefield_value(moment)


_PRICE = ModelColumns((Price, "price"))


def prices_by_region(*, region_ids, flavor, at=None) -> dict[int, dict[str, Price | None]]:
    """`region_prices_in_force` for each of the regions, in one query: {region id: {kind: the
    price in force or None}}."""
    at = at or timezone.now()
    resources = (PriceKind.DISK_GB_MONTH, PriceKind.BANDWIDTH_MBPS_MONTH)
    region_ids = list(region_ids)
    in_force = {
        region_id: dict.fromkeys((PriceKind.FLAVOR_HOUR, *resources)) for region_id in region_ids
    }
    # Written out: every order and quote asks, and the ORM took twice this read's cost to
    # build it, a raw queryset more than the statement's (bench/order_profile.py).
    started = _PRICE.fetch(
        f"""
FROM "catalog_price" price
WHERE price.region_id IN ({placeholders(region_ids)}) AND price.effective_from <= %s
    AND ((price.kind = %s AND price.flavor_id = %s)
        OR (price.kind IN ({placeholders(resources)}) AND price.flavor_id IS NULL))
ORDER BY price.region_id, price.kind, price.effective_from DESC
""",
        [*region_ids, _as_column(at), PriceKind.FLAVOR_HOUR, flavor.pk, *resources],
    )
    for (price,) in started:
        if in_force[price.region_id][price.kind] is None:
            in_force[price.region_id][price.kind] = price
    return in_force


@dataclass(frozen=True)
class FlavorCard:
    flavor: Flavor
    prices: list[Price]  # in force, in the regions the filters allow
    rooms: list[NodeRoom]  # free room on nodes of those regions
    refusal: str = ""  # why the tenant's quotas would refuse one host of it now

    # The page and the sorts read these several times a card: each is worked out once.
    @cached_property
    def cheapest(self) -> Price | None:
        return min(self.prices, key=lambda p: p.amount_minor, default=None)

    @cached_property
    def tflops(self) -> Decimal:
        return self.flavor.family.accelerator_model.fp16_tflops * self.flavor.accelerator_count

    @property
    def price_per_tflops_minor(self) -> Decimal | None:
        """Hourly price per dense FP16 TFLOPS: how chips of different vendors compare."""
        return Decimal(self.cheapest.amount_minor) / self.tflops if self.cheapest else None

    @cached_property
    def available_now(self) -> int:
        """How many hosts of this flavor still fit; a host's accelerators sit on one node."""
        flavor = self.flavor
        return sum(
            room.nodes
            * min(
                room.accelerators // flavor.accelerator_count,
                room.vcpu // flavor.vcpu,
                room.ram_gb // flavor.ram_gb,
            )
            for room in self.rooms
        )

    @property
    def price_per_accelerator_minor(self) -> Decimal | None:
        """Hourly price of one card of the flavor: how sizes of one family compare."""
        if not self.cheapest:
            return None
        return Decimal(self.cheapest.amount_minor) / self.flavor.accelerator_count

    @property
    def price_per_compute_unit_minor(self) -> Decimal | None:
        """Hourly price per normalized compute unit (the park's own measure of performance)."""
        if not self.cheapest:
            return None
        return Decimal(self.cheapest.amount_minor) / self.flavor.compute_units


SORTS = {
    "price": lambda c: (c.cheapest is None, c.cheapest.amount_minor if c.cheapest else 0),
    "price_per_accelerator": lambda c: (c.cheapest is None, c.price_per_accelerator_minor or 0),
    "price_per_tflops": lambda c: (c.cheapest is None, c.price_per_tflops_minor or 0),
    "price_per_compute_unit": lambda c: (c.cheapest is None, c.price_per_compute_unit_minor or 0),
    "performance": lambda c: -c.tflops,
    "accelerator_memory": lambda c: -c.flavor.family.accelerator_model.memory_gb,
}


def resource_types_on_sale(park=None) -> list[str]:
    """The resource types that have a flavor on sale (in the park, or in any park)."""
    families = FlavorFamily.objects.filter(flavors__is_active=True)
    if park is not None:
        families = families.filter(park=park)
    return sorted(set(families.values_list("resource_type", flat=True)))


@dataclass(frozen=True)
class CatalogFilters:
    """What the catalog page and the API filter by; empty values filter nothing."""

    resource_type: str = ""
    vendor: str = ""
    accelerator_model: AcceleratorModel | None = None
    accelerator_count: int | None = None
    min_accelerator_memory_gb: int | None = None
    min_vcpu: int | None = None
    min_ram_gb: int | None = None
    region: object = None
    region_level: str = ""
    min_hourly_minor: int | None = None
    max_hourly_minor: int | None = None
    domestic_only: bool = False
    available_only: bool = False
    sort: str = ""
    park: object = None


def catalog_flavors(filters: CatalogFilters | None = None) -> list[FlavorCard]:
    f = filters or CatalogFilters()
    flavors = Flavor.objects.filter(is_active=True).select_related("family__accelerator_model")
    model_filters = {
        "family__resource_type": f.resource_type,
        "family__accelerator_model__vendor": f.vendor,
        "family__accelerator_model": f.accelerator_model,
        "accelerator_count": f.accelerator_count,
        "family__accelerator_model__memory_gb__gte": f.min_accelerator_memory_gb,
        "vcpu__gte": f.min_vcpu,
        "ram_gb__gte": f.min_ram_gb,
        "family__park": f.park,
    }
    flavors = flavors.filter(**{k: v for k, v in model_filters.items() if v not in ("", None)})
    if f.domestic_only:
        flavors = flavors.filter(family__accelerator_model__domestic=True)

    def region_allowed(region) -> bool:
        if f.region is not None and region.pk != f.region.pk:
            return False
        return not f.region_level or region.level == f.region_level

    prices = current_flavor_prices(park=f.park)
    rooms = free_room(f.park)
    cards = []
    for flavor in flavors:
        allowed = [p for p in prices.get(flavor.pk, []) if region_allowed(p.region)]
        allowed_regions = {p.region_id for p in allowed}
        card = FlavorCard(
            flavor=flavor,
            prices=allowed,
            rooms=[
                r
                for r in rooms.get(flavor.family.accelerator_model_id, [])
                if r.region_id in allowed_regions
            ],
        )
        if (f.region is not None or f.region_level) and not allowed:
            continue  # not sold in the chosen region(s)
        price = card.cheapest.amount_minor if card.cheapest else None
        if f.min_hourly_minor is not None and (price is None or price < f.min_hourly_minor):
            continue
        if f.max_hourly_minor is not None and (price is None or price > f.max_hourly_minor):
            continue
        if f.available_only and card.available_now == 0:
            continue
        cards.append(card)
    cards.sort(
        key=lambda c: (
            c.flavor.family.accelerator_model.vendor,
            c.flavor.family.code,
            c.flavor.accelerator_count,
        )
    )
    if f.sort in SORTS:
        cards.sort(key=SORTS[f.sort])
    return cards


def catalog_summary(park=None) -> list[dict]:
    """Accelerator models side by side with their total and free counts, for the home page."""
    rooms = free_room(park)
    pools = Q(pools__is_schedulable=True)
    if park is not None:
        pools &= Q(pools__backend__park=park)
    models = (
        AcceleratorModel.objects.annotate(total=Count("pools__nodes__accelerators", filter=pools))
        .filter(total__gt=0)
        .order_by("domestic", "vendor", "name")
    )
    return [
        {
            "model": m,
            "total": m.total,
            "free": sum(r.accelerators * r.nodes for r in rooms.get(m.pk, [])),
        }
        for m in models
    ]


def visible_images(organization=None):
    """The park's images, and `organization`'s own (its saved images): no other's."""
    return (
        Q(organization=None) | Q(organization=organization)
        if organization
        else Q(organization=None)
    )


def compatible_images(flavor, organization=None):
    """The images on sale that run on the flavor's cards (with `organization`'s own)."""
    return (
        flavor.family.accelerator_model.images.filter(is_active=True, park=flavor.family.park)
        .filter(visible_images(organization))
        .order_by("software_stack", "name")
    )


def held_image_codes(*, park, accelerator_model_id, region=None) -> frozenset[str] | None:
    """The codes of the images some pool of this model (in `region`) can start a host of, or
    None where that is any image (`HELD_IMAGES`)."""
    for provider in HELD_IMAGES.providers():
        return provider(park=park, accelerator_model_id=accelerator_model_id, region=region)
    return None


def offered_images(flavor, organization=None):
    """The compatible images a host of `flavor` can be ordered with: those some pool selling
    it holds (with `organization`'s own)."""
    images = compatible_images(flavor, organization)
    codes = held_image_codes(
        park=flavor.family.park, accelerator_model_id=flavor.family.accelerator_model_id
    )
    return images if codes is None else images.filter(code__in=codes)


@dataclass(frozen=True)
class ParkPrices:
    """One park's price list: its regions (the columns), each flavor on sale with its hourly
    price per region (None where it is not sold), and what a GB of disk and a Mbps cost a month
    in each region."""

    park: object
    regions: list
    flavors: list[tuple[Flavor, list[Price | None]]]
    disk: list[Price | None]
    bandwidth: list[Price | None]


def price_sheet(park=None) -> list[ParkPrices]:
    """The prices in force of `park` (every park's when None), for the public price list: one
    query however many parks, regions and flavors."""
    scope = {"region__park": park} if park is not None else {}
    prices = (
        Price.objects.filter(effective_from__lte=timezone.now(), **scope)
        .select_related("region__park", "flavor__family__accelerator_model")
        .order_by("kind", "flavor_id", "region_id", "-effective_from")
    )
    current, seen = defaultdict(dict), set()
    for price in prices:
        key = (price.kind, price.flavor_id, price.region_id)
        if key not in seen:
            seen.add(key)
            current[price.region.park][key] = price
    sheets = []
    for each_park, by_key in sorted(current.items(), key=lambda item: item[0].name):
        regions = sorted({price.region for price in by_key.values()}, key=lambda r: r.name)
        flavors = sorted(
            {
                price.flavor
                for price in by_key.values()
                if price.flavor is not None and price.flavor.is_active
            },
            key=lambda f: (f.family.name, f.accelerator_count, f.code),
        )

        sheets.append(
            ParkPrices(
                park=each_park,
                regions=regions,
                flavors=[
                    (flavor, _by_region(by_key, regions, PriceKind.FLAVOR_HOUR, flavor.pk))
                    for flavor in flavors
                ],
                disk=_by_region(by_key, regions, PriceKind.DISK_GB_MONTH),
                bandwidth=_by_region(by_key, regions, PriceKind.BANDWIDTH_MBPS_MONTH),
            )
        )
    return sheets


def _by_region(prices: dict, regions, kind: str, flavor_id=None) -> list[Price | None]:
    """The price of `kind` (of the flavor) in force in each region, None where there is none."""
    return [prices.get((kind, flavor_id, region.pk)) for region in regions]
