#!/usr/bin/env bash
# The API contract check: schemathesis, with all its checks, against the live schema, as the
# demo tenant (an API key) and as the demo park's operator (a signed-in session: operator routes
# take no API key). Every generated request must get no 5xx and a response the schema documents;
# a request the schema forbids must be refused, and one it allows must be taken (but see writes,
# below). Instance and order routes reach real rows: hosts ordered for the check, their ids drawn
# half the time (generated ids alone never hit one).
# Runs on whatever DATABASE_URL / CELERY_BROKER_URL say (deploy/test.sh calls it last).
# Webhook routes are left out here: endpoints with generated URLs would make this server POST
# to hosts off this machine (tests/webhooks checks those routes against a local receiver).
#   LOAM_CONTRACT_EXAMPLES  examples per operation and seed (default 20)
#   LOAM_CONTRACT_SEEDS     the seeds, each a full run (default "1 7 20260527")
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. .venv/bin/activate
port=${LOAM_CONTRACT_PORT:-8765}
examples=${LOAM_CONTRACT_EXAMPLES:-20}
seeds=${LOAM_CONTRACT_SEEDS:-1 7 20260527}
# A database of its own, new on every run: the generated requests would otherwise fill the demo
# that deploy/run-local.sh serves with junk, and what one run leaves (an operator's generated
# quota, hosts left running) would refuse the next run's orders. On PostgreSQL it is the
# DATABASE_URL's database with "_contract" after its name, dropped and created again.
mkdir -p var
if [ -z "${DATABASE_URL:-}" ]; then
  rm -f var/contract.sqlite3
  export DATABASE_URL="sqlite:///$root/var/contract.sqlite3"
else
  DATABASE_URL=$(python deploy/fresh_database.py "$DATABASE_URL" contract)
  export DATABASE_URL
fi
# DEBUG off: the API answers its own problem+json 404s (DEBUG shows an HTML page).
export DEBUG=false ALLOWED_HOSTS=127.0.0.1 CELERY_TASK_ALWAYS_EAGER=true
# The demo park (seed_demo) runs on the simulator, offered only in a demo park.
export LOAM_DEMO=true
export LOAM_API_RATE_PER_KEY=100000/min LOAM_API_RATE_PER_USER=100000/min
python manage.py migrate --noinput -v0
# Without the month of life: the check orders hosts of its own, within the enterprise's quotas.
python manage.py seed_demo --no-life >/dev/null
key=$(python manage.py create_api_key --email owner@demo-enterprise.localhost --scope write \
  --name contract-check)
