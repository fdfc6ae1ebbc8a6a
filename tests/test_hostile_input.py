"""Hostile input on every route: whatever a caller sends, the answer is never a 5xx.

The routes are walked from the URLconf (as tests/test_isolation.py walks them), so a new route
is covered the day it is added. Each is called as an anonymous visitor, as the owner of an
organization and as an operator of its park: first with the real ids of that world's objects
in its path, then with hostile ones. The hostile values: Unicode digits ("²" is a digit to
`str.isdigit()` but not to `int()`), a NUL (PostgreSQL cannot store one), strings longer than
any column, negative and huge numbers, JSON nested thousands deep and JSON of the wrong types.

- Every query or form parameter the code reads by name meets every value (parameter i gets
  value i + turn, over as many turns as there are values; a NUL in all of them at once).
- Every form a page renders is submitted with each value in all its visible fields at once,
  then in each hidden field or choice alone (the others keep their real values, so an action
  and an id still reach the code behind them).
- Under /api/, a body nested too deep, and JSON bodies carrying every field name the
  serializers know: a few turns per route, each route a different sample of the values. The
  query parameters a route takes (those it does not take it refuses, naming them) meet every
  value.

NUL and over-long strings only fail on PostgreSQL, so the test means most there (CI runs it so).
"""

import json
import re
import traceback
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pytest
from django.test import Client
from django.urls import URLResolver, get_resolver, resolve, reverse
from django.urls.exceptions import Resolver404
from django.utils.regex_helper import normalize
from rest_framework import serializers

from apps.orders.models import InstanceState, OrderState
from apps.tenants.middleware import SESSION_KEY
from apps.tenants.models import Park
from tests.factories import (
    AgentPoolFactory,
    AgentServerFactory,
    BankTransferFactory,
    FlavorFactory,
    ImageFactory,
    InstanceFactory,
    JoinTokenFactory,
    NodeFactory,
    OrderFactory,
    PlacementFactory,
    PoolFactory,
    PriceFactory,
    QuotaLimitFactory,
    RegionFactory,
    VatInvoiceRequestFactory,
)
from tests.test_isolation import foreign_objects, kwargs_for

# "9" * 300 is both a number past any column and a string longer than any column.
HOSTILE = ("²", "9" * 300, "-1", "NaN")
HOSTILE_JSON = ("²", "9" * 300, -1, 10**300, 1e308, "NaN", [], {"a": [1]}, True, None)
# A NUL is refused before any view (by the API's gate and the pages'), so among other values it
# would hide them from the code: it goes alone, in every parameter at once.
NUL = "4\x00"
API_TURNS = 3  # hostile JSON bodies and queries per API route, each a different sample
DEEP_JSON = ("[" * 2_000 + "]" * 2_000, '{"a":' * 100_000 + "0" + "}" * 100_000)
# A path parameter gets its real value and each of these the route's pattern accepts.
HOSTILE_PATH = ("²", "4\x00", "9" * 300, "-1")
LOGIN_PATHS = ("/accounts/login/", "/admin/login/", "/accounts/2fa/")
APPS = Path(__file__).resolve().parent.parent / "apps"


def endpoints():
    """(name, URLPattern, format string, parameter names) of every endpoint, named or not."""
    found = []

    def walk(patterns, prefix, namespace):
        for entry in patterns:
            regex = prefix + entry.pattern.regex.pattern.removeprefix("^")
            if isinstance(entry, URLResolver):
                inner = ":".join(filter(None, (namespace, entry.namespace)))
                walk(entry.url_patterns, regex, inner or None)
            else:
                template, params = normalize(regex)[0]
                name = ":".join(filter(None, (namespace, entry.name or f"/{template}")))
                found.append((name, entry, "/" + template, tuple(params)))

    walk(get_resolver().url_patterns, "", None)
    return found


def names_the_code_reads() -> list[str]:
    """Every query or form parameter a view reads by name (request.GET/POST/query_params)."""
    read = re.compile(
        r"""(?:GET|POST|query_params|data)(?:\.get(?:list)?\(\s*|\[)["']([\w-]+)["']"""
    )
    names = set()
    for source in APPS.rglob("*.py"):
        names.update(read.findall(source.read_text()))
    return sorted(names)


