"""The organization's cloud disks (云盘, `/volumes/`): the list, and a form per use case (create,
grow, snapshot, attach, detach, delete), each posted with HTMX and answered with the list again
(422 with the refusal when the service refuses), or without HTMX redirected with a message.
Volumes are the storage app's; attaching to a host is this app's (`orders.volumes`)."""

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from apps.catalog.models import Region
from apps.core.web import refusals
from apps.orders.models import Instance
from apps.orders.volumes import ATTACHABLE_TO, attach_volume, detach_volume
from apps.storage import services
from apps.storage.selectors import organization_volumes
from apps.storage.services import MAX_VOLUME_GB
from apps.tenants.decorators import organization_view
from apps.tenants.roles import Action, can
from apps.tenants.selectors import get_for_organization

LIST = "orders/volume_list.html"
TABLE = "orders/partials/_volumes.html"


class VolumeCreateForm(forms.Form):
    name = forms.CharField(label=gettext_lazy("Name"), max_length=63)
    size_gb = forms.IntegerField(
        label=gettext_lazy("Size (GB)"), min_value=1, max_value=MAX_VOLUME_GB
    )
    region = forms.ModelChoiceField(label=gettext_lazy("Region"), queryset=Region.objects.none())

    def __init__(self, *args, park, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["region"].queryset = Region.objects.filter(park=park).order_by("name")


class VolumeGrowForm(forms.Form):
    size_gb = forms.IntegerField(
        label=gettext_lazy("New size (GB)"), min_value=1, max_value=MAX_VOLUME_GB
    )


class VolumeSnapshotForm(forms.Form):
    name = forms.CharField(label=gettext_lazy("Snapshot name"), max_length=63)


class VolumeAttachForm(forms.Form):
    instance = forms.ModelChoiceField(label=gettext_lazy("Host"), queryset=Instance.objects.none())
    mount_path = forms.CharField(
        label=gettext_lazy("Mount path"), max_length=200, initial="/mnt/data"
    )

    def __init__(self, *args, organization, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["instance"].queryset = Instance.objects.filter(
            organization=organization, state__in=ATTACHABLE_TO
        ).order_by("name")


def _context(request, **forms_) -> dict:
    organization = request.organization
    return {
        "volumes": organization_volumes(organization).select_related(
            "source", "workload__instance"
        ),
        "create_form": forms_.get("create_form") or VolumeCreateForm(park=organization.park),
        "attach_form": VolumeAttachForm(organization=organization),
        "grow_form": VolumeGrowForm(),
        "snapshot_form": VolumeSnapshotForm(),
        "refused_form": forms_.get("refused_form"),
        "refused_volume": forms_.get("refused_volume"),
    }


def _answer(request, *, refused: bool, done: str = "", **forms_):
    """The list again (HTMX: its table with the outcome, 422 when refused); without HTMX, back
    to the page with the outcome as a message."""
    if done and not refused:
        messages.success(request, done)
    if request.htmx:
        return render(request, TABLE, _context(request, **forms_), status=422 if refused else 200)
    if refused:
        for form in forms_.values():
            if isinstance(form, forms.Form):
                for errors in form.errors.values():
                    messages.error(request, errors[0])
    return redirect("orders:volume_list")


def _volume(request, volume_id):
    return get_for_organization(organization_volumes(request.organization), request.organization,
                                pk=volume_id)  # fmt: skip


@organization_view()
def volume_list(request):
    """GET: the organization's volumes; POST: create one."""
    form = None
    if request.method == "POST":
        if not can(request.membership.role, Action.ORDER):
            raise PermissionDenied
        form = VolumeCreateForm(request.POST, park=request.organization.park)
        if form.is_valid():
            with refusals(request, form) as outcome:
                volume = services.create_volume(
                    organization=request.organization, actor=request.user, **form.cleaned_data
                )
            if not outcome.refused:
                messages.success(request, _("Volume %(name)s created.") % {"name": volume.name})
                return redirect("orders:volume_list")
    context = _context(request, create_form=form)
    return render(request, LIST, context, status=422 if form is not None else 200)


def _use_case(request, volume_id, form_class, run, done):
    volume = _volume(request, volume_id)
    form = form_class(request.POST, **({"organization": request.organization}
                                       if form_class is VolumeAttachForm else {}))  # fmt: skip
    refused = True
    if form.is_valid():
        with refusals(request, form) as outcome:
            message = run(volume, form.cleaned_data)
        refused = outcome.refused
        if not refused:
            return _answer(request, refused=False, done=message or done)
    return _answer(request, refused=refused, refused_form=form, refused_volume=volume.pk)


@organization_view(Action.ORDER)
@require_POST
def volume_grow(request, volume_id):
    def grow(volume, data):
        services.grow_volume(volume=volume, actor=request.user, size_gb=data["size_gb"])
        if volume.attached:
            return _(
                "Volume grown to %(size)s GB: its server grows it once its host is stopped."
            ) % {"size": data["size_gb"]}
        return ""

    return _use_case(request, volume_id, VolumeGrowForm, grow, _("Volume grown."))


@organization_view(Action.ORDER)
@require_POST
def volume_snapshot(request, volume_id):
    def snapshot(volume, data):
        services.snapshot_volume(volume=volume, actor=request.user, name=data["name"])

    return _use_case(request, volume_id, VolumeSnapshotForm, snapshot, _("Snapshot taken."))


@organization_view(Action.ORDER)
@require_POST
def volume_attach(request, volume_id):
    def attach(volume, data):
        at_next_start = attach_volume(
            volume=volume,
            instance=data["instance"],
            mount_path=data["mount_path"],
            actor=request.user,
        )
        if at_next_start:
            return _("Volume attached: it appears in %(host)s at its next start.") % {
                "host": data["instance"].name
            }
        return ""

    return _use_case(request, volume_id, VolumeAttachForm, attach, _("Volume attached."))


@organization_view(Action.ORDER)
@require_POST
def volume_detach(request, volume_id):
    volume = _volume(request, volume_id)
    with refusals(request) as outcome:
        detach_volume(volume=volume, actor=request.user)
    return _answer(request, refused=outcome.refused, done=_("Volume detached."))


@organization_view(Action.RELEASE)
@require_POST
def volume_delete(request, volume_id):
    volume = _volume(request, volume_id)
    with refusals(request) as outcome:
        services.delete_volume(volume=volume, actor=request.user)
    return _answer(request, refused=outcome.refused, done=_("Volume deleted."))
