#!/usr/bin/env bash
# Vendors the front-end libraries into static/vendor/ from the npm registry.
# Production parks have no internet, so pages never load anything from a CDN.
# Re-run after changing a version below; commit the result.
set -euo pipefail

HTMX_VERSION=2.0.11
BOOTSTRAP_VERSION=5.3.9

root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/static/vendor"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$work"
npm pack --silent "htmx.org@$HTMX_VERSION" "bootstrap@$BOOTSTRAP_VERSION" >/dev/null
mkdir htmx bootstrap
tar -xzf "htmx.org-$HTMX_VERSION.tgz" -C htmx --strip-components=1
tar -xzf "bootstrap-$BOOTSTRAP_VERSION.tgz" -C bootstrap --strip-components=1

rm -rf "$dest/htmx" "$dest/bootstrap"
mkdir -p "$dest/htmx" "$dest/bootstrap/css" "$dest/bootstrap/js"
cp htmx/dist/htmx.min.js htmx/LICENSE "$dest/htmx/"
cp bootstrap/dist/css/bootstrap.min.css bootstrap/dist/css/bootstrap.min.css.map "$dest/bootstrap/css/"
cp bootstrap/dist/js/bootstrap.bundle.min.js bootstrap/dist/js/bootstrap.bundle.min.js.map "$dest/bootstrap/js/"
cp bootstrap/LICENSE "$dest/bootstrap/"

cat > "$dest/VERSIONS" <<VERSIONS
htmx.org $HTMX_VERSION
bootstrap $BOOTSTRAP_VERSION
VERSIONS
echo "vendored into $dest:"; cat "$dest/VERSIONS"