def serializer_field_names() -> list[str]:
    """Every field name of every serializer in apps/, nested ones included."""
    names = set()

    def collect(serializer):
        for name, field in serializer.fields.items():
            names.add(name)
            child = getattr(field, "child", field)
            if isinstance(child, serializers.BaseSerializer):
                collect(child)

    pending = [serializers.Serializer]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("apps."):
            collect(cls())
    return sorted(names)


def rotated(names, values, turn: int) -> dict:
    """Parameter i gets value i + turn: over len(values) turns, each meets every value."""
    return {name: values[(index + turn) % len(values)] for index, name in enumerate(names)}


def every_value(names):
    """Queries or forms in which each of `names` meets every hostile value."""
    yield from (rotated(names, HOSTILE, turn) for turn in range(len(HOSTILE)))
    yield dict.fromkeys(names, NUL)


class Forms(HTMLParser):
    """The forms of a page: method, target and fields (kind, name, value)."""

    def __init__(self, page_url: str):
        super().__init__()
        self.page_url, self.forms, self._form, self._select = page_url, [], None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            target = attrs.get("action") or attrs.get("hx-post") or attrs.get("hx-get")
            method = "post" if "hx-post" in attrs else (attrs.get("method") or "get").lower()
            self._form = {"method": method, "url": target or self.page_url, "fields": []}
            self.forms.append(self._form)
        elif self._form is None or not attrs.get("name"):
            if tag == "option" and self._select is not None and self._select[2] is None:
                self._select[2] = attrs.get("value", "")
        elif tag == "select":
            self._select = ["choice", attrs["name"], None]
            self._form["fields"].append(self._select)
        elif tag in ("input", "textarea", "button"):
            kind = (attrs.get("type") or ("submit" if tag == "button" else "text")).lower()
            if kind in ("submit", "image"):
                kind = "button"
            elif kind in ("checkbox", "radio"):
                kind = "choice"
            elif kind != "hidden":
                kind = "text"
            self._form["fields"].append([kind, attrs["name"], attrs.get("value", "")])

    def handle_endtag(self, tag):
        if tag == "form":
            self._form = None
        elif tag == "select":
            self._select = None


def submissions(form):
    """(method, url, data) of a form's hostile submissions, per submit button: each hostile
    value in all its visible fields at once (the hidden ones, ids and the action, kept), then
    in each hidden field or choice alone."""
    fields = [f for f in form["fields"] if f[1] != "csrfmiddlewaretoken"]
    buttons = [f for f in fields if f[0] == "button"] or [None]
    fields = [f for f in fields if f[0] != "button"]
    real = {}
    for _kind, name, value in fields:
        real.setdefault(name, value or "")
    visible = {name for kind, name, _value in fields if kind == "text"}
    targets = [visible] + [{name} for name in real if name not in visible]
    for button in buttons:
        pressed = {button[1]: button[2]} if button else {}
        for hostile_names in filter(None, targets):
            for value in (*HOSTILE, NUL):
                data = {name: value if name in hostile_names else real[name] for name in real}
                yield form["method"], form["url"], data | pressed


