import uuid

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import Flavor, Image, PriceKind, Region
from apps.catalog.selectors import compatible_images, offered_images, price_in_force
from apps.core.money import format_money
from apps.core.widgets import LongSelect
from apps.orchestration.models import TaskPreference
from apps.orders.expiry import MAX_AFTER_HOURS, MIN_AFTER_HOURS
from apps.orders.models import PORT_MAX, PORT_MIN, InstanceState, PortProtocol, SecurityGroup
from apps.orders.selectors import NOT_RELEASED
from apps.orders.services import (
    MAX_BANDWIDTH_MBPS,
    MAX_COUNT,
    MAX_DATA_DISK_GB,
    MAX_SYSTEM_DISK_GB,
    HostRequest,
)

# The fields a quote depends on; the others (name, key) only have to be right to order.
PRICED_FIELDS = (
    "flavor",
    "image",
    "region",
    "preference",
    "system_disk_gb",
    "data_disk_gb",
    "bandwidth_mbps",
    "count",
)


class InstanceOrderForm(forms.Form):
    flavor = forms.ModelChoiceField(
        label=_("Flavor"), queryset=Flavor.objects.none(), to_field_name="code", empty_label=None
    )
    image = forms.ModelChoiceField(
        label=_("Image"), queryset=Image.objects.none(), to_field_name="code", empty_label=None
    )
    region = forms.ModelChoiceField(
        label=_("Region"),
        queryset=Region.objects.none(),
        to_field_name="code",
        required=False,
        empty_label=_("Let the scheduler choose"),
    )
    preference = forms.ChoiceField(
        label=_("Scheduler preference"),
        choices=TaskPreference.choices,
        initial=TaskPreference.BALANCED,
        required=False,
        help_text=_("Among the hosts with room: the fastest, the cheapest or the greenest."),
    )
    name = forms.CharField(
        label=_("Name"), max_length=60, initial="gpu-host", help_text=_("Becomes the host name.")
    )
    system_disk_gb = forms.IntegerField(
        label=_("System disk (GB)"), min_value=20, max_value=MAX_SYSTEM_DISK_GB
    )
    data_disk_gb = forms.IntegerField(
        label=_("Cloud disk (GB)"), min_value=0, max_value=MAX_DATA_DISK_GB, initial=0
    )
    bandwidth_mbps = forms.IntegerField(
        label=_("Bandwidth (Mbps)"), min_value=0, max_value=MAX_BANDWIDTH_MBPS, initial=10
    )
    count = forms.IntegerField(label=_("Count"), min_value=1, max_value=MAX_COUNT, initial=1)
    ssh_public_key = forms.CharField(
        label=_("SSH public key"),
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "ssh-ed25519 AAAA… you@laptop"}),
        help_text=_(
            "The key you will log in with, e.g. the contents of ~/.ssh/id_ed25519.pub. Hosts "
            "with a web terminal need none: the terminal logs in by itself."
        ),
        required=False,
    )
    security_group = forms.ModelChoiceField(
        label=_("Security group"),
        queryset=SecurityGroup.objects.none(),
        required=False,
        empty_label=_("The organization's default group"),
        help_text=_("What may reach the host's SSH port and port mappings from outside."),
    )
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=64)

    def __init__(self, *args, park, flavor=None, organization=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["security_group"].queryset = security_groups_choice(organization)
        self.fields["security_group"].label_from_instance = lambda group: group.label
        flavors = (
            Flavor.objects.filter(is_active=True, family__park=park)
            .select_related("family__accelerator_model")
            .order_by("family__code", "accelerator_count")
        )
        self.fields["flavor"].queryset = flavors
        self.fields["region"].queryset = Region.objects.filter(park=park)
        chosen = flavor or self._bound_flavor(flavors) or flavors.first()
        if chosen is not None:
            self.fields["flavor"].initial = chosen.code
            # Any compatible image is accepted here, so one no server holds is refused by the
            # service with the reason; only those the flavor's pools hold are offered.
            self.fields["image"].queryset = compatible_images(chosen, organization)
            self.fields["image"].choices = [
                (image.code, image.name) for image in offered_images(chosen, organization)
            ]
            self.fields["system_disk_gb"].initial = chosen.system_disk_gb
        self.fields["idempotency_key"].initial = uuid.uuid4().hex

    def _bound_flavor(self, flavors):
        code = self.data.get("flavor") if self.is_bound else None
        return flavors.filter(code=code).first() if code else None

    def host_request(self) -> HostRequest:
        return HostRequest.from_data(self.cleaned_data)

    def priced_request(self) -> HostRequest | None:
        """The request as far as its price goes, once the fields that set the price are valid
        (the name and the SSH key may still be missing); None while one of those is not."""
        self.is_valid()
        if any(name in self.errors for name in PRICED_FIELDS):
            return None
        return HostRequest.from_data(self.cleaned_data)


class HostListFilterForm(forms.Form):
    """The host list's filters, from the query string (a filtered list is a link); an invalid
    one is ignored."""

    state = forms.ChoiceField(
        label=_("State"),
        required=False,
        choices=[(NOT_RELEASED, _("Not released")), ("", _("All states"))] + InstanceState.choices,
    )
    # The park's every region (tens at issue 15's scale): options written out in Python.
    region = forms.ModelChoiceField(
        label=_("Region"),
        queryset=Region.objects.none(),
        required=False,
        empty_label=_("All"),
        widget=LongSelect,
    )

    def __init__(self, data, *, park):
        if "state" not in data:
            data = {**data.dict(), "state": NOT_RELEASED}
        super().__init__(data)
        self.fields["region"].queryset = Region.objects.filter(park=park).order_by("name")

    def values(self) -> dict:
        """`instances_for`'s keywords: the valid filters, and the default state otherwise."""
        values = {"state": NOT_RELEASED, "region": None}
        if self.is_valid():
            values.update(self.cleaned_data)
        else:
            values.update({k: v for k, v in self.cleaned_data.items() if k not in self.errors})
        return values


class ResizeForm(forms.Form):
    flavor = forms.ModelChoiceField(
        label=_("New size"), queryset=Flavor.objects.none(), to_field_name="code", empty_label=None
    )

    def __init__(self, *args, instance, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields["flavor"]
        # Any size on sale is accepted here, so one of another family is refused by the
        # service with the reason; only the sizes of the host's own family are offered.
        field.queryset = Flavor.objects.filter(
            is_active=True, family__park=instance.organization.park
        ).exclude(pk=instance.flavor_id)
        currency = instance.organization.park.currency
        current = instance.rates.get("flavor_hour")
        field.choices = [
            (
                flavor.code,
                _size_label(
                    flavor,
                    price_in_force(
                        region=instance.region, kind=PriceKind.FLAVOR_HOUR, flavor=flavor
                    ),
                    current,
                    currency,
                ),
            )
            for flavor in field.queryset.filter(family=instance.flavor.family)
            .select_related("family__accelerator_model")
            .order_by("accelerator_count")
        ]


def _size_label(flavor: Flavor, price, current_hourly_minor, currency: str) -> str:
    """a100.2x · 2 × A100 · ¥55.20/h (+¥27.60): what the size costs and how that changes."""
    cards = _("%(count)d × %(model)s") % {
        "count": flavor.accelerator_count,
        "model": flavor.family.accelerator_model.name,
    }
    if price is None:
        unpriced = _("not priced in this region")
        return f"{flavor.code} · {cards} · {unpriced}"
    hourly = _("%(price)s/h") % {"price": format_money(price.amount_minor, currency)}
    if current_hourly_minor is None:
        return f"{flavor.code} · {cards} · {hourly}"
    change = price.amount_minor - int(current_hourly_minor)
    sign = "+" if change >= 0 else "-"
    return f"{flavor.code} · {cards} · {hourly} ({sign}{format_money(abs(change), currency)})"


def security_groups_choice(organization):
    """The groups a host of `organization` may be put in."""
    if organization is None:
        return SecurityGroup.objects.none()
    return SecurityGroup.objects.filter(organization=organization).order_by(
        "-is_default", "name", "pk"
    )


class PortMappingForm(forms.Form):
    protocol = forms.ChoiceField(
        label=_("Protocol"), choices=PortProtocol.choices, initial=PortProtocol.TCP
    )
    host_port = forms.IntegerField(
        label=_("Host port"),
        min_value=PORT_MIN,
        max_value=PORT_MAX,
        widget=forms.NumberInput(attrs={"placeholder": "8888"}),
    )


class InstanceSecurityGroupForm(forms.Form):
    security_group = forms.ModelChoiceField(
        label=_("Security group"), queryset=SecurityGroup.objects.none(), empty_label=None
    )

    def __init__(self, *args, organization, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields["security_group"]
        field.queryset = security_groups_choice(organization)
        field.label_from_instance = lambda group: group.label


class SecurityGroupForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=63)
    description = forms.CharField(label=_("Description"), max_length=200, required=False)


class SecurityGroupRuleForm(forms.Form):
    protocol = forms.ChoiceField(
        label=_("Protocol"), choices=PortProtocol.choices, initial=PortProtocol.TCP
    )
    from_port = forms.IntegerField(label=_("From port"), min_value=PORT_MIN, max_value=PORT_MAX)
    to_port = forms.IntegerField(label=_("To port"), min_value=PORT_MIN, max_value=PORT_MAX)
    source = forms.CharField(
        label=_("Source (CIDR)"),
        max_length=49,
        initial="0.0.0.0/0",
        help_text=_("Who may connect: 0.0.0.0/0 is everyone (IPv4), 203.0.113.0/24 a network."),
    )
    description = forms.CharField(label=_("Description"), max_length=200, required=False)


class OperationKeyForm(forms.Form):
    """The idempotency key a host operation may carry: as long as the order form's, so that it
    fits the order's column with the ":op" it is stored with."""

    idempotency_key = forms.CharField(max_length=64, required=False)


class StartForm(forms.Form):
    without_cards = forms.BooleanField(required=False)


class ReleaseForm(forms.Form):
    """Its data disk deleted with it ("false") or kept as a cloud disk ("true"); left out (the
    hosts list's release): as chosen before, else deleted."""

    keep_data_disk = forms.NullBooleanField(required=False)


class DataDiskForm(forms.Form):
    keep_on_release = forms.NullBooleanField()

    def clean_keep_on_release(self):
        if self.cleaned_data["keep_on_release"] is None:
            raise forms.ValidationError(_("Say whether its data disk is kept or deleted."))
        return self.cleaned_data["keep_on_release"]


class DiskForm(forms.Form):
    data_disk_gb = forms.IntegerField(label=_("New cloud disk size (GB)"), min_value=1)


class StopScheduleForm(forms.Form):
    """Stop at a moment (read in the reader's time zone) or after a number of hours; the
    "clear" button clears the schedule. The service checks the range."""

    at = forms.DateTimeField(
        label=_("Stop at"),
        required=False,
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    after_hours = forms.IntegerField(
        label=_("or stop after (hours)"),
        required=False,
        min_value=MIN_AFTER_HOURS,
        max_value=MAX_AFTER_HOURS,
    )

    def clean(self):
        data = super().clean()
        if "clear" in self.data:
            return {"at": None, "after_hours": None}
        if not self.errors and data.get("at") is None and data.get("after_hours") is None:
            raise forms.ValidationError(_("Give a time to stop at, or a number of hours."))
        return data


class BandwidthForm(forms.Form):
    bandwidth_mbps = forms.IntegerField(label=_("New bandwidth (Mbps)"), min_value=0)


class ApprovalPolicyForm(forms.Form):
    unverified_needs_approval = forms.BooleanField(
        label=_("Orders of unverified organizations need approval"), required=False
    )
    # Bounded by their columns (a positive integer; minor units in a bigint).
    max_accelerators = forms.IntegerField(
        label=_("Approval above this many accelerators per order"),
        required=False,
        min_value=0,
        max_value=2**31 - 1,
    )
    max_hourly_price = forms.DecimalField(
        label=_("Approval above this hourly price per order"),
        required=False,
        min_value=0,
        max_digits=14,
        decimal_places=2,
    )
