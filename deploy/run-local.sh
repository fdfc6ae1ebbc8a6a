#!/usr/bin/env bash
# README command 1: set up and run the portal on the embedded default at http://127.0.0.1:8000
#   (another port: `LOAM_PORT=8080 bash deploy/run-local.sh` or `bash deploy/run-local.sh 8080`;
#   links in emails, agents' enrol commands and the demo's printed links follow it)
#   - SQLite in var/loam.sqlite3
#   - a real local Celery worker on kombu's filesystem broker (var/celery-broker), no service needed,
#     with Celery beat inside it (-B), so usage is metered, queues scheduled and work reconciled
#   - demo data from `manage.py seed_demo`: the park and a month of life in it
# Ctrl-C stops the portal and the worker.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash deploy/setup.sh
. .venv/bin/activate
export DEBUG="${DEBUG:-true}"
port="${1:-${LOAM_PORT:-8000}}"
[[ $port =~ ^[0-9]+$ ]] || { echo "usage: bash deploy/run-local.sh [port]" >&2; exit 2; }
export LOAM_BASE_URL="${LOAM_BASE_URL:-http://127.0.0.1:$port}"
python manage.py migrate --noinput
python manage.py collectstatic --noinput -v0
python manage.py compilemessages -l zh_Hans --ignore=.venv --ignore=staticfiles --ignore=var -v0
python manage.py seed_demo --base-url "$LOAM_BASE_URL"
mkdir -p var/log
# One process for the demo; production runs beat as its own single process (deploy/systemd).
celery -A portal worker -B --schedule var/celerybeat-schedule --loglevel=INFO --concurrency=2 \
  >var/log/celery.log 2>&1 &
worker=$!
trap 'kill $worker 2>/dev/null; wait $worker 2>/dev/null' EXIT
echo "Celery worker and beat running (log: var/log/celery.log)."
python manage.py runserver "127.0.0.1:$port"