def world(organization, park):
    """The organization's objects (as the isolation walker makes them), its park's catalog, and
    what the park's operator works on: by route name and by parameter name."""
    by_route, by_param = foreign_objects(organization)
    flavor = FlavorFactory(family__park=park)
    region = RegionFactory(park=park)
    instance = InstanceFactory(organization=organization, state=InstanceState.RUNNING)
    awaiting = OrderFactory(
        organization=organization,
        instance=InstanceFactory(organization=organization),
        state=OrderState.AWAITING_APPROVAL,
    )
    agent_pool = AgentPoolFactory(backend__park=park, region=region)
    AgentServerFactory(node__pool=agent_pool)
    JoinTokenFactory(pool=agent_pool)
    NodeFactory(pool=PoolFactory(backend__park=park, region=region))
    BankTransferFactory(organization=organization)
    VatInvoiceRequestFactory(organization=organization)
    by_route |= {
        "api:region-detail": {"code": region.code},
        "api:flavor-detail": {"code": flavor.code},
        "api:image-detail": {"code": ImageFactory(park=park).code},
        "api:price-detail": {"pk": PriceFactory(flavor=flavor, region=region).pk},
        "api:accelerator-model-detail": {"slug": flavor.family.accelerator_model.slug},
        "catalog:flavor_detail": {"code": flavor.code},
        "orders:instance_operation": {"instance_id": instance.pk, "kind": "stop"},
        "agents:instance_telemetry": {"instance_id": instance.pk},
        "orders:instance_detail": {"instance_id": instance.pk},
        **{
            f"api:operator-organization-{name}": {"pk": organization.pk}
            for name in ("detail", "approve-verification", "reject-verification")
        },
        **{
            f"api:operator-order-{name}": {"pk": awaiting.pk}
            for name in ("detail", "approve", "reject")
        },
        "api:operator-quota-detail": {
            "pk": QuotaLimitFactory(park=park, organization=organization).pk
        },
        "operations:order_decision": {"order_id": awaiting.pk},
    }
    by_param |= {
        "park_id": park.pk,
        "organization_id": organization.pk,
        "placement_id": PlacementFactory(instance__organization=awaiting.organization).pk,
        "token": "not-an-invitation",
    }
    return by_route, by_param


class Caller:
    """Sends requests as one role and keeps every 5xx: what was sent, and where it broke."""

    def __init__(self, client):
        self.client, self.failures, self.seen_forms = client, [], set()

    def send(self, method, url, *, data=None, body=None):
        if body is not None:
            response = getattr(self.client, method)(url, body, content_type="application/json")
        else:
            response = getattr(self.client, method)(url, data or {})
        if response.status_code >= 500:
            sent = body[:40] if body is not None else {k: v[:20] for k, v in (data or {}).items()}
            self.failures.append(
                f"{method.upper()} {url[:100]} {str(sent)[:300]}: {broke(response)}"
            )
        return response

    def bounced(self, page, posted) -> bool:
        """Whether the plain GET and POST were turned away before the view read anything:
        sent to sign in, forbidden, or both sent to one page (an organization is needed)."""
        answers = [answer for answer in (page, posted) if answer.status_code != 405]
        if not answers:
            return False
        if all(refused(answer) for answer in answers):
            return True
        places = {answer.get("Location") for answer in answers}
        return len(answers) == 2 and places != {None} and len(places) == 1

    def forms_of(self, url, response):
        """The page's forms not tried yet (one per method, target route and fields)."""
        if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
            return []
        parser = Forms(url)
        parser.feed(response.content.decode())
        fresh = []
        for form in parser.forms:
            try:
                target = resolve(urlsplit(form["url"]).path).route
            except Resolver404:
                continue
            key = (form["method"], target, tuple(sorted((f[0], f[1]) for f in form["fields"])))
            if key not in self.seen_forms:
                self.seen_forms.add(key)
                fresh.append(form)
        return fresh


def refused(response) -> bool:
    if response.status_code in (401, 403):
        return True
    return response.status_code == 302 and response["Location"].startswith(LOGIN_PATHS)


def problem_fields(response) -> set[str]:
    """The parameters a 400 problem+json answer names."""
    if response.status_code != 400 or "problem+json" not in response.get("Content-Type", ""):
        return set()
    return set(response.json().get("errors", {}))


def broke(response) -> str:
    """The exception behind a 5xx and the last line of apps/ it passed through."""
    if not getattr(response, "exc_info", None):
        return f"{response.status_code} {response.content[:100]!r}"
    _type, error, trace = response.exc_info
    where = [f for f in traceback.extract_tb(trace) if f"{APPS}/" in f.filename]
    at = (
        f" at {Path(where[-1].filename).relative_to(APPS.parent)}:{where[-1].lineno}"
        if where
        else ""
    )
    return f"{type(error).__name__}: {str(error)[:120]}{at}"


def path_variants(entry, template, params, real):
    """The route's URL with its real parameters, then with each hostile value in each
    parameter where the pattern takes it (one the URLconf refuses never reaches a view)."""
    real = {name: real.get(name, "1") for name in params}
    yield template % {name: quote(str(value), safe="") for name, value in real.items()}
    for name in params:
        for value in HOSTILE_PATH:
            url = template % {
                n: quote(str(value if n == name else v), safe="") for n, v in real.items()
            }
            try:
                match = resolve(template % {n: value if n == name else v for n, v in real.items()})
            except Resolver404:
                continue
            if match.func is entry.callback:
                yield url


