from pathlib import PurePosixPath

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from apps.core.numbers import parse_id
from apps.core.web import back_to, refusals
from apps.tenants import services
from apps.tenants.decorators import organization_view
from apps.tenants.forms import (
    ApiKeyForm,
    InvitationForm,
    OrganizationForm,
    RoleForm,
    VerificationForm,
)
from apps.tenants.middleware import SESSION_KEY
from apps.tenants.models import ApiKey, Invitation, Membership, Park, VerificationState
from apps.tenants.roles import ROLE_ACTIONS, Action, roles_assignable_by
from apps.tenants.selectors import for_organization, get_for_organization


@login_required
def organization_create(request):
    form = OrganizationForm(request.POST or None)
    parks = Park.objects.all()
    if parks.count() == 1:
        form.fields["park"].initial = parks.first()
    if request.method == "POST" and form.is_valid():
        with refusals(request, form) as outcome:
            organization = services.create_organization(
                user=request.user,
                park=form.cleaned_data["park"],
                name=form.cleaned_data["name"],
                accepted_terms=form.cleaned_data["accept_terms"],
            )
        if not outcome.refused:
            request.session[SESSION_KEY] = organization.pk
            messages.success(request, _("Organization created. Verify it to raise its quotas."))
            return redirect("tenants:organization")
    status = 422 if form.errors else 200
    return render(request, "tenants/organization_create.html", {"form": form}, status=status)


@login_required
@require_POST
def organization_switch(request):
    chosen = parse_id(request.POST.get("organization", ""))
    membership = (
        None
        if chosen is None
        else Membership.objects.filter(user=request.user, organization_id=chosen).first()
    )
    if membership is None:
        raise Http404
    request.session[SESSION_KEY] = membership.organization_id
    return redirect(back_to(request, "tenants:organization"))


@organization_view()
def organization_detail(request):
    organization = request.organization
    return render(
        request,
        "tenants/organization_detail.html",
        {
            "organization": organization,
            "role_matrix": [
                (role, label, [a in ROLE_ACTIONS[role] for a in Action.values])
                for role, label in Membership._meta.get_field("role").choices
            ],
            "actions": Action.choices,
        },
    )


@organization_view(Action.MANAGE_ORGANIZATION)
def verification(request):
    organization = request.organization
    editable = organization.verification_state in (
        VerificationState.UNVERIFIED,
        VerificationState.REJECTED,
    )
    form = VerificationForm(
        request.POST or None,
        request.FILES or None,
        initial={"legal_name": organization.legal_name, "credit_code": organization.credit_code},
    )
    if request.method == "POST" and editable and form.is_valid():
        with refusals(request, form) as outcome:
            services.submit_verification(
                organization=organization,
                actor=request.user,
                legal_name=form.cleaned_data["legal_name"],
                credit_code=form.cleaned_data["credit_code"],
                licence=form.cleaned_data["licence"],
            )
        if not outcome.refused:
            messages.success(request, _("Submitted. The park's operators will review it."))
            return redirect("tenants:verification")
    status = 422 if form.errors else 200
    context = {"organization": organization, "form": form, "editable": editable}
    return render(request, "tenants/verification.html", context, status=status)


@organization_view(Action.MANAGE_ORGANIZATION)
def licence(request):
    return licence_response(request.organization)


# The only types a licence is stored as (apps.tenants.services.validate_licence); anything
# else (a file stored before that check) is offered as a download, never shown.
LICENCE_CONTENT_TYPES = {
    ".pdf": "application/pdf",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
}


def licence_response(organization):
    """The licence with its own type, never sniffed (X-Content-Type-Options: nosniff), so a
    browser cannot take it for a page even if it were one."""
    if not organization.licence:
        raise Http404
    suffix = PurePosixPath(organization.licence.name).suffix.lower()
    content_type = LICENCE_CONTENT_TYPES.get(suffix)
    response = FileResponse(
        organization.licence.open("rb"),
        filename=f"licence-{organization.slug}{suffix}",
        as_attachment=content_type is None,
        content_type=content_type or "application/octet-stream",
    )
    response["X-Content-Type-Options"] = "nosniff"
    return response


