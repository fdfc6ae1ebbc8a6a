from dataclasses import dataclass
from decimal import Decimal

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from apps.core.money import Currency, format_money
from apps.tenants.models import Organization, Park

# One normalized compute unit (算力单位) is 100 dense FP16 TFLOPS; operators may override the
# units of a model where measured throughput differs from the vendor's figure.
TFLOPS_PER_COMPUTE_UNIT = Decimal(100)


class RegionLevel(models.TextChoices):
    CENTER = "center", _("Center")
    PROVINCE = "province", _("Province")
    EDGE = "edge", _("Edge")


class Region(models.Model):
    """A site on the park's three-level map (中心—省—边缘)."""

    park = models.ForeignKey(
        Park, on_delete=models.CASCADE, related_name="regions", verbose_name=_("park")
    )
    code = models.SlugField(_("code"), max_length=40)
    name = models.CharField(_("name"), max_length=120)
    level = models.CharField(_("level"), max_length=16, choices=RegionLevel.choices)
    parent = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="children",
        verbose_name=_("parent region"),
    )
    latency_ms = models.PositiveIntegerField(
        _("typical latency (ms)"), default=0, help_text=_("From the park's access network.")
    )

    class Meta:
        verbose_name = _("region")
        verbose_name_plural = _("regions")
        ordering = ["park", "level", "name"]
        constraints = [
            models.UniqueConstraint(fields=["park", "code"], name="region_code_unique"),
            models.CheckConstraint(
                condition=Q(level__in=RegionLevel.values), name="region_level_known"
            ),
            models.CheckConstraint(condition=~Q(parent=F("id")), name="region_not_its_own_parent"),
            # Only the center stands alone; a province or edge site hangs under another region.
            models.CheckConstraint(
                condition=Q(level=RegionLevel.CENTER) | Q(parent__isnull=False),
                name="region_non_center_has_parent",
            ),
        ]

    def __str__(self):
        return self.name


class Vendor(models.TextChoices):
    # What each vendor is called in the display language (英伟达, 华为昇腾); VENDOR_BRANDS keeps
    # the brands as the vendors write them.
    NVIDIA = "nvidia", _("NVIDIA")
    HUAWEI = "huawei", _("Huawei")
    HYGON = "hygon", _("Hygon")
    CAMBRICON = "cambricon", _("Cambricon")


VENDOR_BRANDS = {
    Vendor.NVIDIA: "NVIDIA",
    Vendor.HUAWEI: "Huawei",
    Vendor.HYGON: "Hygon",
    Vendor.CAMBRICON: "Cambricon",
}


class SoftwareStack(models.TextChoices):
    CUDA = "cuda", "CUDA"
    CANN = "cann", "CANN"
    DTK = "dtk", "DTK"
    NEUWARE = "neuware", "Neuware"


class AcceleratorModel(models.Model):
    vendor = models.CharField(_("vendor"), max_length=16, choices=Vendor.choices)
    name = models.CharField(_("model"), max_length=80)
    slug = models.SlugField(_("slug"), max_length=60, unique=True)
    memory_gb = models.PositiveIntegerField(_("memory (GB)"))
    fp16_tflops = models.DecimalField(_("dense FP16 TFLOPS"), max_digits=8, decimal_places=1)
    tdp_w = models.PositiveIntegerField(_("TDP (W)"))
    software_stack = models.CharField(
        _("software stack"), max_length=16, choices=SoftwareStack.choices
    )
    domestic = models.BooleanField(_("domestic chip"), default=False)
    compute_units = models.DecimalField(
        _("normalized compute units"),
        max_digits=8,
        decimal_places=3,
        help_text=_("Per accelerator; defaults to dense FP16 TFLOPS / 100."),
    )
    figures_confidence = models.CharField(_("confidence of figures"), max_length=16, blank=True)
    figures_source = models.CharField(_("source of figures"), max_length=200, blank=True)

    class Meta:
        verbose_name = _("accelerator model")
        verbose_name_plural = _("accelerator models")
        ordering = ["vendor", "name"]
        constraints = [
            models.UniqueConstraint(fields=["vendor", "name"], name="accelerator_model_unique"),
            models.CheckConstraint(
                condition=Q(vendor__in=Vendor.values), name="accel_vendor_known"
            ),
            models.CheckConstraint(
                condition=Q(software_stack__in=SoftwareStack.values), name="accel_stack_known"
            ),
            models.CheckConstraint(condition=Q(fp16_tflops__gt=0), name="accel_tflops_positive"),
            models.CheckConstraint(condition=Q(memory_gb__gt=0), name="accel_memory_positive"),
            models.CheckConstraint(condition=Q(tdp_w__gt=0), name="accel_tdp_positive"),
            models.CheckConstraint(condition=Q(compute_units__gt=0), name="accel_units_positive"),
        ]

    def __str__(self):
        return f"{self.get_vendor_display()} {self.name}"

    def save(self, *args, **kwargs):
        if self.compute_units is None:
            self.compute_units = Decimal(self.fp16_tflops) / TFLOPS_PER_COMPUTE_UNIT
        super().save(*args, **kwargs)

    @property
    def vendor_name(self) -> str:
        """The vendor's own (Latin) brand name, whatever the display language."""
        return VENDOR_BRANDS[self.vendor]


