"""Pages of the host agents: the operator console's servers and join tokens (/ops/agents/,
park operators only, another park's object is a 404), the tenant's card figures of one of
its hosts (JSON for the instance page's charts; another organization's host is a 404), and
nginx's check before it opens a host's web service (JupyterLab, TensorBoard)."""

import re
import shlex

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied as HttpPermissionDenied
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from apps.agents import selectors, services, terminal
from apps.agents.forms import AgentPoolForm, JoinTokenForm
from apps.agents.models import AgentServer, JoinToken
from apps.catalog.models import IMAGE_SERVICES
from apps.core.errors import DomainError, PermissionDenied
from apps.core.numbers import parse_id
from apps.core.web import refusals
from apps.orders.models import Instance, InstanceState
from apps.tenants.access import allowed
from apps.tenants.decorators import operator_view, organization_view
from apps.tenants.roles import Action
from apps.tenants.selectors import get_for_operator, get_for_organization, operated_park

TOKENS_PER_PAGE = 50
SERVICE_RETRY_S = 3
SERVERS_PER_PAGE = 50
REFRESH_SECONDS = 5


def _posted(request, queryset, *, field: str, park_field: str, park):
    """The object named by POST[field], if it is in `park` (which the operator operates)."""
    pk = parse_id(request.POST.get(field, ""))
    if pk is None:
        raise Http404
    scoped = queryset.filter(**{park_field: park})
    return get_for_operator(scoped, request.user, park_field=park_field, pk=pk)


def _act(request, action) -> bool:
    """Run a service call; its refusal is a message (a permission error a 403). True if done."""
    try:
        action()
    except PermissionDenied as exc:
        raise HttpPermissionDenied(exc.message) from exc
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        return True
    return False


# --- servers -------------------------------------------------------------------------------------


@operator_view
def server_list(request, park_id):
    park = operated_park(request.user, park_id)
    if request.method == "POST":
        if request.POST.get("action") != "revoke":
            raise Http404
        server = _posted(
            request,
            AgentServer.objects.select_related("node"),
            field="server",
            park_field="node__pool__backend__park",
            park=park,
        )
        if _act(request, lambda: services.revoke_server(server=server, operator=request.user)):
            messages.success(
                request,
                _(
                    "The credential of %(node)s is revoked: its agent stops, and the node takes "
                    "no new work."
                )
                % {"node": server.node.hostname},
            )
        return redirect("agents_ops:server_list", park_id=park.pk)
    page = Paginator(selectors.servers(park), SERVERS_PER_PAGE).get_page(request.GET.get("page"))
    now = timezone.now()
    missing = selectors.missing_images(park)
    rows = [
        (
            server,
            server.condition(now),
            _seconds_since(server.last_heartbeat_at, now),
            missing.get(server.pk, []),
        )
        for server in page.object_list
    ]
    context = {
        "park": park,
        "page": page,
        "rows": rows,
        "now": now,
        "refresh_seconds": REFRESH_SECONDS,
        "silent_after": settings.LOAM_AGENT_SILENT_AFTER_S,
        "has_pools": selectors.agent_pools(park).exists(),
    }
    if request.htmx:
        return render(request, "agents/partials/_server_rows.html", context)
    return render(request, "agents/server_list.html", context)


def _seconds_since(moment, now) -> int | None:
    return None if moment is None else max(0, int((now - moment).total_seconds()))


# --- join tokens ---------------------------------------------------------------------------------

CA_FILE_EXAMPLE = "portal-ca.pem"


def install_commands(secret: str) -> dict[str, str]:
    """What the partner runs on a fresh server (agent/install.sh, served by this portal): the
    one command, the same for a portal whose certificate a private CA signed (its certificate
    copied to the server first), and the enrolment alone for a server with the agent already."""
    portal = settings.LOAM_BASE_URL
    script = portal + reverse("agent_install:script")
    options = f"--portal {shlex.quote(portal)} --token {shlex.quote(secret)}"
    ca = shlex.quote(CA_FILE_EXAMPLE)
    return {
        "install_command": f"curl -fsSL {shlex.quote(script)} | sudo bash -s -- {options}",
        "install_command_ca": (
            f"curl -fsSL --cacert {ca} {shlex.quote(script)} "
            f"| sudo bash -s -- {options} --ca-file {ca}"
        ),
        "enrol_command": f"sudo loam-agent enrol {options}",
        "ca_file": CA_FILE_EXAMPLE,
    }


