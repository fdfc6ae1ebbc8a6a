"""The catalog an enrolled server could be sold by: flavors that fit what it reported, the
images it holds, and hourly prices to fill in (issue 36: after a partner's server enrols, the
portal proposes the catalog; the operator accepts or edits it on
/ops/agents/parks/<park>/servers/<server>/catalog/, and `catalog.services.accept_catalog_proposal`
creates it).

`propose` is a pure function of two plain records: the server's facts (`ServerFacts`: its cards,
and the vCPU and RAM its node is scheduled by) and what the park's catalog already has for the
cards' accelerator model (`CatalogFacts`). `proposal_for(server)` reads both and proposes.

A flavor per power-of-two card count up to the server's cards, and one of the whole server
(1x, 2x, 4x, 6x for six cards), each with vCPU and RAM in proportion to its cards out of what the
server has less a reserve (RESERVE_VCPU, RESERVE_RAM_GB), never more than the server has.
Flavors go into a spec family of the accelerator model: an existing one when each of its sizes
the server would be sold in fits the server (its flavors of those sizes then show as already on
sale, or as to be priced in the server's region), else a new one named after the 1x flavor's
shape (`h200-sxm-2c8g`), since a family holds one flavor per card count.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db.models import Prefetch

from apps.agents.models import BASE_IMAGE
from apps.catalog.models import Flavor, FlavorFamily, Image, PriceKind, ResourceType
from apps.catalog.selectors import prices_in_force

# What a server keeps for itself (its agent, the host runtime, the kernel's page cache) out of
# each flavor's share: 1 vCPU and 2 GB. The whole-server flavor gets everything else; smaller
# ones their cards' share of it. A server too small for a reserve (1 vCPU, 2 GB) still gets
# flavors of at least 1 vCPU and 1 GB: never more than it has.
RESERVE_VCPU = 1
RESERVE_RAM_GB = 2
# The system disk a proposed flavor starts with: the catalog editor's own default
# (Flavor.system_disk_gb). The agent reports no disk; where a server does, a flavor gets at most
# its cards' share of it, down to the catalog's least (MIN_SYSTEM_DISK_GB, a constraint).
DEFAULT_SYSTEM_DISK_GB = 100
MIN_SYSTEM_DISK_GB = 20
# The base image every host agent builds (`loam-agent image build`, a recipe in
# agent/loam_agent/hosts/recipes/): proposed for a server whose agent reports no images (an
# older agent). A host's image is asked for by its recipe's name, so the catalog image's code
# must be it.
DEFAULT_AGENT_IMAGE = BASE_IMAGE
# What the portal knows of the agent's recipes: (name, named by what is in it; operating system).
AGENT_IMAGES = {
    DEFAULT_AGENT_IMAGE: ("Debian 12 (bookworm) · Python 3.11", "Debian 12"),
    "pytorch": ("PyTorch 2.13 · Python 3.11 · JupyterLab", "Debian 12"),
    "ascend-cann": ("CANN 8.0 · Python 3.11 · for Ascend NPUs", "Debian 12"),
}
# The stack's user space is not in an agent image: the cards are the server's, with its driver.
AGENT_IMAGE_STACK_VERSION = "server driver"

# What a proposed row is.
NEW = "new"  # to create (a flavor with its price, an image)
UNPRICED = "unpriced"  # a flavor that exists and fits, with no price in the server's region
ON_SALE = "on_sale"  # exists, fits, priced there (a flavor) or runs on the cards (an image)
OFF_SALE = "off_sale"  # exists and fits, but withdrawn from sale: the catalog editor's
EXTEND = "extend"  # an image of the cards' stack that does not list their model yet
CONFLICT = "conflict"  # an image of that code runs another software stack


@dataclass(frozen=True)
class ServerFacts:
    """What the server reported, as placement counts it (its node's vCPU and RAM)."""

    cards: int
    vcpu: int
    ram_gb: int
    disk_gb: int | None = None
    card_models: tuple[str, ...] = ()
    images: tuple[str, ...] = ()  # the images it holds, as its agent reports them


@dataclass(frozen=True)
class ExistingFlavor:
    pk: int
    code: str
    accelerator_count: int
    vcpu: int
    ram_gb: int
    system_disk_gb: int
    is_active: bool
    price_minor: int | None  # in force in the server's region


@dataclass(frozen=True)
class ExistingFamily:
    pk: int
    code: str
    name: str
    flavors: tuple[ExistingFlavor, ...]


@dataclass(frozen=True)
class ExistingImage:
    code: str
    name: str
    runs_on_model: bool  # lists the cards' accelerator model
    same_stack: bool  # of the cards' software stack


@dataclass(frozen=True)
class CatalogFacts:
    """The park's catalog as it concerns the server's accelerator model."""

    model_slug: str
    model_label: str  # "NVIDIA H200 SXM"
    families: tuple[ExistingFamily, ...] = ()  # the model's cloud-host families, by code
    family_codes_taken: frozenset[str] = frozenset()  # every family code of the park
    per_card_price_minor: int | None = None  # an hourly price of one card of the model
    images: dict[str, ExistingImage] = field(default_factory=dict)


@dataclass(frozen=True)
class ProposedFlavor:
    code: str
    accelerator_count: int
    vcpu: int
    ram_gb: int
    system_disk_gb: int
    price_minor: int | None
    status: str = NEW
    flavor_id: int | None = None


@dataclass(frozen=True)
class ProposedImage:
    code: str
    name: str
    os: str
    status: str = NEW


@dataclass(frozen=True)
class Proposal:
    facts: ServerFacts
    family_code: str
    family_name: str
    family_id: int | None  # an existing family the flavors go into
    flavors: tuple[ProposedFlavor, ...]
    images: tuple[ProposedImage, ...]
    images_reported: bool  # False: the agent reported none, DEFAULT_AGENT_IMAGE is proposed

    @property
    def to_accept(self) -> bool:
        """Anything left to create or price."""
        return any(f.status in (NEW, UNPRICED) for f in self.flavors) or any(
            i.status in (NEW, EXTEND) for i in self.images
        )


# --- the pure part -------------------------------------------------------------------------------


def sizes(cards: int) -> tuple[int, ...]:
    """1, 2, 4, 8, … up to `cards`, and `cards` itself (the whole server)."""
    if cards < 1:
        return ()
    found, n = [], 1
    while n <= cards:
        found.append(n)
        n *= 2
    if found[-1] != cards:
        found.append(cards)
    return tuple(found)


def usable(facts: ServerFacts) -> tuple[int, int]:
    """The vCPU and RAM (GB) the server's flavors share: all it has less the reserve, at least
    1 of each."""
    return max(1, facts.vcpu - RESERVE_VCPU), max(1, facts.ram_gb - RESERVE_RAM_GB)


def shape(facts: ServerFacts, count: int) -> tuple[int, int, int]:
    """(vCPU, RAM GB, system disk GB) of a flavor of `count` of the server's cards."""
    vcpu, ram_gb = usable(facts)
    disk = DEFAULT_SYSTEM_DISK_GB
    if facts.disk_gb is not None:
        disk = max(MIN_SYSTEM_DISK_GB, min(disk, facts.disk_gb * count // facts.cards))
    return (
        min(facts.vcpu, max(1, vcpu * count // facts.cards)),
        min(facts.ram_gb, max(1, ram_gb * count // facts.cards)),
        disk,
    )


def fits(facts: ServerFacts, *, accelerator_count: int, vcpu: int, ram_gb: int) -> bool:
    """A host of this shape fits on the empty server."""
    return accelerator_count <= facts.cards and vcpu <= facts.vcpu and ram_gb <= facts.ram_gb


def propose(facts: ServerFacts, catalog: CatalogFacts) -> Proposal:
    """The flavors and images to sell the server by (none without a card)."""
    counts = sizes(facts.cards)
    family = _family_for(facts, catalog, counts)
    by_count = {f.accelerator_count: f for f in family.flavors} if family else {}
    code = family.code if family else _new_family_code(facts, catalog, counts)
    flavors = []
    for count in counts:
        existing = by_count.get(count)
        if existing is not None:
            status = (
                OFF_SALE
                if not existing.is_active
                else ON_SALE
                if existing.price_minor is not None
                else UNPRICED
            )
            flavors.append(
                ProposedFlavor(
                    code=existing.code,
                    accelerator_count=count,
                    vcpu=existing.vcpu,
                    ram_gb=existing.ram_gb,
                    system_disk_gb=existing.system_disk_gb,
                    price_minor=existing.price_minor
                    if existing.price_minor is not None
                    else _price(catalog, count),
                    status=status,
                    flavor_id=existing.pk,
                )
            )
            continue
        vcpu, ram_gb, disk = shape(facts, count)
        flavors.append(
            ProposedFlavor(
                code=f"{code}.{count}x",
                accelerator_count=count,
                vcpu=vcpu,
                ram_gb=ram_gb,
                system_disk_gb=disk,
                price_minor=_price(catalog, count),
            )
        )
    return Proposal(
        facts=facts,
        family_code=code,
        family_name=family.name if family else f"{catalog.model_label} · {code}",
        family_id=family.pk if family else None,
        flavors=tuple(flavors),
        images=_images(facts, catalog) if counts else (),
        images_reported=bool(facts.images),
    )


def _family_for(facts: ServerFacts, catalog: CatalogFacts, counts) -> ExistingFamily | None:
    """The first family of the model whose flavors of the proposed sizes all fit the server."""
    if not counts:
        return None
    for family in catalog.families:
        sized = {f.accelerator_count: f for f in family.flavors}
        if all(
            count not in sized
            or fits(
                facts,
                accelerator_count=count,
                vcpu=sized[count].vcpu,
                ram_gb=sized[count].ram_gb,
            )
            for count in counts
        ):
            return family
    return None


def _new_family_code(facts: ServerFacts, catalog: CatalogFacts, counts) -> str:
    """The model's slug for its first family; beside others, the slug with the 1x shape
    ("h200-sxm-2c8g"), then "-2", "-3", … while taken."""
    base = catalog.model_slug[:24]
    if catalog.families or base in catalog.family_codes_taken:
        vcpu, ram_gb, _disk = shape(facts, counts[0]) if counts else (0, 0, 0)
        base = f"{base}-{vcpu}c{ram_gb}g"
    code, n = base, 2
    while code in catalog.family_codes_taken:
        code, n = f"{base}-{n}", n + 1
    return code


def _price(catalog: CatalogFacts, count: int) -> int | None:
    if catalog.per_card_price_minor is None:
        return None
    return catalog.per_card_price_minor * count


def _images(facts: ServerFacts, catalog: CatalogFacts) -> tuple[ProposedImage, ...]:
    proposed = []
    for code in facts.images or (DEFAULT_AGENT_IMAGE,):
        name, os = AGENT_IMAGES.get(code, (code, code))
        existing = catalog.images.get(code)
        if existing is None:
            status = NEW
        elif existing.runs_on_model:
            status, name = ON_SALE, existing.name
        elif existing.same_stack:
            status, name = EXTEND, existing.name
        else:
            status, name = CONFLICT, existing.name
        proposed.append(ProposedImage(code=code, name=name, os=os, status=status))
    return tuple(proposed)


# --- reading the facts ---------------------------------------------------------------------------


def server_facts(server) -> ServerFacts:
    """An enrolled server's facts: its cards still present, and its node's vCPU and RAM (what
    placement counts; the agent's own figures where they are smaller)."""
    node = server.node
    cards = [card for card in server.cards.all() if card.vanished_at is None]
    vcpu, ram_gb = node.vcpu_total, node.ram_gb_total
    if server.cpu_count:
        vcpu = min(vcpu, server.cpu_count)
    if server.memory_total_mib:
        ram_gb = min(ram_gb, max(1, server.memory_total_mib // 1024))
    models = Counter(card.model or card.vendor for card in cards)
    return ServerFacts(
        cards=len(cards),
        vcpu=vcpu,
        ram_gb=ram_gb,
        card_models=tuple(model for model, _n in models.most_common()),
        images=tuple(sorted(image["name"] for image in server.images)),
    )


def catalog_facts(*, park, region, accelerator_model) -> CatalogFacts:
    """What `park`'s catalog has for `accelerator_model`, with prices in force in `region`."""
    families = (
        FlavorFamily.objects.filter(
            park=park,
            accelerator_model=accelerator_model,
            resource_type=ResourceType.CLOUD_HOST,
        )
        .prefetch_related(
            Prefetch("flavors", queryset=Flavor.objects.order_by("accelerator_count"))
        )
        .order_by("code", "pk")
    )
    families = list(families)
    flavor_ids = [flavor.pk for family in families for flavor in family.flavors.all()]
    prices = prices_in_force(kind=PriceKind.FLAVOR_HOUR, flavor_id__in=flavor_ids)
    here = {p.flavor_id: p.amount_minor for p in prices if p.region_id == region.pk}
    images = {}
    for image in Image.objects.filter(park=park, organization=None).prefetch_related(
        "compatible_accelerators"
    ):
        images[image.code] = ExistingImage(
            code=image.code,
            name=image.name,
            runs_on_model=any(
                m.pk == accelerator_model.pk for m in image.compatible_accelerators.all()
            ),
            same_stack=image.software_stack == accelerator_model.software_stack,
        )
    return CatalogFacts(
        model_slug=accelerator_model.slug,
        model_label=f"{accelerator_model.vendor_name} {accelerator_model.name}",
        families=tuple(
            ExistingFamily(
                pk=family.pk,
                code=family.code,
                name=family.name,
                flavors=tuple(
                    ExistingFlavor(
                        pk=flavor.pk,
                        code=flavor.code,
                        accelerator_count=flavor.accelerator_count,
                        vcpu=flavor.vcpu,
                        ram_gb=flavor.ram_gb,
                        system_disk_gb=flavor.system_disk_gb,
                        is_active=flavor.is_active,
                        price_minor=here.get(flavor.pk),
                    )
                    for flavor in family.flavors.all()
                ),
            )
            for family in families
        ),
        family_codes_taken=frozenset(
            FlavorFamily.objects.filter(park=park).values_list("code", flat=True)
        ),
        per_card_price_minor=_per_card_price(park, region, accelerator_model),
        images=images,
    )


def _per_card_price(park, region, accelerator_model) -> int | None:
    """One card's hourly price of the model in the park now: that of the fewest-card flavor
    priced in `region`, else in any of the park's regions (the lowest there)."""
    prices = [
        price
        for price in prices_in_force(
            kind=PriceKind.FLAVOR_HOUR,
            flavor__family__park=park,
            flavor__family__accelerator_model=accelerator_model,
        )
        if price.amount_minor > 0
    ]
    if not prices:
        return None
    here = [p for p in prices if p.region_id == region.pk] or prices
    best = min(
        here,
        key=lambda p: (p.flavor.accelerator_count, p.amount_minor / p.flavor.accelerator_count),
    )
    return max(1, round(best.amount_minor / best.flavor.accelerator_count))


def proposal_for(server) -> Proposal:
    """What the enrolled `server` could be sold by, in its pool's region and model."""
    pool = server.node.pool
    facts = server_facts(server)
    catalog = catalog_facts(
        park=pool.backend.park, region=pool.region, accelerator_model=pool.accelerator_model
    )
    return propose(facts, catalog)
