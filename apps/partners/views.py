"""The partner console (/partner/: its pools, nodes, the hosts on them, revenue, floor prices
and statements; only a partner organization's members, anyone else a 404) and the operators'
partner page of a park (/ops/parks/<park_id>/partners/: partners and their shares, pools'
owners, monthly statements; only that park's operators, another park a 404)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.core.numbers import parse_id
from apps.core.web import refusals
from apps.partners import selectors, services
from apps.partners.forms import AssignPoolForm, FloorPriceForm, PartnerForm, SettleForm
from apps.partners.models import Partner, Settlement
from apps.tenants.decorators import operator_view
from apps.tenants.roles import Action, can
from apps.tenants.selectors import get_for_operator, operated_park

# --- the partner console -------------------------------------------------------------------


def _posted_as(request, action: str):
    return (
        request.POST if request.method == "POST" and request.POST.get("action") == action else None
    )


@login_required
def console(request):
    partner = selectors.partner_of(request.organization)
    currency = partner.organization.park.currency
    pools = selectors.partner_pools(partner)
    form = FloorPriceForm(_posted_as(request, "floor"), pools=pools, currency=currency)
    if request.method == "POST":
        if request.POST.get("action") != "floor":
            raise Http404
        if form.is_valid():
            with refusals(
                request, form, field_names={"floor_price_minor_per_card_hour": "floor_price"}
            ) as outcome:
                services.set_floor_price(
                    actor=request.user,
                    partner=partner,
                    pool=form.cleaned_data["pool"],
                    floor_price_minor_per_card_hour=form.minor("floor_price"),
                )
            if not outcome.refused:
                messages.success(request, _("Floor price saved."))
                return redirect("partners:console")
    month = selectors.first_of_month(timezone.now())
    revenue_minor, _records = selectors.revenue(partner, month)
    context = {
        "partner": partner,
        "currency": currency,
        "pools": pools,
        "nodes": selectors.partner_nodes(partner),
        "hosts": selectors.hosts_on(partner),
        "month": month,
        "revenue_minor": revenue_minor,
        "payout_minor": services.payout_of(revenue_minor, partner.revenue_share_pct),
        "settlements": partner.settlements.order_by("-month"),
        "form": form,
        "may_set_floor": can(request.membership.role, Action.MANAGE_ORGANIZATION),
    }
    return render(request, "partners/console.html", context, status=422 if form.errors else 200)


@login_required
def statement(request, settlement_id):
    partner = selectors.partner_of(request.organization)
    settlement = selectors.statement_for(partner, settlement_id)
    by_pool = selectors.revenue_by_pool(partner, settlement.month)
    pools = [
        (pool, by_pool.get(pool.pk, 0))
        for pool in selectors.owned_pools(partner).select_related("region").order_by("name", "pk")
    ]
    context = {"partner": partner, "settlement": settlement, "pools": pools}
    return render(request, "partners/statement.html", context)


# --- the operators' page -------------------------------------------------------------------


def _settlement_in(request, park) -> Settlement:
    pk = parse_id(request.POST.get("settlement", ""))
    if pk is None:
        raise Http404
    queryset = Settlement.objects.filter(partner__organization__park=park).select_related(
        "partner__organization__park"
    )
    return get_for_operator(queryset, request.user, park_field="partner__organization__park", pk=pk)


@operator_view
def park_partners(request, park_id):
    park = operated_park(request.user, park_id)
    partners = Partner.objects.filter(organization__park=park).select_related("organization__park")
    partner_form = PartnerForm(
        _posted_as(request, "partner"),
        organizations=park.organizations.order_by("name", "pk"),
    )
    pool_form = AssignPoolForm(
        _posted_as(request, "assign_pool"), pools=selectors.park_pools(park), partners=partners
    )
    settle_form = SettleForm(_posted_as(request, "settle"), partners=partners)
    if request.method == "POST":
        action = request.POST.get("action")
        done = None
        if action == "partner" and partner_form.is_valid():
            with refusals(request, partner_form) as outcome:
                services.make_partner(operator=request.user, **partner_form.cleaned_data)
            done = None if outcome.refused else _("Partner saved.")
        elif action == "assign_pool" and pool_form.is_valid():
            with refusals(request, pool_form) as outcome:
                services.assign_pool(operator=request.user, **pool_form.cleaned_data)
            done = None if outcome.refused else _("Pool owner saved.")
        elif action == "settle" and settle_form.is_valid():
            with refusals(request, settle_form) as outcome:
                services.settle_month(operator=request.user, **settle_form.cleaned_data)
            done = None if outcome.refused else _("Statement computed.")
        elif action in ("confirm", "paid"):
            settlement = _settlement_in(request, park)
            use_case = (
                services.confirm_settlement
                if action == "confirm"
                else services.mark_settlement_paid
            )
            with refusals(request) as outcome:
                use_case(operator=request.user, settlement=settlement)
            if not outcome.refused:
                messages.success(
                    request,
                    _("Statement confirmed.")
                    if action == "confirm"
                    else _("Statement marked paid."),
                )
            return redirect("partners:park_partners", park_id=park.pk)
        elif action not in ("partner", "assign_pool", "settle"):
            raise Http404
        if done:
            messages.success(request, done)
            return redirect("partners:park_partners", park_id=park.pk)
    month = selectors.first_of_month(timezone.now())
    context = {
        "park": park,
        "month": month,
        "partners": selectors.park_partners(park, month=month),
        "pools": selectors.park_pools(park),
        "settlements": selectors.park_settlements(park),
        "partner_form": partner_form,
        "pool_form": pool_form,
        "settle_form": settle_form,
    }
    errors = partner_form.errors or pool_form.errors or settle_form.errors
    return render(request, "partners/park_partners.html", context, status=422 if errors else 200)
