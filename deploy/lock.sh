#!/usr/bin/env bash
# Re-resolves pyproject.toml (with the test extra) in a throwaway venv and writes requirements.lock.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$root[test]"
{
  echo "# Exact versions of everything Loam installs (direct ones are pinned in pyproject.toml)."
  echo "# Regenerate after changing pyproject.toml: bash deploy/lock.sh"
  "$work/venv/bin/pip" freeze --exclude-editable | grep -v '^loam'
} > "$root/requirements.lock"
echo "wrote $root/requirements.lock"
