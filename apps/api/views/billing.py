from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.api.base import LoamAPIMixin
from apps.api.filters import FilterSet, IdFilter
from apps.api.permissions import current_organization
from apps.api.serializers.billing import (
    InvoiceSerializer,
    UsageRecordSerializer,
    WalletSerializer,
)
from apps.billing import selectors, services
from apps.billing.models import Invoice, InvoiceLine, UsageRecord
from apps.tenants.roles import Action
from apps.tenants.selectors import for_organization


class WalletView(LoamAPIMixin, APIView):
    required_actions = {"get": Action.VIEW_BILLING}

    @extend_schema(responses=WalletSerializer)
    def get(self, request):
        """The organization's balance, what is held and available, and this month's estimate."""
        organization = current_organization(request)
        wallet = services.wallet_of(organization)
        estimate = selectors.month_estimate(organization)
        data = {
            "currency": wallet.currency,
            "mode": wallet.mode,
            "balance_minor": wallet.balance_minor,
            "held_minor": wallet.held_minor,
            "credit_limit_minor": wallet.credit_limit_minor,
            "available_minor": wallet.available_minor,
            "low_balance": wallet.low_balance_warned_at is not None,
            "month_to_date_minor": estimate.so_far_minor,
            "month_estimate_minor": estimate.total_minor,
            "hourly_minor": estimate.hourly_minor,
        }
        return Response(WalletSerializer(data).data)


class UsageRecordFilter(FilterSet):
    instance = IdFilter(field_name="workload__instance")
    task = IdFilter(field_name="workload__task")

    class Meta:
        model = UsageRecord
        fields = {"kind": ["exact"], "invoice": ["exact"], "started_at": ["gte", "lt"]}


class UsageRecordViewSet(LoamAPIMixin, viewsets.ReadOnlyModelViewSet):
    """What was metered, per second, newest first; filter by kind, instance, task, invoice."""

    queryset = UsageRecord.objects.none()
    serializer_class = UsageRecordSerializer
    required_actions = {"list": Action.VIEW_BILLING, "retrieve": Action.VIEW_BILLING}
    filterset_class = UsageRecordFilter
    ordering_fields = ["started_at", "amount_minor"]

    def get_queryset(self):
        records = for_organization(UsageRecord, current_organization(self.request))
        return selectors.with_subject_ids(records).order_by("-started_at", "-pk")


class InvoiceViewSet(LoamAPIMixin, viewsets.ReadOnlyModelViewSet):
    """The organization's invoices with their lines, newest period first."""

    queryset = Invoice.objects.none()
    serializer_class = InvoiceSerializer
    required_actions = {"list": Action.VIEW_BILLING, "retrieve": Action.VIEW_BILLING}
    filterset_fields = ["state"]
    ordering_fields = ["period_start", "total_minor"]

    def get_queryset(self):
        lines = Prefetch(
            "lines", queryset=selectors.with_subject_ids(InvoiceLine.objects.order_by("pk"))
        )
        return (
            for_organization(Invoice, current_organization(self.request))
            .prefetch_related(lines)
            .order_by("-period_start")
        )