@organization_view()
def members(request):
    organization = request.organization
    inviter_role = request.membership.role
    can_manage = Action.MANAGE_MEMBERS in ROLE_ACTIONS[inviter_role]
    form = InvitationForm(request.POST or None, inviter_role=inviter_role)
    if request.method == "POST":
        if not can_manage:
            raise PermissionDenied
        if form.is_valid():
            with refusals(request, form) as outcome:
                services.invite_member(
                    organization=organization,
                    actor=request.user,
                    email=form.cleaned_data["email"],
                    role=form.cleaned_data["role"],
                )
            if not outcome.refused:
                messages.success(
                    request,
                    _("Invitation sent to %(email)s.") % {"email": form.cleaned_data["email"]},
                )
                return redirect("tenants:members")
    context = {
        "organization": organization,
        "memberships": organization.memberships.select_related("user").order_by("created_at"),
        "invitations": for_organization(Invitation, organization)
        .filter(accepted_at__isnull=True, revoked_at__isnull=True)
        .order_by("-created_at"),
        "form": form,
        "can_manage": can_manage,
        "assignable_roles": [
            (v, label)
            for v, label in Membership._meta.get_field("role").choices
            if v in roles_assignable_by(inviter_role)
        ],
    }
    return render(request, "tenants/members.html", context, status=422 if form.errors else 200)


@organization_view(Action.MANAGE_MEMBERS)
@require_POST
def member_role(request, membership_id):
    membership = get_for_organization(Membership, request.organization, pk=membership_id)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("Choose a role."))
        return redirect("tenants:members")
    with refusals(request) as outcome:
        services.change_role(
            membership=membership, actor=request.user, role=form.cleaned_data["role"]
        )
    if not outcome.refused:
        messages.success(request, _("Role changed."))
    return redirect("tenants:members")


@organization_view()
@require_POST
def member_remove(request, membership_id):
    membership = get_for_organization(Membership, request.organization, pk=membership_id)
    leaving = membership.user_id == request.user.pk
    with refusals(request) as outcome:
        services.remove_member(membership=membership, actor=request.user)
    if outcome.refused:
        return redirect("tenants:members")
    if leaving:
        request.session.pop(SESSION_KEY, None)
        messages.success(request, _("You left %(name)s.") % {"name": membership.organization.name})
        return redirect("portal:home")
    messages.success(request, _("Member removed."))
    return redirect("tenants:members")


@organization_view(Action.MANAGE_MEMBERS)
@require_POST
def invitation_resend(request, invitation_id):
    invitation = get_for_organization(Invitation, request.organization, pk=invitation_id)
    with refusals(request) as outcome:
        services.resend_invitation(invitation=invitation, actor=request.user)
    if not outcome.refused:
        messages.success(request, _("Invitation sent again; the earlier link no longer works."))
    return redirect("tenants:members")


@organization_view(Action.MANAGE_MEMBERS)
@require_POST
def invitation_revoke(request, invitation_id):
    invitation = get_for_organization(Invitation, request.organization, pk=invitation_id)
    with refusals(request) as outcome:
        services.revoke_invitation(invitation=invitation, actor=request.user)
    if not outcome.refused:
        messages.success(request, _("Invitation revoked."))
    return redirect("tenants:members")


@login_required
def invitation(request, token):
    found = services.open_invitation_for_token(token)
    if request.method == "POST":
        with refusals(request) as outcome:
            membership = services.accept_invitation(token=token, user=request.user)
        if not outcome.refused:
            request.session[SESSION_KEY] = membership.organization_id
            messages.success(
                request, _("Welcome to %(name)s.") % {"name": membership.organization.name}
            )
            return redirect("tenants:organization")
    return render(request, "tenants/invitation.html", {"invitation": found})


@organization_view(Action.MANAGE_API_KEYS)
def api_keys(request):
    organization = request.organization
    form = ApiKeyForm(request.POST or None)
    created_secret = None
    if request.method == "POST" and form.is_valid():
        with refusals(request, form) as outcome:
            _key, created_secret = services.create_api_key(
                organization=organization,
                actor=request.user,
                name=form.cleaned_data["name"],
                scope=form.cleaned_data["scope"],
                expires_at=form.cleaned_data["expires_at"],
            )
        if not outcome.refused:
            form = ApiKeyForm()
    context = {
        "keys": for_organization(ApiKey, organization).order_by("-created_at"),
        "form": form,
        "created_secret": created_secret,
    }
    return render(request, "tenants/api_keys.html", context, status=422 if form.errors else 200)


@organization_view(Action.MANAGE_API_KEYS)
@require_POST
def api_key_revoke(request, key_id):
    key = get_for_organization(ApiKey, request.organization, pk=key_id)
    with refusals(request) as outcome:
        services.revoke_api_key(api_key=key, actor=request.user)
    if not outcome.refused:
        messages.success(request, _("Key %(prefix)s revoked.") % {"prefix": key.prefix})
    return redirect("tenants:api_keys")
