#!/usr/bin/env bash
# Starts Loam's production stack on this machine, as deploy/ describes it for a park (issue 15):
#   - nginx from Debian's packages (deploy/stack/install.sh) with deploy/nginx/loam.conf and a
#     self-signed certificate: HTTPS on 127.0.0.1:$HTTPS_PORT, HTTP on 127.0.0.1:$HTTP_PORT
#     redirecting to it, static files from STATIC_ROOT,
#   - gunicorn with deploy/gunicorn.conf.py on a unix socket,
#   - Daphne serving portal/asgi.py (the web terminal's WebSockets, nginx's /ws/) on another,
#   - a Celery worker and Celery beat,
# all with DEBUG=false and the secure cookie and TLS settings, on PostgreSQL (database loam_stack,
# created if missing), RabbitMQ (vhost loam_stack, so no other worker on the broker takes its
# jobs) and Redis (DB 5). It migrates, collects static files, compiles translations and creates
# the park's first operator the way a production site does (`create_operator`, with a generated
# password kept in state/operator_password) first. No demo login exists unless LOAM_STACK_DEMO=1,
# which runs the demo park instead (`seed_demo`, idempotent; the simulator offered), as CI does for
# the tenant's journey.
#
# Everything lives under $LOAM_STACK_ROOT (default var/stack in the repo, git-ignored): configs,
# logs, PID files, static files, uploads, the certificate and the generated SECRET_KEY. Nothing
# runs as a system service and /etc/nginx is only read for mime.types. Stop with
# deploy/stack/stop.sh.
#
# Writes $LOAM_STACK_ROOT/env (KEY=value lines; `set -a; . env` in bash) for the tests:
# LOAM_STACK_URL, LOAM_STACK_HTTP_URL, LOAM_STACK_SERVICES_URL (hosts' JupyterLab and
# TensorBoard), LOAM_STACK_CA_FILE, LOAM_STACK_METERING_INTERVAL_S,
# LOAM_STACK_METRICS_TOKEN (Prometheus's bearer token for /metrics), LOAM_STACK_OPERATOR_EMAIL and
# LOAM_STACK_OPERATOR_PASSWORD_FILE (the first operator's login), LOAM_STACK_DEMO.
# The processes' own environment is $LOAM_STACK_ROOT/etc/loam.env (systemd's EnvironmentFile
# format), so `set -a; . var/stack/etc/loam.env` gives a shell the stack's manage.py.
#
# Env knobs: LOAM_STACK_ROOT, LOAM_STACK_HTTPS_PORT (8443), LOAM_STACK_HTTP_PORT (8480),
# LOAM_STACK_DATABASE_URL (postgres://postgres@127.0.0.1:5432/loam_stack),
# LOAM_STACK_BROKER_URL (amqp://guest:guest@127.0.0.1:5672/loam_stack),
# LOAM_STACK_CACHE_URL (redis://127.0.0.1:6379/5), LOAM_STACK_WEB_WORKERS (2),
# LOAM_STACK_METERING_INTERVAL_S (5: how often beat meters usage, so a test sees a bill soon),
# LOAM_STACK_DEMO (0: production, no demo data; 1: the demo park with its logins and simulator),
# LOAM_STACK_OPERATOR_EMAIL (ops@loam-stack.localhost).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"

R=${LOAM_STACK_ROOT:-$repo/var/stack}
mkdir -p "$R"
R=$(cd "$R" && pwd)  # nginx's and gunicorn's paths must be absolute
case "$R" in *[[:space:]]*)
  echo "deploy/stack/start.sh: the run dir must not contain whitespace: '$R'" >&2; exit 1 ;;
