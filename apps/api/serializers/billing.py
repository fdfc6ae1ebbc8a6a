from rest_framework import serializers

from apps.billing.models import Invoice, InvoiceLine, UsageRecord


class WalletSerializer(serializers.Serializer):
    currency = serializers.CharField()
    mode = serializers.CharField()
    balance_minor = serializers.IntegerField()
    held_minor = serializers.IntegerField(help_text="Held for new hosts' first hour.")
    credit_limit_minor = serializers.IntegerField()
    available_minor = serializers.IntegerField(help_text="balance - held + credit limit.")
    low_balance = serializers.BooleanField()
    month_to_date_minor = serializers.IntegerField(help_text="Used this month so far.")
    month_estimate_minor = serializers.IntegerField(
        help_text="This month so far plus the rest of it at the current hourly rate."
    )
    hourly_minor = serializers.IntegerField(help_text="What runs now costs per hour.")


class HostOrTaskIds(serializers.Serializer):
    """The host's or the task's id a record is of, read from its workload (the view annotates
    them: `billing.selectors.with_subject_ids`)."""

    instance = serializers.IntegerField(read_only=True, allow_null=True, help_text="The host's id.")
    task = serializers.IntegerField(read_only=True, allow_null=True, help_text="The task's id.")


class UsageRecordSerializer(HostOrTaskIds, serializers.ModelSerializer):
    hourly_minor = serializers.DecimalField(max_digits=20, decimal_places=6)

    class Meta:
        model = UsageRecord
        fields = [
            "id",
            "kind",
            "instance",
            "task",
            "day",
            "started_at",
            "ended_at",
            "seconds",
            "compute_unit_milliseconds",
            "hourly_minor",
            "amount_minor",
            "currency",
            "invoice",
        ]
        read_only_fields = fields


class InvoiceLineSerializer(HostOrTaskIds, serializers.ModelSerializer):
    class Meta:
        model = InvoiceLine
        fields = [
            "description",
            "kind",
            "instance",
            "task",
            "quantity",
            "seconds",
            "compute_unit_milliseconds",
            # The rate its records were priced at, as a usage record's (null on lines issued
            # before it was kept); a line is still one host's or task's, as before.
            "hourly_minor",
            "amount_minor",
        ]
        read_only_fields = fields


class InvoiceSerializer(serializers.ModelSerializer):
    lines = InvoiceLineSerializer(many=True, read_only=True)
    tax_rate = serializers.DecimalField(max_digits=5, decimal_places=4, read_only=True)

    class Meta:
        model = Invoice
        fields = [
            "id",
            "number",
            "period_start",
            "period_end",
            "currency",
            "subtotal_minor",
            "tax_rate",
            "tax_minor",
            "total_minor",
            "state",
            "issued_at",
            "lines",
        ]
        read_only_fields = fields
