from datetime import UTC, datetime
from decimal import Decimal

from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from apps.catalog.models import (
    TFLOPS_PER_COMPUTE_UNIT,
    AcceleratorModel,
    Flavor,
    FlavorFamily,
    Image,
    Price,
    PriceKind,
    Region,
    ResourceType,
)
from apps.operations import demo
from apps.operations.demo_life import (
    Cast,
    give_opening_balance,
    write_capacity_samples,
    write_host_samples,
    write_story,
)
from apps.orchestration.models import Backend, Pool
from apps.orchestration.services import register_node
from apps.quotas.models import QuotaLimit
from apps.tenants.models import Membership, Organization, Park, ParkOperator, Role

PRICES_EFFECTIVE_FROM = datetime(2026, 1, 1, tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Create (or bring up to date) the demo park: its catalog, capacity and logins, and a "
        "month of life (hosts, tasks, usage, invoices, transfers, capacity samples)."
    )

    def add_arguments(self, parser):
        # The portal's own base URL by default: deploy/run-local.sh sets it from its port.
        parser.add_argument("--base-url", default=settings.LOAM_BASE_URL)
        parser.add_argument(
            "--no-life",
            action="store_true",
            help="Only the park, its catalog, capacity and logins (for tests that build their "
            "own world on it).",
        )

    def handle(self, *args, base_url, no_life=False, **options):
        with transaction.atomic():
            park, _created = Park.objects.update_or_create(
                slug=demo.PARK["slug"], defaults={"name": demo.PARK["name"]}
            )
            models = self._accelerator_models()
            regions = self._regions(park)
            families = self._families(park, models)
            self._images(park, models)
            backend = self._capacity(park, regions, models)
            self._prices(regions, families)
            cast = self._people(park, backend)
        # Through the services, each use case in its own transaction.
        if no_life:
            give_opening_balance(cast)
        else:
            now = timezone.now()
            write_story(cast, now=now)
            write_capacity_samples(park, now=now)
            write_host_samples(now=now)
        self._report(base_url.rstrip("/"))

    def _accelerator_models(self):
        models = {}
        for row in demo.accelerator_rows():
            tflops = Decimal(row["fp16_dense_tflops"])
            figures = {
                "slug": _slug(row["model"]),
                "memory_gb": int(row["memory_gb"]),
                "fp16_tflops": tflops,
                "tdp_w": int(row["tdp_w"]),
                "software_stack": row["software_stack"].lower(),
                "domestic": row["domestic"] == "true",
                "figures_confidence": row["confidence"],
                "figures_source": row["source"],
            }
            models[row["model"]], _ = AcceleratorModel.objects.update_or_create(
                vendor=demo.VENDOR_CODES[row["vendor"]],
                name=row["model"],
                defaults=figures,
                # Operators may tune units later; seeding again never overwrites their choice.
                create_defaults={**figures, "compute_units": tflops / TFLOPS_PER_COMPUTE_UNIT},
            )
        return models

    def _regions(self, park):
        regions = {}
        for code, name, level, parent, latency in demo.REGIONS:
            regions[code], _ = Region.objects.update_or_create(
                park=park,
                code=code,
                defaults={
                    "name": name,
                    "level": level,
                    "parent": regions.get(parent),
                    "latency_ms": latency,
                },
            )
        return regions

    def _families(self, park, models):
        families = {}
        for model_name, (prefix, vcpu, ram, _price) in demo.FAMILIES.items():
            family, _ = FlavorFamily.objects.update_or_create(
                park=park,
                code=prefix,
                defaults={
                    # Brand names, the same in every language.
                    "name": f"{models[model_name].vendor_name} {model_name} · {prefix}",
                    "accelerator_model": models[model_name],
                    "resource_type": ResourceType.CLOUD_HOST,
                },
            )
            families[model_name] = family
            for size in demo.FLAVOR_SIZES:
                Flavor.objects.update_or_create(
                    family=family,
                    accelerator_count=size,
                    defaults={
                        "code": f"{prefix}.{size}x",
                        "vcpu": vcpu * size,
                        "ram_gb": ram * size,
                        "system_disk_gb": 100,
                    },
                )
        return families

    def _images(self, park, models):
        for stack, code, name, os_name, version, model_names in demo.IMAGES:
            image, _ = Image.objects.update_or_create(
                park=park,
                code=code,
                defaults={
                    "name": name,
                    "os": os_name,
                    "software_stack": stack,
                    "stack_version": version,
                },
            )
            image.compatible_accelerators.set(models[m] for m in model_names if m in models)

    def _capacity(self, park, regions, models):
        backend, _created = Backend.objects.update_or_create(
            park=park,
            name="simulator-demo",
            defaults={"driver": "simulator"},
            # The story sets its config (demo_life: how it answers, which cards idle).
            create_defaults={"driver": "simulator", "config": demo.LIVE_SIMULATOR},
        )
        for region_code, model_name, node_count, cards in demo.POOLS:
            prefix, vcpu, ram, _price = demo.FAMILIES[model_name]
            pue, power_price, carbon = demo.SITE_ENERGY[region_code]
            pool, _ = Pool.objects.update_or_create(
                backend=backend,
                name=f"{region_code}-{prefix}",
                defaults={
                    "region": regions[region_code],
                    "accelerator_model": models[model_name],
                    "pue": Decimal(pue),
                    "power_price_minor_per_kwh": power_price,
                    "carbon_g_per_kwh": carbon,
                },
            )
            for n in range(1, node_count + 1):
                register_node(
                    pool=pool,
                    hostname=f"{region_code}-{prefix}-{n:02d}",
                    accelerators=cards,
                    # A host has room for its cards' share plus the hypervisor's own.
                    vcpu=vcpu * cards + 8,
                    ram_gb=ram * cards + 64,
                )
        return backend

    def _prices(self, regions, families):
        for region_code, model_name, _nodes, _cards in demo.POOLS:
            region = regions[region_code]
            factor = Decimal(str(demo.LEVEL_PRICE_FACTOR[region.level]))
            per_card = demo.FAMILIES[model_name][3]
            for flavor in families[model_name].flavors.all():
                Price.objects.update_or_create(
                    region=region,
                    kind=PriceKind.FLAVOR_HOUR,
                    flavor=flavor,
                    effective_from=PRICES_EFFECTIVE_FROM,
                    defaults={
                        "amount_minor": int(per_card * flavor.accelerator_count * factor),
                        "currency": region.park.currency,
                    },
                )
        for region in regions.values():
            for kind, amount in (
                (PriceKind.DISK_GB_MONTH, demo.DISK_GB_MONTH_MINOR),
                (PriceKind.BANDWIDTH_MBPS_MONTH, demo.BANDWIDTH_MBPS_MONTH_MINOR),
                (PriceKind.NO_CARD_HOUR, demo.NO_CARD_HOUR_MINOR),
            ):
                Price.objects.update_or_create(
                    region=region,
                    kind=kind,
                    flavor=None,
                    effective_from=PRICES_EFFECTIVE_FROM,
                    defaults={"amount_minor": amount, "currency": region.park.currency},
                )

    def _people(self, park, backend) -> Cast:
        _user(demo.PLATFORM_ADMIN, is_superuser=True)
        operator = _user(demo.OPERATOR)
        ParkOperator.objects.get_or_create(park=park, user=operator)
        owner = _user(demo.OWNER)
        organization, _ = Organization.objects.update_or_create(
            park=park,
            slug=demo.ENTERPRISE["slug"],
            defaults={
                "name": demo.ENTERPRISE["name"],
                "legal_name": demo.ENTERPRISE["legal_name"],
                "credit_code": demo.ENTERPRISE["credit_code"],
            },
            create_defaults={**demo.ENTERPRISE, "verification_state": "verified"},
        )
        Membership.objects.update_or_create(
            organization=organization, user=owner, defaults={"role": Role.OWNER}
        )
        for resource, limit in demo.ENTERPRISE_QUOTAS.items():
            QuotaLimit.objects.get_or_create(
                park=park, organization=organization, resource=resource, defaults={"limit": limit}
            )
        # Its wallet and the money in it are the story's (demo_life).
        return Cast(
            park=park,
            backend=backend,
            enterprise=organization,
            owner=owner,
            operator=operator,
            tenant_owners={
                tenant.owner_email: _user({"email": tenant.owner_email})
                for tenant in demo.OTHER_TENANTS
            },
        )

    def _report(self, base_url):
        out = self.stdout
        out.write(self.style.SUCCESS("Demo park ready."))
        out.write(f"  Portal:     {base_url}/")
        out.write(f"  Catalog:    {base_url}/catalog/")
        out.write(f"  Operations: {base_url}/ops/")
        out.write(f"  Admin:      {base_url}/admin/")
        out.write(f"  Health:     {base_url}/healthz")
        for label, spec in (
            ("Park operator", demo.OPERATOR),
            ("Tenant owner", demo.OWNER),
            ("Platform admin", demo.PLATFORM_ADMIN),
        ):
            out.write(f"  {label + ':':16}{spec['email']} / {spec['password']}")


def _slug(name):
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def _user(spec, *, is_superuser=False):
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(
        username=spec["email"],
        defaults={"email": spec["email"], "is_staff": is_superuser, "is_superuser": is_superuser},
    )
    if created:
        # Without a password in the spec, no one signs in as it (the story's other tenants).
        user.set_password(spec.get("password"))
        user.save(update_fields=["password"])
    EmailAddress.objects.update_or_create(
        user=user, email=spec["email"], defaults={"verified": True, "primary": True}
    )
    return user
