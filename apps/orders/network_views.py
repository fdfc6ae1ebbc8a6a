"""Pages for reaching hosts from outside: an instance's port mappings and security group (a
section of the instance page, HTMX), and the organization's security groups
(`/security-groups/`). Each action calls `apps.orders.networking`; a refused form re-renders
with its errors (422)."""

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from apps.core.web import refusals
from apps.orders import networking
from apps.orders.forms import (
    InstanceSecurityGroupForm,
    PortMappingForm,
    SecurityGroupForm,
    SecurityGroupRuleForm,
    security_groups_choice,
)
from apps.orders.models import (
    Instance,
    InstanceState,
    PortMapping,
    SecurityGroup,
    SecurityGroupRule,
)
from apps.orders.selectors import (
    effective_security_group,
    port_mappings_of,
    security_groups_for,
)
from apps.tenants.decorators import organization_view
from apps.tenants.roles import Action, can
from apps.tenants.selectors import get_for_organization

NETWORK_PARTIAL = "orders/partials/_instance_network.html"


def _require(request, action: str) -> None:
    if not can(request.membership.role, action):
        raise PermissionDenied


def _instance(request, instance_id) -> Instance:
    return get_for_organization(
        Instance.objects.select_related("pool__backend", "security_group"),
        request.organization,
        pk=instance_id,
    )


# --- the instance page's network section -------------------------------------------------------


def network_context(request, instance: Instance, *, mapping_form=None, group_form=None) -> dict:
    """What the instance page's network section shows: the group whose rules apply, the
    mappings with their endpoints, and the forms the member's role may use."""
    mappings = port_mappings_of(instance)
    group = effective_security_group(instance)
    networked = networking.has_network(instance)
    may_change = can(request.membership.role, Action.ORDER) and instance.state not in (
        InstanceState.RELEASING,
        InstanceState.RELEASED,
    )
    return {
        "instance": instance,
        "group": group,
        "mappings": mappings,
        "max_mappings": settings.LOAM_MAX_PORT_MAPPINGS,
        "networked": networked,
        "no_backend_yet": instance.pool is None,
        "can_map": may_change
        and networked
        and instance.state in networking.MAPPABLE_STATES
        and len(mappings) < settings.LOAM_MAX_PORT_MAPPINGS,
        "can_unmap": may_change and networked and instance.state in networking.MAPPABLE_STATES,
        # Only when there is another group to move to (an organization's default group is
        # made when it first lists its groups): an empty choice would refuse every submit.
        "can_switch": may_change
        and (networked or instance.pool is None)
        and security_groups_choice(request.organization)
        .exclude(pk=group.pk if group else None)
        .exists(),
        "mapping_form": mapping_form or PortMappingForm(),
        "group_form": group_form
        or InstanceSecurityGroupForm(
            organization=request.organization,
            initial={"security_group": group.pk if group else None},
        ),
    }


def _network_answer(request, instance: Instance, *, refused: bool, **forms):
    """The section again (HTMX: 422 when refused), or, without HTMX, back to the page with
    the outcome as a message."""
    if request.htmx:
        instance = _instance(request, instance.pk)
        context = {"network": network_context(request, instance, **forms)}
        return render(request, NETWORK_PARTIAL, context, status=422 if refused else 200)
    if refused:
        for form in forms.values():
            for errors in form.errors.values():
                messages.error(request, errors[0])
    return redirect("orders:instance_detail", instance_id=instance.pk)


@organization_view()
def instance_port_mappings(request, instance_id):
    """GET: the network section; POST: add a port mapping."""
    instance = _instance(request, instance_id)
    if request.method != "POST":
        context = {"network": network_context(request, instance)}
        return render(request, NETWORK_PARTIAL, context)
    _require(request, Action.ORDER)
    form = PortMappingForm(request.POST)
    refused = True
    if form.is_valid():
        with refusals(request, form) as outcome:
            mapping = networking.add_port_mapping(
                instance=instance, actor=request.user, **form.cleaned_data
            )
        refused = outcome.refused
        if not refused:
            form = PortMappingForm()
            if not request.htmx:
                messages.success(
                    request,
                    _("Port %(port)d is reachable at %(endpoint)s.")
                    % {"port": mapping.host_port, "endpoint": mapping.endpoint or "—"},
                )
    return _network_answer(request, instance, refused=refused, mapping_form=form)


@organization_view(Action.ORDER)
@require_POST
def instance_port_mapping_delete(request, instance_id, mapping_id):
    instance = _instance(request, instance_id)
    mapping = PortMapping.objects.filter(instance=instance, pk=mapping_id).first()
    if mapping is None:
        raise Http404
    form = PortMappingForm()
    with refusals(request, form) as outcome:
        networking.remove_port_mapping(mapping=mapping, actor=request.user)
    return _network_answer(request, instance, refused=outcome.refused, mapping_form=form)


