#!/usr/bin/env bash
# Re-resolves pyproject.toml in throwaway venvs and writes the two locks: requirements-test.lock
# (the portal with its test extra: development machines and CI) and requirements.lock (the
# portal alone, at the same versions: the production image).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
freeze() {  # venv
  "$1/bin/pip" freeze --exclude-editable | grep -v '^loam'
}
python3 -m venv "$work/test"
"$work/test/bin/pip" install -q "$root[test]"
{
  echo "# Exact versions of everything Loam installs with its test tools (direct ones are pinned"
  echo "# in pyproject.toml). Regenerate after changing pyproject.toml: bash deploy/lock.sh"
  freeze "$work/test"
} > "$root/requirements-test.lock"
python3 -m venv "$work/runtime"
"$work/runtime/bin/pip" install -q -c "$root/requirements-test.lock" "$root"
{
  echo "# The portal's runtime packages, exact versions (the image installs these; development and CI"
  echo "# install requirements-test.lock, which adds the test tools). Regenerate: bash deploy/lock.sh"
  freeze "$work/runtime"
} > "$root/requirements.lock"
echo "wrote $root/requirements-test.lock and $root/requirements.lock"
