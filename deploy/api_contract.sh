#!/usr/bin/env bash
# The API contract check: schemathesis against the live schema, as the demo tenant (an API key)
# and as the demo park's operator (a signed-in session: operator routes take no API key).
# Every generated request must get no 5xx and a response that conforms to the schema.
# Runs on whatever DATABASE_URL / CELERY_BROKER_URL say (deploy/test.sh calls it last).
# Webhook routes are left out here: endpoints with generated URLs would make this server POST
# to hosts off this machine (tests/webhooks checks those routes against a local receiver).
#   LOAM_CONTRACT_EXAMPLES  examples per operation and seed (default 20)
#   LOAM_CONTRACT_SEEDS     the seeds, each a full run (default "1 20260527")
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. .venv/bin/activate
port=${LOAM_CONTRACT_PORT:-8765}
examples=${LOAM_CONTRACT_EXAMPLES:-20}
seeds=${LOAM_CONTRACT_SEEDS:-1 20260527}
# On the embedded default, a database of its own, emptied first: the generated requests would
# otherwise fill the demo that deploy/run-local.sh serves from var/loam.sqlite3 with junk.
if [ -z "${DATABASE_URL:-}" ]; then
  mkdir -p var
  rm -f var/contract.sqlite3
  export DATABASE_URL="sqlite:///$root/var/contract.sqlite3"
fi
# DEBUG off: the API answers its own problem+json 404s (DEBUG shows an HTML page).
export DEBUG=false ALLOWED_HOSTS=127.0.0.1 CELERY_TASK_ALWAYS_EAGER=true
export LOAM_API_RATE_PER_KEY=100000/min LOAM_API_RATE_PER_USER=100000/min
python manage.py migrate --noinput -v0
python manage.py seed_demo >/dev/null
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
python manage.py runserver "127.0.0.1:$port" --noreload --nothreading >var/contract-server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 60); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.5
done
check() {
  schemathesis run "http://127.0.0.1:$port/api/schema/" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
    --max-examples "$examples" --seed "$1" --request-timeout 30 "${@:2}"
}
# Revoking a key is checked last, with a key of its own: the stateful phase would otherwise
# revoke the key the run uses, and every later call would be a 401.
for seed in $seeds; do
  echo "== tenant routes, API key, seed $seed"
  check "$seed" --header "Authorization: Bearer $key" \
    --exclude-path-regex '^/api/v1/(operator|webhooks)/|/revoke/$'
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
