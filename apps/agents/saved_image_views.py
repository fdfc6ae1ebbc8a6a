"""The organization's saved images (镜像): listed with their state, size and server, a stopped
host saved as a new one, and deletion (refused while a host uses the image)."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from apps.agents import saved_images, selectors
from apps.agents.forms import SaveImageForm
from apps.agents.models import SavedImage, SavedImageState
from apps.core.web import refusals
from apps.tenants.decorators import organization_view
from apps.tenants.roles import Action, can
from apps.tenants.selectors import get_for_organization


@organization_view()
def image_list(request):
    """GET: the organization's saved images; POST: save a stopped host as one."""
    organization = request.organization
    form = SaveImageForm(request.POST or None, hosts=selectors.savable_hosts(organization))
    if request.method == "POST":
        if not can(request.membership.role, Action.ORDER):
            raise PermissionDenied
        if form.is_valid():
            with refusals(request, form) as outcome:
                saved = saved_images.save_host_image(
                    organization=organization,
                    actor=request.user,
                    instance_id=form.cleaned_data["instance"].pk,
                    name=form.cleaned_data["name"],
                    description=form.cleaned_data["description"],
                )
            if not outcome.refused:
                messages.success(
                    request,
                    _("Saving %(host)s as %(image)s; it is ready in a few minutes.")
                    % {"host": form.cleaned_data["instance"].name, "image": saved.image.name},
                )
                return redirect("saved_images:image_list")
    context = {"images": selectors.saved_images_for(organization), "form": form}
    return render(request, "agents/image_list.html", context, status=422 if form.errors else 200)


@require_POST
@organization_view(Action.RELEASE)
def image_delete(request, saved_image_id: int):
    # Another organization's image, or one deleted already: 404.
    saved = get_for_organization(
        SavedImage.objects.exclude(state=SavedImageState.DELETED),
        request.organization,
        pk=saved_image_id,
    )
    with refusals(request) as outcome:
        saved = saved_images.delete_saved_image(
            organization=request.organization, actor=request.user, saved_image_id=saved.pk
        )
    if not outcome.refused:
        messages.success(request, _("Image %(image)s deleted.") % {"image": saved.image.name})
    return redirect("saved_images:image_list")
