#!/usr/bin/env bash
# Vendors the front-end libraries into static/vendor/ from the npm registry.
# Production parks have no internet, so pages never load anything from a CDN.
# Re-run after changing a version below; commit the result.
set -euo pipefail

HTMX_VERSION=2.0.11
BOOTSTRAP_VERSION=5.3.9
SWAGGER_UI_VERSION=5.35.0
REDOC_VERSION=2.5.4

root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/static/vendor"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$work"
npm pack --silent "htmx.org@$HTMX_VERSION" "bootstrap@$BOOTSTRAP_VERSION" \
  "swagger-ui-dist@$SWAGGER_UI_VERSION" "redoc@$REDOC_VERSION" >/dev/null
mkdir htmx bootstrap swagger redoc
tar -xzf "htmx.org-$HTMX_VERSION.tgz" -C htmx --strip-components=1
tar -xzf "bootstrap-$BOOTSTRAP_VERSION.tgz" -C bootstrap --strip-components=1
tar -xzf "swagger-ui-dist-$SWAGGER_UI_VERSION.tgz" -C swagger --strip-components=1
tar -xzf "redoc-$REDOC_VERSION.tgz" -C redoc --strip-components=1

rm -rf "$dest/htmx" "$dest/bootstrap" "$dest/swagger-ui" "$dest/redoc"
mkdir -p "$dest/htmx" "$dest/bootstrap/css" "$dest/bootstrap/js" "$dest/swagger-ui" \
  "$dest/redoc/bundles"
# The API docs pages (drf-spectacular's Swagger UI and ReDoc views) load these.
cp swagger/swagger-ui.css swagger/swagger-ui-bundle.js swagger/swagger-ui-standalone-preset.js \
  swagger/favicon-32x32.png swagger/LICENSE "$dest/swagger-ui/"
cp redoc/bundles/redoc.standalone.js redoc/LICENSE "$dest/redoc/" 2>/dev/null \
  || cp redoc/bundles/redoc.standalone.js "$dest/redoc/"
mv "$dest/redoc/redoc.standalone.js" "$dest/redoc/bundles/"
cp htmx/dist/htmx.min.js htmx/LICENSE "$dest/htmx/"
cp bootstrap/dist/css/bootstrap.min.css bootstrap/dist/css/bootstrap.min.css.map "$dest/bootstrap/css/"
cp bootstrap/dist/js/bootstrap.bundle.min.js bootstrap/dist/js/bootstrap.bundle.min.js.map "$dest/bootstrap/js/"
cp bootstrap/LICENSE "$dest/bootstrap/"

cat > "$dest/VERSIONS" <<VERSIONS
htmx.org $HTMX_VERSION
bootstrap $BOOTSTRAP_VERSION
swagger-ui-dist $SWAGGER_UI_VERSION
redoc $REDOC_VERSION
VERSIONS
echo "vendored into $dest:"; cat "$dest/VERSIONS"
