"""Catalog writes, which the operators' catalog editor makes: flavor families and flavors, images,
and prices per region with the date they take effect. Every write is checked by the model's own
validation (the database constraints, as form errors) and recorded in the audit log.

A flavor's shape (accelerators, vCPU, RAM) never changes once created: running hosts were
sold that shape. It is taken off sale instead, and a new flavor created. A price is never
edited either: a new one is scheduled from a date, so past usage keeps the rate it ran at.
"""

from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.catalog.models import Flavor, FlavorFamily, Image, Price, PriceKind, Region
from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.transactions import lock
from apps.tenants.access import require_operator


def _require(operator, park):
    require_operator(operator, park, _("Only this park's operators may change its catalog."))


def _audit(action, operator, target, park, **data):
    record_event(action=action, actor=operator, target=target, park=park, data=data)


@transaction.atomic
def create_family(
    *, park, operator, code: str, name: str, resource_type: str, accelerator_model
) -> FlavorFamily:
    _require(operator, park)
    family = FlavorFamily(
        park=park,
        code=code.strip(),
        name=name.strip(),
        resource_type=resource_type,
        accelerator_model=accelerator_model,
    )
    family.full_clean()
    family.save()
    _audit("catalog.family_created", operator, family, park, code=family.code)
    return family


@transaction.atomic
def create_flavor(
    *,
    family: FlavorFamily,
    operator,
    code: str,
    accelerator_count: int,
    vcpu: int,
    ram_gb: int,
    system_disk_gb: int,
    is_active: bool = True,
) -> Flavor:
    _require(operator, family.park)
    flavor = Flavor(
        family=family,
        code=code.strip(),
        accelerator_count=accelerator_count,
        vcpu=vcpu,
        ram_gb=ram_gb,
        system_disk_gb=system_disk_gb,
        is_active=is_active,
    )
    flavor.full_clean()
    flavor.save()
    _audit("catalog.flavor_created", operator, flavor, family.park, family=family.code)
    return flavor


@transaction.atomic
def set_flavor_on_sale(*, flavor: Flavor, operator, on_sale: bool) -> Flavor:
    park = Flavor.objects.select_related("family__park").get(pk=flavor.pk).family.park
    _require(operator, park)
    lock(Flavor, flavor.pk)
    flavor = Flavor.objects.select_related("family__accelerator_model").get(pk=flavor.pk)
    if flavor.is_active != on_sale:
        flavor.is_active = on_sale
        flavor.save(update_fields=["is_active"])
        _audit(
            "catalog.flavor_on_sale" if on_sale else "catalog.flavor_withdrawn",
            operator,
            flavor,
            park,
        )
    return flavor


@transaction.atomic
def create_image(
    *,
    park,
    operator,
    code: str,
    name: str,
    os: str,
    software_stack: str,
    stack_version: str,
    compatible_accelerators,
) -> Image:
    """An image runs only on accelerators of its own software stack (CUDA, CANN, …)."""
    _require(operator, park)
    wrong = [m for m in compatible_accelerators if m.software_stack != software_stack]
    if wrong:
        raise ValidationError(
            {
                "compatible_accelerators": _("%(models)s do not run this image's software stack.")
                % {"models": ", ".join(str(m) for m in wrong)}
            }
        )
    image = Image(
        park=park,
        code=code.strip(),
        name=name.strip(),
        os=os.strip(),
        software_stack=software_stack,
        stack_version=stack_version.strip(),
    )
    image.full_clean()
    image.save()
    image.compatible_accelerators.set(compatible_accelerators)
    _audit(
        "catalog.image_created",
        operator,
        image,
        park,
        accelerators=sorted(m.slug for m in compatible_accelerators),
    )
    return image


@transaction.atomic
def set_image_available(*, image: Image, operator, available: bool) -> Image:
    _require(operator, image.park)
    lock(Image, image.pk)
    image = Image.objects.get(pk=image.pk)
    if image.is_active != available:
        image.is_active = available
        image.save(update_fields=["is_active"])
        _audit(
            "catalog.image_available" if available else "catalog.image_withdrawn",
            operator,
            image,
            image.park,
        )
    return image


@transaction.atomic
def schedule_price(
    *,
    region: Region,
    operator,
    kind: str,
    amount_minor: int,
    flavor: Flavor | None = None,
    effective_from=None,
) -> Price:
    """A new rate for a flavor (per hour) or for disk or bandwidth (per 30-day month) in one
    region, in force from `effective_from` (now by default; never in the past)."""
    park = region.park
    _require(operator, park)
    now = timezone.now()
    effective_from = effective_from or now
    if effective_from < now - timedelta(minutes=1):
        raise ValidationError(
            {
                "effective_from": _(
                    "A price takes effect now or later: past usage keeps the rate it ran at."
                )
            }
        )
    if kind == PriceKind.FLAVOR_HOUR:
        if flavor is None:
            raise ValidationError({"flavor": _("Choose the flavor this hourly price is for.")})
        if flavor.family.park_id != park.pk:
            raise ValidationError({"flavor": _("This flavor is not in the region's park.")})
    elif flavor is not None:
        raise ValidationError({"flavor": _("Disk and bandwidth prices are not per flavor.")})
    price = Price(
        region=region,
        kind=kind,
        flavor=flavor,
        amount_minor=amount_minor,
        currency=park.currency,
        effective_from=effective_from,
    )
    price.full_clean()
    price.save()
    _audit(
        "catalog.price_scheduled",
        operator,
        price,
        park,
        region=region.code,
        kind=kind,
        flavor=flavor.code if flavor else None,
        amount_minor=amount_minor,
        effective_from=effective_from.isoformat(),
    )
    return price


@transaction.atomic
def withdraw_price(*, price: Price, operator) -> None:
    """Take back a price that is not in force yet; one that has applied stays on record."""
    park = Price.objects.select_related("region__park").get(pk=price.pk).region.park
    _require(operator, park)
    lock(Price, price.pk)
    price = Price.objects.select_related("region", "flavor").get(pk=price.pk)
    if price.effective_from <= timezone.now():
        raise DomainError(
            _("This price is already in force; schedule a new one instead."), code="price_applied"
        )
    _audit(
        "catalog.price_withdrawn",
        operator,
        price,
        park,
        region=price.region.code,
        amount_minor=price.amount_minor,
        effective_from=price.effective_from.isoformat(),
    )
    price.delete()
