#!/usr/bin/env bash
# README command 2: set up and run the whole test suite, with lint and Django's checks.
# Uses SQLite and the filesystem broker unless DATABASE_URL / CELERY_BROKER_URL say otherwise;
# tests marked `postgres` are skipped (with the reason) on SQLite. `.ci/run` runs this same
# script against PostgreSQL and RabbitMQ.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash deploy/setup.sh
# Browser tests use Debian's Chromium (Playwright cannot download its own here), and a CJK
# font so that screenshots of the zh-hans pages are readable.
if [ ! -x /usr/bin/chromium ] || ! fc-list 2>/dev/null | grep -qi "wenquanyi"; then
  apt-get update -qq && apt-get install -y -qq chromium fonts-wqy-microhei >/dev/null
fi
# The web terminal's tests log in to a throwaway sshd that trusts the portal's CA.
[ -x /usr/sbin/sshd ] || { apt-get update -qq && apt-get install -y -qq openssh-server >/dev/null; }
# The host agent's tests build a fake libnvidia-ml.so.1 from C.
command -v gcc >/dev/null || { apt-get update -qq && apt-get install -y -qq gcc >/dev/null; }
. .venv/bin/activate
ruff check .
ruff format --check .
python manage.py check --fail-level WARNING
python manage.py makemigrations --check --dry-run >/dev/null \
  || { echo "models changed without a migration: run manage.py makemigrations" >&2; exit 1; }
python manage.py spectacular --validate --fail-on-warn --file /dev/null
python manage.py compilemessages -l zh_Hans --ignore=.venv --ignore=staticfiles --ignore=var -v0
pytest "$@"
# The API contract: schemathesis against the live schema (no 5xx, every response conforms).
bash deploy/api_contract.sh