@operator_view
def token_list(request, park_id):
    park = operated_park(request.user, park_id)
    pools = selectors.agent_pools(park)
    action = request.POST.get("action") if request.method == "POST" else None
    form = JoinTokenForm(request.POST if action == "issue" else None, pools=pools)
    pool_form = AgentPoolForm(request.POST if action == "add_pool" else None, park=park)
    issued = None
    if action == "add_pool" and pool_form.is_valid():
        with refusals(request, pool_form) as outcome:
            pool = services.add_agent_pool(
                park=park, operator=request.user, **pool_form.cleaned_data
            )
        if not outcome.refused:
            messages.success(
                request,
                _("Pool %(pool)s added: issue a join token for it to enrol a server.")
                % {"pool": pool.name},
            )
            return redirect("agents_ops:token_list", park_id=park.pk)
    if action == "revoke":
        token = _posted(
            request,
            JoinToken.objects.all(),
            field="token",
            park_field="pool__backend__park",
            park=park,
        )
        if _act(request, lambda: services.revoke_join_token(token=token, operator=request.user)):
            messages.success(
                request, _("Join token %(prefix)s… revoked.") % {"prefix": token.prefix}
            )
        return redirect("agents_ops:token_list", park_id=park.pk)
    if action not in (None, "issue", "add_pool"):
        raise Http404
    if action == "issue" and form.is_valid():
        with refusals(request, form) as outcome:
            token, secret = services.issue_join_token(
                pool=form.cleaned_data["pool"],
                operator=request.user,
                valid_hours=form.cleaned_data["valid_hours"],
                note=form.cleaned_data["note"],
            )
        if not outcome.refused:
            issued = {"token": token, "secret": secret, **install_commands(secret)}
            form = JoinTokenForm(pools=pools)
    page = Paginator(selectors.join_tokens(park), TOKENS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "park": park,
        "form": form,
        "pool_form": pool_form,
        "page": page,
        "issued": issued,
        "has_pools": pools.exists(),
    }
    response = render(
        request,
        "agents/token_list.html",
        context,
        status=422 if form.errors or pool_form.errors else 200,
    )
    if issued:
        response["Cache-Control"] = "no-store"  # the token is in this page, and only here
    return response


# --- the tenant's host ---------------------------------------------------------------------------


@organization_view()
@require_GET
def instance_telemetry(request, instance_id):
    """The figures of the cards the host holds, for its charts (polled every few seconds)."""
    instance = get_for_organization(Instance, request.organization, pk=instance_id)
    minutes = parse_id(request.GET.get("minutes", ""))
    data = selectors.instance_telemetry(
        instance, minutes=selectors.CHART_MINUTES if minutes is None else minutes
    )
    if data is None:
        raise Http404
    response = JsonResponse(data)
    response["Cache-Control"] = "no-store"
    return response


# What nginx serves through `host_service_auth` (deploy/nginx/loam.conf: the same pattern).
SERVICE_PATH = re.compile(r"^/instances/(\d+)/(jupyter|tensorboard)/")


@require_GET
def host_service_auth(request):
    """nginx's `auth_request` before it proxies /instances/<id>/<service>/ to a host's web
    service; an `internal` location in nginx, so no browser asks it. 200 with the upstream
    (X-Loam-Upstream, address:port) and the secret to present there (X-Loam-Service-Token)
    when the signed-in user is a member of the host's organization whose role may start and
    stop hosts, and the host runs with that service; 401 when nobody is signed in, with the
    portal's sign-in page to send them to, then back to the host's page (X-Loam-Sign-In); 403
    otherwise, which nginx answers with the site's 404, as for any page of another
    organization (auth_request passes on 401 and 403 only)."""
    uri = request.headers.get("X-Original-URI", "")
    match = SERVICE_PATH.match(uri)
    if not request.user.is_authenticated:
        # The portal's sign-in, back to the host's page there (the services' origin is not the
        # portal's: a way back to it would be an open redirect's exception).
        back = reverse("orders:instance_detail", args=[match[1]]) if match else "/"
        login = settings.LOAM_BASE_URL + reverse("account_login")
        response = HttpResponse(status=401)
        response["X-Loam-Sign-In"] = redirect_to_login(back, login_url=login)["Location"]
        return response
    instance = None
    if match:
        instance = (
            Instance.objects.filter(pk=parse_id(match[1]), state=InstanceState.RUNNING)
            .select_related("organization")
            .first()
        )
    upstream = None
    if instance is not None and allowed(request.user, instance.organization, Action.ORDER):
        upstream = selectors.service_upstream(instance, match[2])
    if upstream is None:
        return HttpResponse(status=403)
    response = HttpResponse()
    response["X-Loam-Upstream"], response["X-Loam-Service-Token"] = upstream
    response["Cache-Control"] = "no-store"
    return response


@require_GET
def host_service_starting(request):
    """What nginx shows instead of its bare 502 when a host's web service doesn't answer (it
    starts with the host, in a few seconds): the site's page, trying again by itself. It names
    the service of the path nginx was asked for (X-Original-URI) and tells nothing else; asked
    about no service's path, it is no page."""
    match = SERVICE_PATH.match(request.headers.get("X-Original-URI", ""))
    if match is None:
        raise Http404  # not nginx asking about a host's service: nothing is starting
    labels = {s.name: s.label for services in IMAGE_SERVICES.values() for s in services}
    response = render(
        request,
        "agents/host_service_starting.html",
        {"label": labels.get(match[2]), "retry_s": SERVICE_RETRY_S},
        status=503,
    )
    response["Refresh"] = response["Retry-After"] = str(SERVICE_RETRY_S)
    return response


@organization_view()
@require_GET
def instance_terminal(request, instance_id):
    """The web terminal's page (its socket: `consumers.TerminalConsumer`). Another
    organization's host, and a role that may not operate hosts, get a 404 as for a host that
    is not there; a host that is not running gets the page, which says so when it connects."""
    instance = get_for_organization(
        Instance.objects.select_related("pool__backend"), request.organization, pk=instance_id
    )
    if not terminal.may_open_terminal(request.user, instance):
        raise Http404
    response = render(request, "agents/instance_terminal.html", {"instance": instance})
    response["Cache-Control"] = "no-store"
    return response
