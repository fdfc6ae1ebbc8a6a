from rest_framework import serializers

from apps.tenants.models import ApiKey, Membership, Organization


class OrganizationSerializer(serializers.ModelSerializer):
    park = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Organization
        fields = [
            "id",
            "name",
            "slug",
            "park",
            "legal_name",
            "credit_code",
            "verification_state",
            "verification_note",
            "created_at",
        ]
        read_only_fields = fields


class MembershipSerializer(serializers.ModelSerializer):
    email = serializers.EmailField(source="user.email", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "email", "role", "created_at"]
        read_only_fields = fields


class ApiKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "scope",
            "expires_at",
            "revoked_at",
            "last_used_at",
            "last_used_ip",
            "created_at",
        ]
        read_only_fields = fields