esac
HTTPS_PORT=${LOAM_STACK_HTTPS_PORT:-8443}
HTTP_PORT=${LOAM_STACK_HTTP_PORT:-8480}
# The hosts' JupyterLab and TensorBoard: an origin of their own (LOAM_SERVICES_URL).
SERVICES_PORT=${LOAM_STACK_SERVICES_PORT:-$((HTTPS_PORT + 1))}
DATABASE_URL=${LOAM_STACK_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/loam_stack}
BROKER_URL=${LOAM_STACK_BROKER_URL:-amqp://guest:guest@127.0.0.1:5672/loam_stack}
CACHE_URL=${LOAM_STACK_CACHE_URL:-redis://127.0.0.1:6379/5}
WEB_WORKERS=${LOAM_STACK_WEB_WORKERS:-2}
METERING_INTERVAL_S=${LOAM_STACK_METERING_INTERVAL_S:-5}
case "${LOAM_STACK_DEMO:-0}" in
  1 | true) DEMO=true ;;
  0 | false) DEMO=false ;;
  *) echo "deploy/stack/start.sh: LOAM_STACK_DEMO is 0 or 1, not '$LOAM_STACK_DEMO'" >&2; exit 2 ;;
esac
OPERATOR_EMAIL=${LOAM_STACK_OPERATOR_EMAIL:-ops@loam-stack.localhost}
BASE_URL=https://127.0.0.1:$HTTPS_PORT
PY=$repo/.venv/bin/python
PROCESSES=(nginx gunicorn asgi worker beat)