def attack(caller, entry, template, params, real, turn: int) -> bool:
    """Every kind of hostile call to one route (`turn` picks the sample of the API's values);
    False where the role was turned away before the view read anything."""
    api = template.startswith("/api/")
    url, *hostile_paths = path_variants(entry, template, params, real)
    assert resolve(unquote(urlsplit(url).path)).func is entry.callback, f"{url} is not its route"
    page, posted = caller.send("get", url), caller.send("post", url)
    if caller.bounced(page, posted):
        return False
    methods = [m for m, answer in (("get", page), ("post", posted)) if answer.status_code != 405]
    if api:
        caller.send("post", url, body=DEEP_JSON[turn % len(DEEP_JSON)])
        for shift in range(API_TURNS):
            values = rotated(API_NAMES, HOSTILE_JSON, turn + shift)
            caller.send(("post", "put", "patch")[shift % 3], url, body=json.dumps(values))
        caller.send("post", url, body=json.dumps(dict.fromkeys(API_NAMES, NUL)))
        # A route refuses the query parameters it does not take, naming them: the others (a
        # list's filters, ordering and pages) then meet every value.
        asked = caller.send("get", url, data=dict.fromkeys(API_NAMES, "1"))
        taken = [name for name in API_NAMES if name not in problem_fields(asked)]
        for query in every_value(taken) if len(taken) < len(API_NAMES) else ():
            caller.send("get", url, data=query)
    else:
        # Every parameter name by the route's first method: a page's posts are its forms'.
        for query in every_value(READ_NAMES) if methods else ():
            caller.send(methods[0], url, data=query)
    for form in caller.forms_of(url, page):
        for method, target, data in submissions(form):
            caller.send(method, target, data=data)
    for hostile in hostile_paths:
        caller.send(methods[0] if methods else "get", hostile)
    return True


def start_afresh(client, user, organization, park):
    """Each route starts where the first did: an earlier route's forms may have signed the user
    out, switched it to an organization they created, or made the park require two-factor
    sign-in, which would turn this route's calls away before its view."""
    Park.objects.filter(pk=park.pk).update(
        require_mfa_for_operators=False, require_mfa_for_owners=False
    )
    if user is not None:
        client.force_login(user)
        session = client.session
        session[SESSION_KEY] = organization.pk
        session.save()


# How many routes' views each role reaches at least: a walk turned away everywhere (signed
# out, sent to set up two-factor sign-in) would pass while testing nothing.
REACHED_AT_LEAST = {"anonymous": 15, "owner": 80, "operator": 50}
READ_NAMES = names_the_code_reads()
API_NAMES = sorted(set(READ_NAMES) | set(serializer_field_names()))
ENDPOINTS = endpoints()


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["anonymous", "owner", "operator"])
def test_no_hostile_input_gets_a_5xx(role, organization, park, owner, operator, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins
    by_route, by_param = world(organization, park)
    user = {"owner": owner, "operator": operator}.get(role)
    client = Client(raise_request_exception=False)
    caller = Caller(client)
    start_afresh(client, user, organization, park)
    # The admin's own routes are walked only by a role its index lets in (none of these).
    admin_closed, reached = refused(client.get(reverse("admin:index"))), []
    for turn, (name, entry, template, params) in enumerate(ENDPOINTS):
        if admin_closed and name.startswith("admin:") and name != "admin:login":
            continue
        start_afresh(client, user, organization, park)
        real = kwargs_for(name, params, by_route, by_param)
        if attack(caller, entry, template, params, real, turn):
            reached.append(name)
    assert not caller.failures, f"{len(caller.failures)} 5xx:\n" + "\n".join(caller.failures)
    assert len(reached) >= REACHED_AT_LEAST[role], reached


def test_every_route_is_walked():
    names = {name for name, *_ in ENDPOINTS}
    assert {"agent_api:enrol", "orders:instance_operation", "operations:node_list"} <= names
    assert len(ENDPOINTS) > 150