# The operator signs in as a browser would: a session cookie, and a CSRF token sent both as
# the cookie and the header (what Django checks on a signed-in POST or PATCH).
session=$(python manage.py shell -v0 -c '
from django.contrib.auth import get_user_model
from django.test import Client
from apps.operations import demo
browser = Client()
browser.force_login(get_user_model().objects.get(email=demo.OPERATOR["email"]))
print(browser.cookies["sessionid"].value)' | tail -n 1)
csrf=$(python -c 'import secrets; print(secrets.token_hex(16))')
# Two running hosts per seed, ordered through the API as a partner would (those a run before
# left running or stopped on this database are used again), each with a port mapping. The
# check's simulator answers at once, so an operation on one completes inside its request, in
# eager mode. Printed as "<host id>:<its create order's id>:<its mapping's id>", one by one.
wanted=$((2 * $(wc -w <<<"$seeds")))
fixtures=$(LOAM_CONTRACT_KEY=$key LOAM_CONTRACT_HOSTS=$wanted python manage.py shell -v0 -c '
import os
from django.test import Client
from apps.operations import demo
from apps.orchestration.models import Backend
from apps.orders.models import Instance, InstanceState, OrderKind
Backend.objects.filter(park__slug=demo.PARK["slug"], driver="simulator").update(config={})
def usable():
    return Instance.objects.filter(
        organization__slug=demo.ENTERPRISE["slug"],
        name__startswith="contract-host",
        state__in=[InstanceState.RUNNING, InstanceState.STOPPED],
    ).order_by("pk")
wanted = int(os.environ["LOAM_CONTRACT_HOSTS"])
partner = Client(SERVER_NAME="127.0.0.1", HTTP_AUTHORIZATION="Bearer " + os.environ["LOAM_CONTRACT_KEY"])
for _ in range(wanted - usable().count()):
    ordered = partner.post("/api/v1/orders/", {
        "flavor": "l40s.1x",
        "image": "ubuntu2204-cuda124",
        "name": "contract-host",
        "ssh_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb0bbMkVQzCQ0yt4WzQp2jr0+Ir3ZXD9gDQsG2dLR5N contract@loam",
    }, content_type="application/json")
    assert ordered.status_code == 201, ordered.content
hosts = list(usable()[:wanted])
assert len(hosts) == wanted, f"{len(hosts)} of {wanted} contract hosts are running"
for host in hosts:
    if not host.port_mappings.exists():
        mapped = partner.post(f"/api/v1/instances/{host.pk}/port-mappings/", {"host_port": 8080},
                              content_type="application/json")
        assert mapped.status_code == 201, mapped.content
print(" ".join(
    f"{host.pk}:{host.orders.get(kind=OrderKind.CREATE).pk}:{host.port_mappings.first().pk}"
    for host in hosts
))' \
  | tail -n 1)
read -ra fixtures <<<"$fixtures"
config=$(mktemp --suffix=.toml)
python manage.py runserver "127.0.0.1:$port" --noreload --nothreading >var/contract-server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true; rm -f "$config"' EXIT
for _ in $(seq 1 60); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.5
done
configure() {  # the config of the n-th tenant pass: its two hosts, their orders and mappings
  local first second
  IFS=: read -ra first <<<"${fixtures[$((2 * $1))]}"
  IFS=: read -ra second <<<"${fixtures[$((2 * $1 + 1))]}"
  cat >"$config" <<TOML
# NUL is refused everywhere on purpose (apps/api/input.py), a rule the schema has no words for;
# tests/api/test_input.py checks it.
[generation]
allow-x00 = false

[dictionaries.hosts]
values = [${first[0]}, ${second[0]}]

[dictionaries.orders]
values = [${first[1]}, ${second[1]}]

[dictionaries.mappings]
values = [${first[2]}, ${second[2]}]

[[operations]]
include-path-regex = '^/api/v1/instances/\{id\}/'
parameters = { "path.id" = { dictionary = "hosts", probability = 0.5 } }

[[operations]]
include-path-regex = '^/api/v1/instances/\{id\}/port-mappings/\{mapping_id\}/'
parameters = { "path.mapping_id" = { dictionary = "mappings", probability = 0.5 } }

[[operations]]
include-path-regex = '^/api/v1/(operator/)?orders/\{id\}/'
parameters = { "path.id" = { dictionary = "orders", probability = 0.5 } }

# The operator signs in with a session. A generated Authorization header that is no Bearer key
# is no credential to the API, so the session answers, as the schema allows (either scheme);
# schemathesis would take that for auth not enforced. Its probes without the session still run.
[[operations]]
include-path-regex = '^/api/v1/operator/'
generation.with-security-parameters = false

# A write's body can be schema-valid and still break a rule the schema cannot state (a flavor
# code that exists, to_port at least from_port, a name not taken): its answer is a 400 naming
# the field, or a 422 (a resize to another family). A GET's query is held to the schema: what
# it allows must be taken.
[[operations]]
include-method = ["POST", "PATCH", "DELETE"]
checks.positive_data_acceptance.expected-statuses = [
  "2xx", "3xx", "400", "401", "403", "404", "409", "422", "429", "5xx",
]
TOML
}
check() {  # seed, then schemathesis options; the coverage phase (boundary values, the same for
  # every seed) runs with the first seed only
  local phases=fuzzing,stateful
  [ "$1" = "${seeds%% *}" ] && phases=examples,coverage,fuzzing,stateful
  schemathesis --config-file "$config" run "http://127.0.0.1:$port/api/schema/" --checks all \
    --phases "$phases" --max-examples "$examples" --seed "$1" --request-timeout 30 "${@:2}"
}
# Revoking a key is checked last, with a key of its own: the stateful phase would otherwise
# revoke the key the run uses, and every later call would be a 401.
pass=0
for seed in $seeds; do
  echo "== tenant routes, API key, seed $seed (host:order:mapping ${fixtures[*]:$((2 * pass)):2})"
  configure "$pass"
  check "$seed" --header "Authorization: Bearer $key" \
    --exclude-path-regex '^/api/v1/(operator|webhooks)/|/revoke/$'
  pass=$((pass + 1))
done
for seed in $seeds; do
  echo "== operator routes, operator session, seed $seed"
  check "$seed" --header "Cookie: sessionid=$session; csrftoken=$csrf" \
    --header "X-CSRFToken: $csrf" --include-path-regex '^/api/v1/operator/'
done
last=$(python manage.py create_api_key --email owner@demo-enterprise.localhost --scope write \
  --name contract-check-revoke)
echo "== key revocation, seed ${seeds%% *}"
check "${seeds%% *}" --header "Authorization: Bearer $last" \
  --include-path-regex '^/api/v1/api-keys/'
