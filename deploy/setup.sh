#!/usr/bin/env bash
# Creates .venv (if missing) and installs the locked dependencies. Sourced by the other scripts.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# This machine's pip config names local package mirrors that may be absent; hide that noise.
# The package index can be unreachable for a while (pip's own retries span seconds): each pip
# step is tried again, three times over three minutes, before setup gives up.
pip_with_retries() {  # what: pip arguments...
  local what=$1 attempt
  shift
  for attempt in 1 2 3 4; do
    if .venv/bin/pip -q --disable-pip-version-check "$@" --retries 8 \
      2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); then
      return 0
    fi
    [ "$attempt" -lt 4 ] || return 1
    echo "setup: $what failed (try $attempt of 4); again in $((attempt * 30)) s" >&2
    sleep $((attempt * 30))
  done
}
pip_with_retries "installing the locked packages" install -r requirements-test.lock
# The wheels a partner's server installs the agent from (its dependencies and build backend),
# kept for the tests that install it as a server behind an offline mirror does
# (tests/agent_wheels.py), so they need no package index while they run.
# .complete names what they are: a dependency the agent adds is downloaded at the next setup.
agent_requirements=$(.venv/bin/python -c '
import tomllib
project = tomllib.load(open("agent/pyproject.toml", "rb"))
print(" ".join(project["project"]["dependencies"] + project["build-system"]["requires"]))')
if [ "$(cat var/agent-wheels/.complete 2>/dev/null)" != "$agent_requirements" ]; then
  mkdir -p var/agent-wheels
  # shellcheck disable=SC2086
  pip_with_retries "downloading the agent's wheels" download --only-binary :all: \
    --dest var/agent-wheels $agent_requirements
  echo "$agent_requirements" > var/agent-wheels/.complete
fi
# The host agent (agent/, its own package): installs the `loam-agent` command (editable, so once).
[ -x .venv/bin/loam-agent ] || .venv/bin/pip install -q --disable-pip-version-check --no-deps -e ./agent \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
