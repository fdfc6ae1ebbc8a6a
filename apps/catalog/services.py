"""Catalog writes, which the operators' catalog editor makes: flavor families and flavors, images,
and prices per region with the date they take effect. Every write is checked by the model's own
validation (the database constraints, as form errors) and recorded in the audit log.

A flavor's shape (accelerators, vCPU, RAM) never changes once created: running hosts were
sold that shape. It is taken off sale instead, and a new flavor created. A price is never
edited either: a new one is scheduled from a date, so past usage keeps the rate it ran at.
"""

from dataclasses import dataclass, field
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.catalog.models import (
    Flavor,
    FlavorFamily,
    Image,
    Price,
    PriceKind,
    Region,
    ResourceType,
)
from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.extensions import ExtensionPoint
from apps.core.transactions import lock
from apps.tenants.access import require_operator
from apps.tenants.models import Park

# A flavor's hourly price keeps the floor of a partner's pool it runs on (partners, above us).
PRICE_FLOOR = ExtensionPoint("PRICE_FLOOR")


def keep_price_floors(*, flavor, region, amount_minor: int) -> None:
    """Raise ValidationError({"amount_minor": ...}) for an hourly price below a floor."""
    for check in PRICE_FLOOR.providers():
        check(flavor=flavor, region=region, amount_minor=amount_minor)


def _require(operator, park):
    require_operator(operator, park, _("Only this park's operators may change its catalog."))


def _audit(action, operator, target, park, **data):
    record_event(action=action, actor=operator, target=target, park=park, data=data)


@transaction.atomic(durable=True)
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


@transaction.atomic(durable=True)
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


@transaction.atomic(durable=True)
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


@transaction.atomic(durable=True)
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


@transaction.atomic(durable=True)
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


@transaction.atomic(durable=True)
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
        keep_price_floors(flavor=flavor, region=region, amount_minor=amount_minor)
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


@transaction.atomic(durable=True)
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


# --- a server's proposed catalog, accepted -------------------------------------------------------


@dataclass(frozen=True)
class ServerRoom:
    """What one server has: each flavor sold for it must fit it empty."""

    accelerators: int
    vcpu: int
    ram_gb: int


@dataclass(frozen=True)
class FlavorToSell:
    """A flavor to create in the family (`flavor` None), or one of the family's own to price
    in the region (`flavor`: its shape is not changed)."""

    code: str
    accelerator_count: int
    vcpu: int
    ram_gb: int
    system_disk_gb: int
    hourly_minor: int | None
    flavor: Flavor | None = None


@dataclass(frozen=True)
class ImageToOffer:
    """An image the server holds, by the code its hosts ask for it by: created, or an image of
    the park with that code made to run on the accelerator model too."""

    code: str
    name: str
    os: str
    stack_version: str


@dataclass
class AcceptedCatalog:
    family: FlavorFamily
    flavors: list[Flavor] = field(default_factory=list)  # created
    prices: list[Price] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)  # created or extended


def row_key(kind: str, index: int, name: str) -> str:
    """The key of a refusal about one row's field: "flavor-0-code", "image-1-name"."""
    return f"{kind}-{index}-{name}"


@transaction.atomic(durable=True)
def accept_catalog_proposal(
    *,
    park,
    operator,
    region: Region,
    accelerator_model,
    family_code: str,
    family_name: str,
    room: ServerRoom,
    flavors: list[FlavorToSell],
    images: list[ImageToOffer],
    source: dict | None = None,
) -> AcceptedCatalog:
    """Sell one server's capacity: the flavors (in the family `family_code` of
    `accelerator_model`, created if the park has none by that code) with their hourly prices in
    `region`, from now, and the images its hosts boot, made to run on the model. Each row is
    checked before anything is written, and a refusal names the row and field
    (`row_key("flavor", i, "code")`, "family_code", or the whole): a code the park has, a
    flavor that does not fit `room`, a card count the family has, a price missing or not
    positive, an image of another software stack. Every row written is audited, with `source`
    (what the proposal was for: {"server": ...}) in its data."""
    _require(operator, park)
    if region.park_id != park.pk:
        raise ValidationError({"region": _("This region is not in the park.")})
    # One acceptance at a time in a park: the codes found free below stay free until commit.
    lock(Park, park.pk)
    source = source or {}
    family = FlavorFamily.objects.filter(park=park, code=(family_code or "").strip()).first()
    errors: dict[str, list] = {}

    def refuse(key: str, message: str) -> None:
        errors.setdefault(key, []).append(message)

    if not flavors and not images:
        refuse("__all__", _("Include at least one flavor or image."))
    if family is not None and (
        family.accelerator_model_id != accelerator_model.pk
        or family.resource_type != ResourceType.CLOUD_HOST
    ):
        refuse(
            "family_code",
            _("The family %(code)s sells another accelerator or resource; choose another code.")
            % {"code": family.code},
        )
    _check_flavors(park, family, room, flavors, refuse)
    stacks = _check_images(park, accelerator_model, images, refuse)
    if errors:
        raise ValidationError(errors)

    if family is None:
        family = FlavorFamily(
            park=park,
            code=family_code.strip(),
            name=(family_name or "").strip() or family_code.strip(),
            resource_type=ResourceType.CLOUD_HOST,
            accelerator_model=accelerator_model,
        )
        _clean(family, lambda name: "family_code" if name == "code" else "family_name")
        family.save()
        _audit("catalog.family_created", operator, family, park, code=family.code, **source)
    accepted = AcceptedCatalog(family=family)
    now = timezone.now()
    for index, row in enumerate(flavors):
        flavor = row.flavor
        if flavor is None:
            flavor = Flavor(
                family=family,
                code=row.code.strip(),
                accelerator_count=row.accelerator_count,
                vcpu=row.vcpu,
                ram_gb=row.ram_gb,
                system_disk_gb=row.system_disk_gb,
            )
            _clean(flavor, lambda name, i=index: row_key("flavor", i, name))
            flavor.save()
            accepted.flavors.append(flavor)
            _audit("catalog.flavor_created", operator, flavor, park, family=family.code, **source)
        try:
            keep_price_floors(flavor=flavor, region=region, amount_minor=row.hourly_minor)
        except ValidationError as below:
            raise ValidationError({row_key("flavor", index, "price"): below.messages}) from below
        price = Price(
            region=region,
            kind=PriceKind.FLAVOR_HOUR,
            flavor=flavor,
            amount_minor=row.hourly_minor,
            currency=park.currency,
            effective_from=now,
        )
        _clean(price, lambda name, i=index: row_key("flavor", i, "price"))
        price.save()
        accepted.prices.append(price)
        _audit(
            "catalog.price_scheduled",
            operator,
            price,
            park,
            region=region.code,
            kind=PriceKind.FLAVOR_HOUR,
            flavor=flavor.code,
            amount_minor=row.hourly_minor,
            effective_from=now.isoformat(),
            **source,
        )
    for index, row in enumerate(images):
        image = stacks.get(row.code.strip())
        if image is None:
            image = Image(
                park=park,
                code=row.code.strip(),
                name=row.name.strip(),
                os=row.os.strip(),
                software_stack=accelerator_model.software_stack,
                stack_version=row.stack_version.strip(),
            )
            _clean(image, lambda name, i=index: row_key("image", i, name))
            image.save()
            image.compatible_accelerators.set([accelerator_model])
            _audit(
                "catalog.image_created",
                operator,
                image,
                park,
                accelerators=[accelerator_model.slug],
                **source,
            )
        else:
            image.compatible_accelerators.add(accelerator_model)
            _audit(
                "catalog.image_extended",
                operator,
                image,
                park,
                accelerator=accelerator_model.slug,
                **source,
            )
        accepted.images.append(image)
    return accepted


