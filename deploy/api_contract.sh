#!/usr/bin/env bash
# The API contract check: schemathesis against the live schema, as the demo tenant.
# Every generated request must get no 5xx and a response that conforms to the schema.
# Runs on whatever DATABASE_URL / CELERY_BROKER_URL say (deploy/test.sh calls it last).
# Webhook routes are left out here: endpoints with generated URLs would make this server POST
# to hosts off this machine (tests/webhooks checks those routes against a local receiver).
# Operator routes need an operator's session, not the tenant key used here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. .venv/bin/activate
port=${LOAM_CONTRACT_PORT:-8765}
# DEBUG off: the API answers its own problem+json 404s (DEBUG shows an HTML page).
export DEBUG=false ALLOWED_HOSTS=127.0.0.1 CELERY_TASK_ALWAYS_EAGER=true
export LOAM_API_RATE_PER_KEY=100000/min LOAM_API_RATE_PER_USER=100000/min
python manage.py migrate --noinput -v0
python manage.py seed_demo >/dev/null
key=$(python manage.py create_api_key --email owner@demo-enterprise.localhost --scope write \
  --name contract-check)
python manage.py runserver "127.0.0.1:$port" --noreload --nothreading >var/contract-server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 60); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.5
done
schemathesis run "http://127.0.0.1:$port/api/schema/" \
  --header "Authorization: Bearer $key" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --max-examples "${LOAM_CONTRACT_EXAMPLES:-15}" \
  --exclude-path-regex '^/api/v1/(operator|webhooks)/' \
  --request-timeout 30
