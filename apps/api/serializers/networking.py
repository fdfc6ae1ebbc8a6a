"""Security groups, their rules, and hosts' port mappings: input serializers validate the
shape; the services (`apps.orders.networking`) check the rules and act."""

from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.api.serializers.fields import InputSerializer, IntegerField
from apps.orders.models import (
    PORT_MAX,
    PORT_MIN,
    PortMapping,
    PortProtocol,
    SecurityGroup,
    SecurityGroupRule,
)


class SecurityGroupRuleSerializer(serializers.ModelSerializer):
    class Meta:
        model = SecurityGroupRule
        fields = ["id", "protocol", "from_port", "to_port", "source", "description", "created_at"]
        read_only_fields = fields


class SecurityGroupSerializer(serializers.ModelSerializer):
    rules = SecurityGroupRuleSerializer(many=True, read_only=True)
    hosts = serializers.SerializerMethodField(
        help_text="How many of the organization's hosts that are not released use it (the "
        "default group: with those without a group of their own)."
    )

    class Meta:
        model = SecurityGroup
        fields = ["id", "name", "description", "is_default", "rules", "hosts", "created_at"]
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.INT)
    def get_hosts(self, group) -> int:
        return self.context.get("host_counts", {}).get(group.pk, 0)


class SecurityGroupInputSerializer(InputSerializer):
    name = serializers.CharField(max_length=63)
    description = serializers.CharField(
        max_length=200, required=False, allow_blank=True, default=""
    )


class SecurityGroupUpdateSerializer(SecurityGroupInputSerializer):
    """Every field optional (PATCH); what is left out stays as it is."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            field.required = False
            field.default = serializers.empty


class SecurityGroupRuleInputSerializer(InputSerializer):
    protocol = serializers.ChoiceField(choices=PortProtocol.choices)
    from_port = IntegerField(min_value=PORT_MIN, max_value=PORT_MAX)
    to_port = IntegerField(
        min_value=PORT_MIN,
        max_value=PORT_MAX,
        help_text="Inclusive; the host's ports (22 is its SSH port).",
    )
    source = serializers.CharField(
        max_length=49, help_text="Who may connect, in CIDR form: 0.0.0.0/0, 203.0.113.0/24, ::/0."
    )
    description = serializers.CharField(
        max_length=200, required=False, allow_blank=True, default=""
    )


class PortMappingSerializer(serializers.ModelSerializer):
    endpoint = serializers.CharField(
        read_only=True,
        help_text="address:port where it is reached; empty while the backend names no public "
        "address.",
    )
    url = serializers.CharField(
        read_only=True, help_text="An http:// link to a TCP mapping's endpoint; empty for UDP."
    )

    class Meta:
        model = PortMapping
        fields = [
            "id",
            "protocol",
            "host_port",
            "address",
            "server_port",
            "endpoint",
            "url",
            "created_at",
        ]
        read_only_fields = fields


class PortMappingInputSerializer(InputSerializer):
    protocol = serializers.ChoiceField(choices=PortProtocol.choices, default=PortProtocol.TCP)
    host_port = IntegerField(
        min_value=PORT_MIN, max_value=PORT_MAX, help_text="The host's port (not 22: SSH)."
    )


def organization_group(organization, group_id) -> SecurityGroup:
    """The organization's group of that id; any other is refused (as a field error)."""
    group = SecurityGroup.objects.filter(organization=organization, pk=group_id).first()
    if group is None:
        raise serializers.ValidationError(_("No such security group in your organization."))
    return group


class InstanceSecurityGroupSerializer(InputSerializer):
    security_group = IntegerField(
        min_value=1, help_text="The id of a security group of the organization."
    )

    def __init__(self, *args, organization=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.organization = organization

    def validate_security_group(self, value):
        return organization_group(self.organization, value)
