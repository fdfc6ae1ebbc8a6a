"""GPU-less start (无卡模式开机): a stopped GPU host started without its cards, on a small share of
its server's CPU and memory, to move data or fix its environment without paying for cards.

It starts on its own node (its disks are there), holding no card, and pays the region's no-card
price (`catalog.models.PriceKind.NO_CARD_HOUR`, set by the park like the disk and bandwidth
prices) while it runs that way. A normal start later takes its flavor's cards again, or is
refused while they are taken.
"""

from dataclasses import replace

from django.utils.translation import gettext as _

from apps.catalog.models import PriceKind
from apps.catalog.selectors import price_in_force
from apps.core.errors import DomainError
from apps.orchestration.backends.base import HostSpec
from apps.orchestration.services import Shape, shape_of
from apps.orders.models import Instance

# The share a host runs on without its cards (at most its flavor's own): enough for copying
# data and installing packages, little enough to leave the server's CPUs to hosts with cards.
NO_CARD_VCPU = 2
NO_CARD_RAM_GB = 4


def no_card_shape(flavor) -> Shape:
    full = shape_of(flavor)
    return replace(
        full,
        accelerators=0,
        vcpu=min(NO_CARD_VCPU, full.vcpu),
        ram_gb=min(NO_CARD_RAM_GB, full.ram_gb),
    )


def no_card_spec(spec: HostSpec) -> HostSpec:
    """`spec` (the host as its flavor) without cards, on the no-card share."""
    return replace(
        spec,
        accelerator_indices=(),
        vcpu=min(NO_CARD_VCPU, spec.vcpu),
        ram_gb=min(NO_CARD_RAM_GB, spec.ram_gb),
    )


def no_card_price(instance: Instance):
    """The hourly price in force for `instance` without its cards, or None where its region
    sets none."""
    return price_in_force(region=instance.region, kind=PriceKind.NO_CARD_HOUR)


def check_without_cards(instance: Instance):
    """Refuse a GPU-less start where the region sets no price for it; returns the price it
    would run at. (Every flavor has cards: `catalog.models.Flavor` holds at least one.)"""
    price = no_card_price(instance)
    if price is None:
        raise DomainError(
            _("%(region)s sets no price for hosts without cards, so they can't start that way.")
            % {"region": instance.region.name},
            code="not_priced",
            status=422,
        )
    return price