t0=$(date +%s%N)
elapsed() { local ms=$((($(date +%s%N) - t0) / 1000000)); printf '%d.%03ds' $((ms / 1000)) $((ms % 1000)); }
stamp() { printf '[%8s] %s\n' "$(elapsed)" "$*"; }
alive() { [ -s "$R/pids/$1.pid" ] && kill -0 "$(cat "$R/pids/$1.pid")" 2>/dev/null; }
port_busy() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
healthy() { curl -sf --max-time 5 --cacert "$R/state/tls/cert.pem" -o /dev/null "$BASE_URL/healthz"; }
# fail WHAT: say what did not come up, show every log's tail, stop what was started, exit 1.
fail() {
  echo "deploy/stack/start.sh: $1" >&2
  for log in "$R"/log/*.log; do
    [ -s "$log" ] || continue
    echo "----- tail of $log" >&2
    tail -n 25 "$log" >&2
  done
  bash "$here/stop.sh" >&2 || true
  exit 1
}
# wait_for SECONDS WHAT CMD...: poll CMD every 0.2 s; fail after SECONDS or when a process died.
wait_for() {
  local limit=$1 what=$2 p
  local end=$((SECONDS + limit))
  shift 2
  until "$@" >/dev/null 2>&1; do
    for p in "${PROCESSES[@]}"; do
      if [ -s "$R/pids/$p.pid" ] && ! alive "$p"; then fail "$p exited while waiting for $what"; fi
    done
    ((SECONDS > end)) && fail "timed out after ${limit}s waiting for $what"
    sleep 0.2
  done
}

# --- already up? ---------------------------------------------------------------------------------
up=1
for p in "${PROCESSES[@]}"; do alive "$p" || up=0; done
if [ "$up" = 1 ] && [ -s "$R/env" ] && healthy; then
  echo "Loam stack already up at $BASE_URL (env: $R/env)"
  exit 0
fi
# Leftovers of an earlier run that died half-way: stop them, start clean.
if compgen -G "$R/pids/*.pid" >/dev/null; then
  bash "$here/stop.sh" >/dev/null
fi
rm -f "$R/env"  # written again only once the stack answers
for port in "$HTTPS_PORT" "$HTTP_PORT" "$SERVICES_PORT"; do
  if port_busy "$port"; then
    echo "deploy/stack/start.sh: port $port on 127.0.0.1 is already in use" >&2; exit 1
  fi
done
for tool in nginx openssl envsubst curl; do
  command -v "$tool" >/dev/null || {
    echo "deploy/stack/start.sh: $tool is missing; run deploy/stack/install.sh" >&2; exit 1
  }
done
[ -x "$PY" ] || { echo "deploy/stack/start.sh: no $PY; run deploy/setup.sh" >&2; exit 1; }

mkdir -p "$R"/{etc,state/tls,state/host-ca,log,run,pids,static,media,nginx/tmp}
chmod 700 "$R/state/host-ca"
# nginx's workers (nobody, when the master is root) read static files and reach the socket.
chmod 755 "$R" "$R/run" "$R/static"
: >"$R/log/start.log"

# --- secrets and the certificate (kept across restarts: sessions and the browser's trust stay) ---
[ -s "$R/state/secret_key" ] || head -c 48 /dev/urandom | base64 | tr -d '\n/+=' >"$R/state/secret_key"
chmod 600 "$R/state/secret_key"
[ -s "$R/state/metrics_token" ] || head -c 24 /dev/urandom | base64 | tr -d '\n/+=' >"$R/state/metrics_token"
chmod 600 "$R/state/metrics_token"
# A new one when missing or expiring within a day.
if ! openssl x509 -checkend 86400 -noout -in "$R/state/tls/cert.pem" >/dev/null 2>&1; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=127.0.0.1" \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    -keyout "$R/state/tls/key.pem" -out "$R/state/tls/cert.pem" 2>"$R/log/openssl.log" \
    || fail "openssl could not make the certificate"
  rm -f "$R/log/openssl.log"  # only its progress dots
  chmod 600 "$R/state/tls/key.pem"
fi

# --- the processes' environment: the production profile (deploy/production.env.example) --------
cat >"$R/etc/loam.env" <<ENV
# Generated by deploy/stack/start.sh; edit that script instead.
DEBUG=false
# On only with LOAM_STACK_DEMO=1 (seed_demo, simulated hosts): a real deployment leaves it off.
LOAM_DEMO=$DEMO
SECRET_KEY=$(cat "$R/state/secret_key")
ALLOWED_HOSTS=127.0.0.1,localhost
DATABASE_URL=$DATABASE_URL
DATABASE_CONN_MAX_AGE=60
CELERY_BROKER_URL=$BROKER_URL
CACHE_URL=$CACHE_URL
SECURE_SSL_REDIRECT=true
SESSION_COOKIE_SECURE=true
CSRF_COOKIE_SECURE=true
# Short: browsers would keep forcing HTTPS on localhost (any port) for this long.
SECURE_HSTS_SECONDS=300
SECURE_PROXY_SSL_HEADER=true
ALLAUTH_TRUSTED_CLIENT_IP_HEADER=X-Real-IP
METRICS_TOKEN=$(cat "$R/state/metrics_token")
STATIC_ROOT=$R/static
MEDIA_ROOT=$R/media
LOAM_BASE_URL=$BASE_URL
LOAM_SERVICES_URL=https://127.0.0.1:$SERVICES_PORT
LOAM_METERING_INTERVAL_S=$METERING_INTERVAL_S
GUNICORN_BIND=unix:$R/run/gunicorn.sock
GUNICORN_WORKERS=$WEB_WORKERS
LOAM_HOST_CA_KEY=$R/state/host-ca/ssh_user_ca
ENV
chmod 600 "$R/etc/loam.env"
set -a
# shellcheck source=/dev/null
. "$R/etc/loam.env"
set +a

# --- PostgreSQL database and RabbitMQ vhost ------------------------------------------------------
"$PY" - "$DATABASE_URL" >>"$R/log/start.log" 2>&1 <<'PYTHON' || fail "cannot create the database (see $R/log/start.log)"
import sys
from urllib.parse import unquote, urlsplit

import psycopg
from psycopg import sql

url = urlsplit(sys.argv[1])
name = unquote(url.path.lstrip("/"))
# The maintenance database of the same server, with the same credentials.
with psycopg.connect(url._replace(path="/postgres").geturl(), autocommit=True) as connection:
    if not connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        print(f"created database {name}")
PYTHON
vhost=${BROKER_URL##*/}
if [ -n "$vhost" ] && [ "$vhost" != "%2F" ] && command -v rabbitmqctl >/dev/null; then
  broker_user=${BROKER_URL#amqp://}
  broker_user=${broker_user%%[:@]*}
  if ! rabbitmqctl -q list_vhosts 2>/dev/null | grep -qx "$vhost"; then
    rabbitmqctl -q add_vhost "$vhost" >>"$R/log/start.log" 2>&1 || fail "cannot add RabbitMQ vhost $vhost"
    rabbitmqctl -q set_permissions -p "$vhost" "$broker_user" '.*' '.*' '.*' >>"$R/log/start.log" 2>&1 \
      || fail "cannot let $broker_user use RabbitMQ vhost $vhost"
  fi
fi
stamp "database and broker ready"

# --- the release steps an operator runs ------------------------------------------------------------
manage() { "$PY" manage.py "$@" >>"$R/log/start.log" 2>&1 || fail "manage.py $1 failed"; }
manage migrate --noinput
stamp "migrated"
manage collectstatic --noinput -v0
manage compilemessages -l zh_Hans --ignore=.venv --ignore=staticfiles --ignore=var -v0
stamp "static files collected, translations compiled"
if [ "$DEMO" = true ]; then
  "$PY" manage.py seed_demo --base-url "$BASE_URL" >"$R/log/seed_demo.log" 2>&1 || fail "seed_demo failed"
  stamp "demo park seeded (logins: $R/log/seed_demo.log)"
  park=(--park "$("$PY" manage.py shell -v0 -c 'from apps.operations import demo; print(demo.PARK["slug"])' | tail -n 1)")
else
  park=(--park loam-stack --park-name "Loam stack")
fi
# The first operator, as README "Production" creates one: a password chosen for them (here
# generated, readable by this user only, kept across restarts). A database that already has them
# (this run dir is new, the database is not) gets this password, so the file always signs in.
if [ ! -s "$R/state/operator_password" ]; then
  (umask 077; head -c 18 /dev/urandom | base64 >"$R/state/operator_password")
fi
if ! OPERATOR_EMAIL=$OPERATOR_EMAIL PASSWORD_FILE=$R/state/operator_password "$PY" manage.py shell -v0 -c '
import os, pathlib, sys
from django.contrib.auth import get_user_model
operator = get_user_model().objects.filter(email=os.environ["OPERATOR_EMAIL"]).first()
if operator is None:
    sys.exit(1)
operator.set_password(pathlib.Path(os.environ["PASSWORD_FILE"]).read_text().splitlines()[0])
operator.save(update_fields=["password"])'; then
  manage create_operator --email "$OPERATOR_EMAIL" "${park[@]}" \
    --password-file "$R/state/operator_password"
fi
stamp "first operator: $OPERATOR_EMAIL (password in $R/state/operator_password)"

# --- gunicorn, Daphne, the worker, beat -----------------------------------------------------------
# Each runs in the background with its PID recorded; stop.sh stops exactly these.
rm -f "$R/run/gunicorn.sock" "$R/run/daphne.sock"
PROMETHEUS_MULTIPROC_DIR="$R/run/prometheus" "$repo/.venv/bin/gunicorn" -c deploy/gunicorn.conf.py \
  </dev/null >"$R/log/gunicorn.log" 2>&1 &
echo $! >"$R/pids/gunicorn.pid"
# The web terminal's WebSockets; the client's address from nginx's X-Real-IP.
"$repo/.venv/bin/daphne" -u "$R/run/daphne.sock" --proxy-headers --proxy-headers-host X-Real-IP \
  portal.asgi:application </dev/null >"$R/log/asgi.log" 2>&1 &
echo $! >"$R/pids/asgi.pid"
# Its own node name: a worker started elsewhere on the machine keeps its own.
"$repo/.venv/bin/celery" -A portal worker --loglevel=INFO --concurrency=2 -n "loam-stack@%h" \
  </dev/null >"$R/log/worker.log" 2>&1 &
echo $! >"$R/pids/worker.pid"
"$repo/.venv/bin/celery" -A portal beat --loglevel=INFO --schedule="$R/state/celerybeat-schedule" \
  </dev/null >"$R/log/beat.log" 2>&1 &
echo $! >"$R/pids/beat.pid"

# --- nginx: the production template, in a main config that needs no root-owned path ---------------
envsubst_vars='${LOAM_SERVER_NAME} ${LOAM_HTTPS_LISTEN} ${LOAM_HTTP_LISTEN} ${LOAM_HTTPS_PORT_SUFFIX}
  ${LOAM_TLS_CERTIFICATE} ${LOAM_TLS_CERTIFICATE_KEY} ${LOAM_STATIC_ROOT} ${LOAM_UPSTREAM}
  ${LOAM_ASGI_UPSTREAM} ${LOAM_SERVICES_LISTEN} ${LOAM_SERVICES_SERVER_NAME}
  ${LOAM_SERVICES_PORT_SUFFIX}'
LOAM_SERVER_NAME="127.0.0.1 localhost" LOAM_HTTPS_LISTEN="127.0.0.1:$HTTPS_PORT" \
  LOAM_HTTP_LISTEN="127.0.0.1:$HTTP_PORT" LOAM_HTTPS_PORT_SUFFIX=":$HTTPS_PORT" \
  LOAM_TLS_CERTIFICATE="$R/state/tls/cert.pem" LOAM_TLS_CERTIFICATE_KEY="$R/state/tls/key.pem" \
  LOAM_STATIC_ROOT="$R/static" LOAM_UPSTREAM="unix:$R/run/gunicorn.sock" \
  LOAM_ASGI_UPSTREAM="unix:$R/run/daphne.sock" LOAM_SERVICES_LISTEN="127.0.0.1:$SERVICES_PORT" \
  LOAM_SERVICES_SERVER_NAME="127.0.0.1 localhost" LOAM_SERVICES_PORT_SUFFIX=":$SERVICES_PORT" \
  envsubst "$envsubst_vars" <deploy/nginx/loam.conf >"$R/etc/loam-site.conf"
cat >"$R/etc/nginx.conf" <<CONF
# Generated by deploy/stack/start.sh; the site itself is deploy/nginx/loam.conf.
worker_processes 1;
pid $R/run/nginx.pid;
error_log $R/log/nginx-error.log warn;
events { worker_connections 256; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    sendfile on;
    access_log $R/log/nginx-access.log;
    client_body_temp_path $R/nginx/tmp/client_body;
    proxy_temp_path $R/nginx/tmp/proxy;
    fastcgi_temp_path $R/nginx/tmp/fastcgi;
    uwsgi_temp_path $R/nginx/tmp/uwsgi;
    scgi_temp_path $R/nginx/tmp/scgi;
    include $R/etc/loam-site.conf;
}
CONF
nginx_args=(-p "$R/nginx" -e "$R/log/nginx-error.log" -c "$R/etc/nginx.conf")
nginx -t -q "${nginx_args[@]}" >>"$R/log/start.log" 2>&1 || fail "nginx refused its configuration"
nginx "${nginx_args[@]}" -g "daemon off;" </dev/null >"$R/log/nginx.log" 2>&1 &
echo $! >"$R/pids/nginx.pid"

# --- ready when the portal answers through nginx and the worker and beat are running ----------
wait_for 60 "$BASE_URL/healthz" healthy
stamp "nginx and gunicorn answer at $BASE_URL"
wait_for 30 "Daphne's socket" test -S "$R/run/daphne.sock"
wait_for 60 "the Celery worker" grep -q "ready\." "$R/log/worker.log"
wait_for 30 "Celery beat" grep -q "beat: Starting" "$R/log/beat.log"
stamp "worker and beat running"

cat >"$R/env.tmp" <<ENV
LOAM_STACK_URL=$BASE_URL
LOAM_STACK_HTTP_URL=http://127.0.0.1:$HTTP_PORT
LOAM_STACK_SERVICES_URL=https://127.0.0.1:$SERVICES_PORT
LOAM_STACK_CA_FILE=$R/state/tls/cert.pem
LOAM_STACK_METERING_INTERVAL_S=$METERING_INTERVAL_S
LOAM_STACK_METRICS_TOKEN=$(cat "$R/state/metrics_token")
LOAM_STACK_OPERATOR_EMAIL=$OPERATOR_EMAIL
LOAM_STACK_OPERATOR_PASSWORD_FILE=$R/state/operator_password
LOAM_STACK_DEMO=$DEMO
ENV
mv "$R/env.tmp" "$R/env"
[ "$DEMO" = false ] || grep -E " (operator|owner|admin):" "$R/log/seed_demo.log" || true
echo "Loam stack up in $(elapsed) at $BASE_URL (env: $R/env; logs: $R/log)"