def _check_flavors(park, family, room: ServerRoom, flavors: list[FlavorToSell], refuse) -> None:
    taken_codes = set(Flavor.objects.filter(family__park=park).values_list("code", flat=True))
    family_counts = (
        set(family.flavors.values_list("accelerator_count", flat=True)) if family else set()
    )
    seen_codes: set[str] = set()
    seen_counts: set[int] = set()
    for index, row in enumerate(flavors):

        def here(name: str, message: str, i=index) -> None:
            refuse(row_key("flavor", i, name), message)

        if row.hourly_minor is None or row.hourly_minor <= 0:
            here("price", _("Give an hourly price above zero."))
        if row.flavor is not None:
            if family is None or row.flavor.family_id != family.pk:
                here("code", _("This flavor is not in the family."))
            continue
        code = (row.code or "").strip()
        if code in taken_codes:
            here("code", _("The park has a flavor %(code)s already.") % {"code": code})
        elif code in seen_codes:
            here("code", _("Two flavors have the code %(code)s.") % {"code": code})
        seen_codes.add(code)
        if row.accelerator_count in family_counts or row.accelerator_count in seen_counts:
            here(
                "accelerator_count",
                _("The family has a flavor of %(count)d accelerators already.")
                % {"count": row.accelerator_count},
            )
        seen_counts.add(row.accelerator_count)
        for name, wanted, has, phrase in (
            (
                "accelerator_count",
                row.accelerator_count,
                room.accelerators,
                _("The server has %(has)d accelerators."),
            ),
            ("vcpu", row.vcpu, room.vcpu, _("The server has %(has)d vCPU.")),
            ("ram_gb", row.ram_gb, room.ram_gb, _("The server has %(has)d GB of RAM.")),
        ):
            if wanted > has:
                here(name, _("It does not fit the server.") + " " + phrase % {"has": has})


def _check_images(park, accelerator_model, images: list[ImageToOffer], refuse) -> dict:
    """{code: the park's image to extend} for the rows that name one; refusals for the rest."""
    existing = {
        image.code: image
        for image in Image.objects.filter(park=park, code__in=[row.code.strip() for row in images])
    }
    extend, seen = {}, set()
    for index, row in enumerate(images):
        code = row.code.strip()
        if code in seen:
            refuse(row_key("image", index, "code"), _("Two images have this code."))
            continue
        seen.add(code)
        image = existing.get(code)
        if image is None:
            continue
        if image.software_stack != accelerator_model.software_stack:
            refuse(
                row_key("image", index, "code"),
                _(
                    "The park's image %(code)s runs %(stack)s, not the accelerator's "
                    "%(model_stack)s; choose another code."
                )
                % {
                    "code": code,
                    "stack": image.get_software_stack_display(),
                    "model_stack": accelerator_model.get_software_stack_display(),
                },
            )
        else:
            extend[code] = image
    return extend


def _clean(instance, key) -> None:
    """The model's own validation, its errors keyed by `key(field name)`."""
    try:
        instance.full_clean()
    except ValidationError as exc:
        raise ValidationError(
            {
                key(name) if name != "__all__" else "__all__": messages
                for name, messages in exc.message_dict.items()
            }
        ) from exc
