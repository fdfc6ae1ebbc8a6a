"""Input of the agent API (docs/agent-protocol.md), validated field by field so a bad request
is a 400 naming the field. Units are in the field names; a figure a card cannot report is null.
"""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework import serializers

from apps.agents.models import PUBLIC_PORT_MAX, PUBLIC_PORT_MIN, CardHealth, ReportedState
from apps.orders.validation import validate_ssh_public_key

INT32 = 2**31 - 1
INT63 = 2**63 - 1
MAX_CARDS = 256
MAX_READERS = 16
MAX_HOSTS = 1000
MAX_VOLUMES = 10000
MAX_IMAGES = 100


class ReaderSerializer(serializers.Serializer):
    vendor = serializers.CharField(max_length=20)
    state = serializers.CharField(max_length=30)
    message = serializers.CharField(max_length=500, allow_blank=True, required=False, default="")


class CardSerializer(serializers.Serializer):
    vendor = serializers.CharField(max_length=20)
    index = serializers.IntegerField(min_value=0, max_value=INT32)
    uuid = serializers.CharField(max_length=80)
    model = serializers.CharField(max_length=120, allow_blank=True, required=False, default="")
    memory_total_mib = serializers.IntegerField(min_value=0, max_value=INT32)
    device_path = serializers.CharField(
        max_length=200, allow_blank=True, allow_null=True, required=False, default=None
    )


def _figure(field_class, **limits):
    return field_class(allow_null=True, required=False, default=None, **limits)


class SampleSerializer(serializers.Serializer):
    uuid = serializers.CharField(max_length=80)
    utilization_pct = _figure(serializers.IntegerField, min_value=0, max_value=100)
    memory_used_mib = _figure(serializers.IntegerField, min_value=0, max_value=INT32)
    power_w = _figure(serializers.FloatField, min_value=0, max_value=100_000)
    temperature_c = _figure(serializers.IntegerField, min_value=-100, max_value=300)
    ecc_errors_uncorrected = _figure(serializers.IntegerField, min_value=0, max_value=INT63)
    health = serializers.ChoiceField(choices=CardHealth.values)
    health_message = serializers.CharField(
        max_length=500, allow_blank=True, required=False, default=""
    )


class PublicPortsField(serializers.Field):
    """`[first, last]`: the inclusive range of the server's public ports the portal may hand
    out, within 1024-65535; null for the portal's default range."""

    default_error_messages = {
        "invalid": gettext_lazy(
            "Send [first, last]: two whole numbers, %(min)d ≤ first ≤ last ≤ %(max)d, or null."
        )
        % {"min": PUBLIC_PORT_MIN, "max": PUBLIC_PORT_MAX},
    }

    def to_internal_value(self, data):
        if (
            not isinstance(data, list)
            or len(data) != 2
            or not all(isinstance(port, int) and not isinstance(port, bool) for port in data)
            or not PUBLIC_PORT_MIN <= data[0] <= data[1] <= PUBLIC_PORT_MAX
        ):
            self.fail("invalid")
        return (data[0], data[1])

    def to_representation(self, value):
        return list(value) if value is not None else None


def _public_address():
    """The address tenants reach the server on (IPv4 or IPv6), or null: none. Left out, what
    the portal knows stays as it is (an older agent sends neither)."""
    return serializers.IPAddressField(allow_null=True, required=False)


def _public_ports():
    return PublicPortsField(allow_null=True, required=False)


class ServerSerializer(serializers.Serializer):
    hostname = serializers.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        max_length=253,
        error_messages={"invalid": gettext_lazy("Letters, digits, “.”, “-” and “_” only.")},
    )
    os = serializers.CharField(max_length=200, allow_blank=True, required=False, default="")
    kernel = serializers.CharField(max_length=200, allow_blank=True, required=False, default="")
    arch = serializers.CharField(max_length=40, allow_blank=True, required=False, default="")
    cpu_count = serializers.IntegerField(
        min_value=0, max_value=1_000_000, allow_null=True, required=False, default=None
    )
    memory_total_mib = serializers.IntegerField(
        min_value=0, max_value=INT63, allow_null=True, required=False, default=None
    )
    agent_version = serializers.CharField(
        max_length=40, allow_blank=True, required=False, default=""
    )
    public_address = _public_address()
    public_ports = _public_ports()


def _unique_uuids(cards: list[dict]) -> None:
    seen = set()
    for position, card in enumerate(cards):
        if card["uuid"] in seen:
            raise serializers.ValidationError(
                {"cards": {position: {"uuid": [_("%(uuid)s is listed twice.") % card]}}}
            )
        seen.add(card["uuid"])


class ImageSerializer(serializers.Serializer):
    """A host image built on the server: its recipe's name (the catalog image's code) and the
    digest of what is in it."""

    name = serializers.SlugField(max_length=60)
    digest = serializers.RegexField(
        r"^sha256:[0-9a-f]{64}$",
        error_messages={"invalid": gettext_lazy("Send “sha256:” and 64 lowercase hex digits.")},
    )


class InventorySerializer(serializers.Serializer):
    readers = serializers.ListField(child=ReaderSerializer(), max_length=MAX_READERS)
    cards = serializers.ListField(child=CardSerializer(), max_length=MAX_CARDS)
    # The host images built there, from enrolment on (a server is never offered for sale with
    # its cards but not its images). Left out (an older agent): what the portal knows stays.
    images = serializers.ListField(child=ImageSerializer(), max_length=MAX_IMAGES, required=False)

    def validate_images(self, images):
        names = [image["name"] for image in images]
        for position, name in enumerate(names):
            if name in names[:position]:
                raise serializers.ValidationError(
                    {position: {"name": [_("%(name)s is listed twice.") % {"name": name}]}}
                )
        return images

    def validate(self, attrs):
        _unique_uuids(attrs["cards"])
        return attrs