class ResourceType(models.TextChoices):
    """What a flavor sells. A fixed enum, not lookup rows: code branches on it."""

    CLOUD_HOST = "cloud_host", _("GPU cloud host")
    BARE_METAL = "bare_metal", _("Bare metal")
    CONTAINER = "container", _("Container")
    TRAINING_TASK = "training_task", _("Training task")


class FlavorFamily(models.Model):
    """A spec family (规格族): the sizes of one accelerator model an instance may resize between."""

    park = models.ForeignKey(
        Park, on_delete=models.CASCADE, related_name="flavor_families", verbose_name=_("park")
    )
    code = models.SlugField(_("code"), max_length=40)
    name = models.CharField(_("name"), max_length=120)
    resource_type = models.CharField(
        _("resource type"),
        max_length=16,
        choices=ResourceType.choices,
        default=ResourceType.CLOUD_HOST,
    )
    accelerator_model = models.ForeignKey(
        AcceleratorModel,
        on_delete=models.PROTECT,
        related_name="families",
        verbose_name=_("accelerator model"),
    )

    class Meta:
        verbose_name = _("flavor family")
        verbose_name_plural = _("flavor families")
        ordering = ["park", "code"]
        constraints = [
            models.UniqueConstraint(fields=["park", "code"], name="flavor_family_code_unique"),
            models.CheckConstraint(
                condition=Q(resource_type__in=ResourceType.values),
                name="flavor_family_resource_type_known",
            ),
        ]

    def __str__(self):
        return self.name

    @property
    def display_name(self) -> str:
        """The name in the display language: a name that begins with its accelerator's brand
        (as the demo's and the host agents' proposed families do: "NVIDIA H200 SXM · h200")
        begins with the vendor's name in that language instead (英伟达 H200 SXM · h200)."""
        model = self.accelerator_model
        brand = model.vendor_name
        if self.name.startswith(f"{brand} "):
            return f"{model.get_vendor_display()}{self.name[len(brand) :]}"
        return self.name


class Flavor(models.Model):
    family = models.ForeignKey(
        FlavorFamily, on_delete=models.PROTECT, related_name="flavors", verbose_name=_("family")
    )
    code = models.CharField(
        _("code"),
        max_length=60,
        validators=[
            RegexValidator(r"^[a-z0-9][a-z0-9.-]*$", _("Lowercase letters, digits, dots, hyphens."))
        ],
    )
    accelerator_count = models.PositiveSmallIntegerField(_("accelerators"))
    vcpu = models.PositiveSmallIntegerField(_("vCPU"))
    ram_gb = models.PositiveIntegerField(_("RAM (GB)"))
    system_disk_gb = models.PositiveIntegerField(_("system disk (GB)"), default=100)
    is_active = models.BooleanField(_("on sale"), default=True)

    class Meta:
        verbose_name = _("flavor")
        verbose_name_plural = _("flavors")
        ordering = ["family", "accelerator_count"]
        constraints = [
            models.UniqueConstraint(fields=["family", "code"], name="flavor_code_unique"),
            models.UniqueConstraint(
                fields=["family", "accelerator_count"], name="flavor_size_unique_in_family"
            ),
            models.CheckConstraint(condition=Q(accelerator_count__gt=0), name="flavor_accels_gt_0"),
            models.CheckConstraint(condition=Q(vcpu__gt=0), name="flavor_vcpu_positive"),
            models.CheckConstraint(condition=Q(ram_gb__gt=0), name="flavor_ram_positive"),
            models.CheckConstraint(
                condition=Q(system_disk_gb__gte=20), name="flavor_system_disk_min"
            ),
        ]

    def __str__(self):
        return self.code

    @property
    def accelerator_model(self):
        return self.family.accelerator_model

    @property
    def compute_units(self):
        return self.family.accelerator_model.compute_units * self.accelerator_count


@dataclass(frozen=True)
class ImageService:
    """A web application an image starts at boot, which the portal opens for the host's
    members in the browser (through nginx, `deploy/nginx/loam.conf`): its name in the host's
    spec and its address (`/instances/<id>/<name>/`), the port it listens on inside the host,
    and what its button says."""

    name: str
    port: int
    label: str


