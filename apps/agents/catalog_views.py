"""The catalog an enrolled server is proposed (/ops/agents/parks/<park>/servers/<server>/catalog/,
a park's operators only; another park's server is a 404): flavors that fit it, the images it
holds and prices to fill in (`proposals.proposal_for`), which the operator accepts or edits;
`catalog.services.accept_catalog_proposal` creates them. Proposed again afterwards, what was
created shows as on sale.

The server's node is in its pool already (enrolment makes it, in the pool of its join token, a
pool the scheduler reads from the database whatever the backend's config lists), so accepting
writes only the catalog."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.agents import proposals
from apps.agents.catalog_forms import FamilyForm, FlavorFormSet, ImageFormSet
from apps.agents.models import AgentServer
from apps.catalog.models import Flavor
from apps.catalog.services import (
    FlavorToSell,
    ImageToOffer,
    ServerRoom,
    accept_catalog_proposal,
)
from apps.core.money import MINOR_PER_MAJOR, to_major
from apps.core.web import refusals
from apps.tenants.decorators import operator_view
from apps.tenants.selectors import get_for_operator, operated_park

ACTIONABLE_FLAVORS = (proposals.NEW, proposals.UNPRICED)
ACTIONABLE_IMAGES = (proposals.NEW, proposals.EXTEND)


def _server(request, park, server_id) -> AgentServer:
    servers = AgentServer.objects.filter(node__pool__backend__park=park).select_related(
        "node__pool__region", "node__pool__backend__park", "node__pool__accelerator_model"
    )
    return get_for_operator(
        servers, request.user, park_field="node__pool__backend__park", pk=server_id
    )


@operator_view
def server_catalog(request, park_id, server_id):
    park = operated_park(request.user, park_id)
    server = _server(request, park, server_id)
    pool = server.node.pool
    proposal = proposals.proposal_for(server)
    currency = park.currency
    flavor_rows = [f for f in proposal.flavors if f.status in ACTIONABLE_FLAVORS]
    image_rows = [i for i in proposal.images if i.status in ACTIONABLE_IMAGES]
    posted = request.POST if request.method == "POST" else None
    family_form = FamilyForm(
        posted,
        exists=proposal.family_id is not None,
        initial={"family_code": proposal.family_code, "family_name": proposal.family_name},
    )
    flavor_forms = FlavorFormSet(
        posted,
        prefix="flavors",
        existing=[row.status != proposals.NEW for row in flavor_rows],
        initial=[
            {
                "include": True,
                "code": row.code,
                "accelerator_count": row.accelerator_count,
                "vcpu": row.vcpu,
                "ram_gb": row.ram_gb,
                "system_disk_gb": row.system_disk_gb,
                "price": None if row.price_minor is None else to_major(row.price_minor, currency),
            }
            for row in flavor_rows
        ],
    )
    image_forms = ImageFormSet(
        posted,
        prefix="images",
        existing=[row.status != proposals.NEW for row in image_rows],
        initial=[{"include": True, "code": row.code, "name": row.name} for row in image_rows],
    )
    accepted = None
    if posted is not None:
        valid = [form.is_valid() for form in (family_form, flavor_forms, image_forms)]
        if all(valid):
            flavors = _flavors_to_sell(flavor_forms, flavor_rows, currency)
            images = [
                ImageToOffer(
                    code=form.cleaned_data["code"],
                    name=form.cleaned_data["name"],
                    os=_image_os(form.cleaned_data["code"], form.cleaned_data["name"]),
                    stack_version=proposals.AGENT_IMAGE_STACK_VERSION,
                )
                for form, row in zip(image_forms.forms, image_rows, strict=True)
                if form.cleaned_data.get("include")
            ]
            with refusals(request) as outcome:
                try:
                    accepted = accept_catalog_proposal(
                        park=park,
                        operator=request.user,
                        region=pool.region,
                        accelerator_model=pool.accelerator_model,
                        family_code=family_form.cleaned_data["family_code"],
                        family_name=family_form.cleaned_data["family_name"],
                        room=ServerRoom(
                            accelerators=proposal.facts.cards,
                            vcpu=proposal.facts.vcpu,
                            ram_gb=proposal.facts.ram_gb,
                        ),
                        flavors=[flavor for flavor, _form in flavors],
                        images=images,
                        source={"server": server.public_id},
                    )
                except ValidationError as exc:
                    _place_errors(
                        exc,
                        family_form,
                        [form for _flavor, form in flavors],
                        [f for f in image_forms.forms if f.cleaned_data.get("include")],
                    )
                    outcome.refused = True
            if accepted is not None and not outcome.refused:
                messages.success(
                    request,
                    _(
                        "%(host)s is on sale: %(flavors)d flavors created, %(prices)d prices "
                        "set in %(region)s, %(images)d images ready."
                    )
                    % {
                        "host": server.node.hostname,
                        "flavors": len(accepted.flavors),
                        "prices": len(accepted.prices),
                        "region": pool.region.name,
                        "images": len(accepted.images),
                    },
                )
                return redirect("agents_ops:server_catalog", park_id=park.pk, server_id=server.pk)
    errors = posted is not None
    context = {
        "park": park,
        "server": server,
        "pool": pool,
        "proposal": proposal,
        "family_form": family_form,
        "flavor_forms": flavor_forms,
        "flavor_pairs": list(zip(flavor_forms.forms, flavor_rows, strict=False)),
        "image_forms": image_forms,
        "image_pairs": list(zip(image_forms.forms, image_rows, strict=False)),
        "on_sale": [f for f in proposal.flavors if f.status not in ACTIONABLE_FLAVORS],
        "images_on_sale": [i for i in proposal.images if i.status not in ACTIONABLE_IMAGES],
        "currency": currency,
        "minor_per_major": MINOR_PER_MAJOR[currency],
        "reserve_vcpu": proposals.RESERVE_VCPU,
        "reserve_ram_gb": proposals.RESERVE_RAM_GB,
        "default_image": proposals.DEFAULT_AGENT_IMAGE,
    }
    return render(request, "agents/server_catalog.html", context, status=422 if errors else 200)


def _image_os(code: str, name: str) -> str:
    """The operating system of an agent image the portal knows, else its name."""
    return proposals.AGENT_IMAGES.get(code, (name, name[:60]))[1]


def _flavors_to_sell(formset, rows, currency) -> list[tuple[FlavorToSell, object]]:
    """The included rows as the service takes them, each with its form (for its errors)."""
    existing = Flavor.objects.in_bulk([row.flavor_id for row in rows if row.flavor_id])
    chosen = []
    for form, row in zip(formset.forms, rows, strict=True):
        data = form.cleaned_data
        if not data.get("include"):
            continue
        flavor = existing.get(row.flavor_id) if row.flavor_id else None
        chosen.append(
            (
                FlavorToSell(
                    code=data["code"],
                    accelerator_count=data["accelerator_count"],
                    vcpu=data["vcpu"],
                    ram_gb=data["ram_gb"],
                    system_disk_gb=data["system_disk_gb"],
                    hourly_minor=form.price_minor(currency),
                    flavor=flavor,
                ),
                form,
            )
        )
    return chosen


def _place_errors(exc: ValidationError, family_form, flavor_forms, image_forms) -> None:
    """The service's refusals on the fields they name: "flavor-<i>-<field>" is the i-th
    included flavor's, "image-<i>-<field>" the i-th included image's."""
    if not hasattr(exc, "error_dict"):
        family_form.add_error(None, exc)
        return
    for key, errors in exc.error_dict.items():
        kind, _sep, rest = key.partition("-")
        index, _sep, name = rest.partition("-")
        forms = {"flavor": flavor_forms, "image": image_forms}.get(kind)
        if forms is not None and index.isdigit() and int(index) < len(forms):
            form = forms[int(index)]
            form.add_error(name if name in form.fields else None, errors)
        elif key in family_form.fields:
            family_form.add_error(key, errors)
        else:
            family_form.add_error(None, errors)