class EnrolSerializer(InventorySerializer):
    join_token = serializers.CharField(max_length=200)
    server = ServerSerializer()


class HeartbeatSerializer(InventorySerializer):
    agent_version = serializers.CharField(max_length=40, allow_blank=True)
    taken_at = serializers.DateTimeField()
    samples = serializers.ListField(child=SampleSerializer(), max_length=MAX_CARDS)
    public_address = _public_address()
    public_ports = _public_ports()

    def validate(self, attrs):
        attrs = super().validate(attrs)
        cards = {card["uuid"] for card in attrs["cards"]}
        seen = set()
        for position, sample in enumerate(attrs["samples"]):
            uuid = sample["uuid"]
            if uuid not in cards or uuid in seen:
                message = (
                    _("%(uuid)s is not among this request's cards.")
                    if uuid not in cards
                    else _("%(uuid)s has two samples.")
                ) % {"uuid": uuid}
                raise serializers.ValidationError({"samples": {position: {"uuid": [message]}}})
            seen.add(uuid)
        return attrs


class HostUsageSerializer(serializers.Serializer):
    """A running host's own figures as its agent read them (docs/agent-protocol.md): gauges,
    and counters that only grow while the host runs, which the portal turns into rates. Every
    figure is optional and may be null (the agent could not read it)."""

    taken_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    cpu_usage_usec = _figure(serializers.IntegerField, min_value=0, max_value=INT63)
    memory_used_mib = _figure(serializers.IntegerField, min_value=0, max_value=INT63)
    memory_limit_mib = _figure(serializers.IntegerField, min_value=0, max_value=INT63)
    disk_used_mib = _figure(serializers.IntegerField, min_value=0, max_value=INT63)
    disk_size_mib = _figure(serializers.IntegerField, min_value=0, max_value=INT63)
    net_rx_bytes = _figure(serializers.IntegerField, min_value=0, max_value=INT63)
    net_tx_bytes = _figure(serializers.IntegerField, min_value=0, max_value=INT63)


class SavedImageReportSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=60)
    digest = serializers.RegexField(r"^sha256:[0-9a-f]{64}$")
    size_bytes = serializers.IntegerField(min_value=0, max_value=INT63)


class HostReportSerializer(serializers.Serializer):
    id = serializers.CharField(max_length=40)
    generation = serializers.IntegerField(min_value=0, max_value=INT32)
    state = serializers.ChoiceField(choices=ReportedState.values)
    address = serializers.IPAddressField(
        allow_blank=True, allow_null=True, required=False, default=None
    )
    ssh_port = serializers.IntegerField(
        min_value=1, max_value=65535, allow_null=True, required=False, default=None
    )
    message = serializers.CharField(
        max_length=2000, allow_blank=True, required=False, default="", trim_whitespace=True
    )
    # Sent by agents that read their hosts' usage, for running hosts; older agents send none.
    usage = HostUsageSerializer(required=False, allow_null=True, default=None)
    ssh_host_keys = serializers.ListField(
        child=serializers.CharField(max_length=4096), max_length=8, required=False, default=list
    )

    def validate_ssh_host_keys(self, keys: list[str]) -> list[str]:
        for key in keys:
            try:
                validate_ssh_public_key(key)
            except DjangoValidationError as error:
                raise serializers.ValidationError(f"{key[:40]}…: {error.messages[0]}") from None
        return [" ".join(key.split()[:2]) for key in keys]

    # A stopped host's root saved as the image its spec asked for (`save_image`).
    saved_image = SavedImageReportSerializer(required=False, allow_null=True, default=None)


class VolumeReportSerializer(serializers.Serializer):
    id = serializers.CharField(max_length=40)
    state = serializers.ChoiceField(choices=["ready", "growing", "failed"])
    size_gb = serializers.IntegerField(min_value=0, max_value=INT32, required=False)
    message = serializers.CharField(
        max_length=2000, allow_blank=True, required=False, default="", trim_whitespace=True
    )


class HostReportsSerializer(serializers.Serializer):
    # Grows with every report the server sends (docs/agent-protocol.md); an agent too old to
    # send one gets a 400 naming it, since its reports could undo newer ones.
    sequence = serializers.IntegerField(min_value=1, max_value=INT63)
    hosts = serializers.ListField(child=HostReportSerializer(), max_length=MAX_HOSTS)
    # The server's volumes as its agent last applied them (docs/agent-protocol.md, "Volumes");
    # agents that keep none send none.
    volumes = serializers.ListField(
        child=VolumeReportSerializer(), max_length=MAX_VOLUMES, required=False
    )


class ImageCopiedSerializer(serializers.Serializer):
    """POST /api/v1/agent/saved-images/<code>/copied: the archive unpacked (its sha256), or
    the transfer given up (`error`, shown to the tenant as sent)."""

    sha256 = serializers.RegexField(r"^[0-9a-fA-F]{64}$", required=False, default="")
    error = serializers.CharField(max_length=2000, required=False, default="")

    def validate(self, data):
        if bool(data["sha256"]) == bool(data["error"]):
            raise serializers.ValidationError(_("Send either the sha256 or the error."))
        return data