JUPYTER = ImageService(name="jupyter", port=8888, label="JupyterLab")
TENSORBOARD = ImageService(name="tensorboard", port=6006, label="TensorBoard")
# By image code: on an agent pool the code is the recipe's name
# (agent/loam_agent/hosts/recipes/<code>.toml), and the recipe decides what is installed, so an
# operator can't offer a service an image lacks by ticking a box.
IMAGE_SERVICES: dict[str, tuple[ImageService, ...]] = {"pytorch": (JUPYTER, TENSORBOARD)}


class Image(models.Model):
    """A bootable image with one accelerator software stack (CUDA, CANN, DTK, Neuware): the
    park's, offered to every tenant, or an organization's own (a host it saved: its
    `agents.models.SavedImage`), which no other organization sees."""

    park = models.ForeignKey(
        Park, on_delete=models.CASCADE, related_name="images", verbose_name=_("park")
    )
    organization = models.ForeignKey(
        Organization,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="images",
        verbose_name=_("organization"),
    )
    description = models.TextField(_("description"), blank=True)
    code = models.SlugField(_("code"), max_length=60)
    name = models.CharField(_("name"), max_length=120)
    os = models.CharField(_("operating system"), max_length=60)
    software_stack = models.CharField(
        _("software stack"), max_length=16, choices=SoftwareStack.choices
    )
    stack_version = models.CharField(_("stack version"), max_length=40)
    compatible_accelerators = models.ManyToManyField(
        AcceleratorModel, related_name="images", verbose_name=_("compatible accelerators")
    )
    is_active = models.BooleanField(_("available"), default=True)

    class Meta:
        verbose_name = _("image")
        verbose_name_plural = _("images")
        ordering = ["park", "software_stack", "name"]
        constraints = [
            models.UniqueConstraint(fields=["park", "code"], name="image_code_unique"),
            models.CheckConstraint(
                condition=Q(software_stack__in=SoftwareStack.values), name="image_stack_known"
            ),
        ]

    def __str__(self):
        return self.name

    @property
    def services(self) -> tuple[ImageService, ...]:
        return IMAGE_SERVICES.get(self.code, ())


class PriceKind(models.TextChoices):
    FLAVOR_HOUR = "flavor_hour", _("Flavor, per hour")
    DISK_GB_MONTH = "disk_gb_month", _("Cloud disk, per GB per month")
    BANDWIDTH_MBPS_MONTH = "bandwidth_mbps_month", _("Bandwidth, per Mbps per month")
    # A GPU host started without its cards (无卡模式): a CPU host's price, one per region.
    NO_CARD_HOUR = "no_card_hour", _("Host without cards, per hour")


class Price(models.Model):
    """A rate in integer minor units, in force from `effective_from` in one region.

    Rates are stated per hour (flavors) or per month of 30 days (disk, bandwidth), the units
    people compare, and metered per second: a fen per GB·hour would round most disk prices to 0.
    """

    region = models.ForeignKey(
        Region, on_delete=models.CASCADE, related_name="prices", verbose_name=_("region")
    )
    kind = models.CharField(_("kind"), max_length=24, choices=PriceKind.choices)
    flavor = models.ForeignKey(
        Flavor,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="prices",
        verbose_name=_("flavor"),
    )
    amount_minor = models.BigIntegerField(_("amount (minor units)"))
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    effective_from = models.DateTimeField(_("effective from"))

    class Meta:
        verbose_name = _("price")
        verbose_name_plural = _("prices")
        ordering = ["region", "kind", "-effective_from"]
        constraints = [
            models.CheckConstraint(condition=Q(amount_minor__gte=0), name="price_not_negative"),
            models.CheckConstraint(condition=Q(kind__in=PriceKind.values), name="price_kind_known"),
            models.CheckConstraint(
                condition=Q(currency__in=Currency.values), name="price_currency_known"
            ),
            models.CheckConstraint(
                condition=(Q(kind=PriceKind.FLAVOR_HOUR) & Q(flavor__isnull=False))
                | (~Q(kind=PriceKind.FLAVOR_HOUR) & Q(flavor__isnull=True)),
                name="price_flavor_iff_flavor_kind",
            ),
            models.UniqueConstraint(
                fields=["region", "kind", "flavor", "effective_from"],
                condition=Q(flavor__isnull=False),
                name="price_flavor_unique_per_start",
            ),
            models.UniqueConstraint(
                fields=["region", "kind", "effective_from"],
                condition=Q(flavor__isnull=True),
                name="price_resource_unique_per_start",
            ),
        ]
        indexes = [models.Index(fields=["region", "kind", "flavor", "-effective_from"])]

    def __str__(self):
        subject = self.flavor or self.get_kind_display()
        return f"{subject} @ {self.region}: {format_money(self.amount_minor, self.currency)}"
