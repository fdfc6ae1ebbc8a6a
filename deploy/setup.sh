#!/usr/bin/env bash
# Creates .venv (if missing) and installs the locked dependencies. Sourced by the other scripts.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# This machine's pip config names local package mirrors that may be absent; hide that noise.
.venv/bin/pip install -q --disable-pip-version-check -r requirements.lock \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
# The host agent (agent/, its own package): installs the `loam-agent` command (editable, so once).
[ -x .venv/bin/loam-agent ] || .venv/bin/pip install -q --disable-pip-version-check --no-deps -e ./agent \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
