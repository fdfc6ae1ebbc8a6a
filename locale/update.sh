#!/usr/bin/env bash
# Refresh the Simplified Chinese catalog: extract strings, compile, and fail unless every
# entry is translated and none is fuzzy.
#
#   bash locale/update.sh
#
# Exit status: 0 when the catalog is complete; 1 when entries are untranslated or fuzzy
# (they are listed; translate them in locale/zh_Hans/LC_MESSAGES/django.po, delete the
# `#, fuzzy` line and any `#|` lines above a reviewed entry, and run this again); anything
# else when a step failed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -x .venv/bin/python ]]; then
    PYTHON=${PYTHON:-.venv/bin/python}
else
    PYTHON=${PYTHON:-python}
fi

LOCALE=zh_Hans
PO=locale/$LOCALE/LC_MESSAGES/django.po
# The same folders for both commands: without them compilemessages also walks .venv and
# rewrites the .mo files of Django and the other installed packages.
IGNORE=(--ignore=.venv --ignore=staticfiles --ignore=var --ignore=static/vendor)

mkdir -p "locale/$LOCALE/LC_MESSAGES"
"$PYTHON" manage.py makemessages -l "$LOCALE" "${IGNORE[@]}"
"$PYTHON" manage.py compilemessages -l "$LOCALE" "${IGNORE[@]}"

# msgfmt writes its statistics to stderr, e.g.
#   "310 translated messages."
#   "300 translated messages, 4 fuzzy translations, 6 untranslated messages."
# -o /dev/null: the check must not leave a messages.mo in the working directory.
stats=$(msgfmt --check --statistics -o /dev/null "$PO" 2>&1)
echo "$PO: $stats"

count() {  # count <word>: the number in front of "<word> translation(s)/message(s)", else 0
    local n
    n=$(grep -oE "[0-9]+ $1 (translation|message)s?" <<<"$stats" | grep -oE '^[0-9]+' || true)
    echo "${n:-0}"
}
translated=$(count translated)
fuzzy=$(count fuzzy)
untranslated=$(count untranslated)

if [[ $translated -eq 0 ]]; then
    echo "error: could not read the statistics above (or the catalog is empty)" >&2
    exit 2
fi

if [[ $fuzzy -gt 0 || $untranslated -gt 0 ]]; then
    echo "error: $PO has $fuzzy fuzzy and $untranslated untranslated entries:" >&2
    msgattrib --only-fuzzy --no-obsolete --no-wrap "$PO" | grep -E '^(#:|msgid "[^"])' >&2 || true
    msgattrib --untranslated --no-obsolete --no-wrap "$PO" | grep -E '^(#:|msgid "[^"])' >&2 || true
    exit 1
fi

echo "ok: $translated entries translated, 0 fuzzy, 0 untranslated"