@organization_view(Action.ORDER)
@require_POST
def instance_security_group(request, instance_id):
    """Move the host to another security group of the organization."""
    instance = _instance(request, instance_id)
    form = InstanceSecurityGroupForm(request.POST, organization=request.organization)
    refused = True
    if form.is_valid():
        with refusals(request, form) as outcome:
            networking.set_instance_security_group(
                instance=instance, actor=request.user, group=form.cleaned_data["security_group"]
            )
        refused = outcome.refused
        if not refused:
            form = None
            if not request.htmx:
                messages.success(request, _("Security group changed."))
    return _network_answer(request, instance, refused=refused, group_form=form)


# --- the security groups page ---------------------------------------------------------------------


@organization_view()
def security_group_list(request):
    """GET: the organization's groups with their rules; POST: create a group."""
    organization = request.organization
    form = SecurityGroupForm(request.POST or None)
    if request.method == "POST":
        _require(request, Action.ORDER)
        if form.is_valid():
            with refusals(request, form) as outcome:
                group = networking.create_security_group(
                    organization=organization, actor=request.user, **form.cleaned_data
                )
            if not outcome.refused:
                messages.success(
                    request, _("Security group %(name)s created.") % {"name": group.name}
                )
                return redirect("orders:security_group_detail", group_id=group.pk)
    else:
        networking.default_security_group(organization)  # every organization has one to show
    context = {"groups": security_groups_for(organization), "form": form}
    return render(
        request,
        "orders/security_group_list.html",
        context,
        status=422 if form.errors else 200,
    )


def _group(request, group_id) -> SecurityGroup:
    return get_for_organization(SecurityGroup, request.organization, pk=group_id)


def _group_context(request, group: SecurityGroup, *, form=None, rule_form=None) -> dict:
    group = next(g for g in security_groups_for(request.organization) if g.pk == group.pk)
    return {
        "group": group,
        "form": form
        or SecurityGroupForm(initial={"name": group.name, "description": group.description}),
        "rule_form": rule_form or SecurityGroupRuleForm(),
    }


def _group_answer(request, group: SecurityGroup, *, refused: bool, **forms):
    context = _group_context(request, group, **forms)
    template = (
        "orders/partials/_security_group_rules.html"
        if request.htmx
        else "orders/security_group_detail.html"
    )
    return render(request, template, context, status=422 if refused else 200)


@organization_view()
def security_group_detail(request, group_id):
    """GET: a group and its rules; POST: rename it or change its description."""
    group = _group(request, group_id)
    form = None
    refused = False
    if request.method == "POST":
        _require(request, Action.ORDER)
        form = SecurityGroupForm(request.POST)
        refused = True
        if form.is_valid():
            with refusals(request, form) as outcome:
                group = networking.update_security_group(
                    group=group, actor=request.user, **form.cleaned_data
                )
            refused = outcome.refused
            if not refused:
                messages.success(request, _("Security group saved."))
                return redirect("orders:security_group_detail", group_id=group.pk)
    context = _group_context(request, group, form=form)
    return render(
        request, "orders/security_group_detail.html", context, status=422 if refused else 200
    )


@organization_view(Action.ORDER)
@require_POST
def security_group_rule_add(request, group_id):
    group = _group(request, group_id)
    form = SecurityGroupRuleForm(request.POST)
    refused = True
    if form.is_valid():
        with refusals(request, form) as outcome:
            networking.add_security_group_rule(group=group, actor=request.user, **form.cleaned_data)
        refused = outcome.refused
        if not refused:
            if not request.htmx:
                messages.success(request, _("Rule added; the group's hosts apply it now."))
                return redirect("orders:security_group_detail", group_id=group.pk)
            form = None
    return _group_answer(request, group, refused=refused, rule_form=form)


@organization_view(Action.ORDER)
@require_POST
def security_group_rule_delete(request, group_id, rule_id):
    group = _group(request, group_id)
    rule = SecurityGroupRule.objects.filter(group=group, pk=rule_id).first()
    if rule is None:
        raise Http404
    with refusals(request) as outcome:
        networking.remove_security_group_rule(rule=rule, actor=request.user)
    if not request.htmx:
        if not outcome.refused:
            messages.success(request, _("Rule removed; the group's hosts apply it now."))
        return redirect("orders:security_group_detail", group_id=group.pk)
    return _group_answer(request, group, refused=outcome.refused)


@organization_view(Action.ORDER)
@require_POST
def security_group_delete(request, group_id):
    group = _group(request, group_id)
    with refusals(request) as outcome:
        networking.delete_security_group(group=group, actor=request.user)
    if outcome.refused:
        return redirect("orders:security_group_detail", group_id=group.pk)
    messages.success(request, _("Security group %(name)s deleted.") % {"name": group.name})
    return redirect("orders:security_group_list")
