#!/usr/bin/env bash
# Vendors the front-end libraries into static/vendor/ from the npm registry.
# Production parks have no internet, so pages never load anything from a CDN.
# Re-run after changing a version below; commit the result.
set -euo pipefail

HTMX_VERSION=2.0.11
BOOTSTRAP_VERSION=5.3.9
SWAGGER_UI_VERSION=5.35.0
REDOC_VERSION=2.5.4
# Apache ECharts (the operator console's charts): fetched as the registry's tarball and checked
# against this SHA-256 before anything is copied, so a changed or truncated download fails here.
ECHARTS_VERSION=6.1.0
ECHARTS_SHA256=681aff88cc1038c3fa941a3a53d1b177a52250b05335efc607d6105ae13be481
# xterm.js and its fit addon (the web terminal's page).
XTERM_VERSION=6.0.0
XTERM_FIT_VERSION=0.11.0
NPM_REGISTRY=${NPM_REGISTRY:-https://registry.npmjs.org}

root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/static/vendor"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$work"
npm pack --silent "htmx.org@$HTMX_VERSION" "bootstrap@$BOOTSTRAP_VERSION" \
  "swagger-ui-dist@$SWAGGER_UI_VERSION" "redoc@$REDOC_VERSION" \
  "@xterm/xterm@$XTERM_VERSION" "@xterm/addon-fit@$XTERM_FIT_VERSION" >/dev/null
curl -sSfL -o "echarts-$ECHARTS_VERSION.tgz" \
  "$NPM_REGISTRY/echarts/-/echarts-$ECHARTS_VERSION.tgz"
echo "$ECHARTS_SHA256  echarts-$ECHARTS_VERSION.tgz" | sha256sum -c --quiet -
mkdir htmx bootstrap swagger redoc echarts xterm xterm-fit
tar -xzf "htmx.org-$HTMX_VERSION.tgz" -C htmx --strip-components=1
tar -xzf "bootstrap-$BOOTSTRAP_VERSION.tgz" -C bootstrap --strip-components=1
tar -xzf "swagger-ui-dist-$SWAGGER_UI_VERSION.tgz" -C swagger --strip-components=1
tar -xzf "redoc-$REDOC_VERSION.tgz" -C redoc --strip-components=1
tar -xzf "echarts-$ECHARTS_VERSION.tgz" -C echarts --strip-components=1
tar -xzf "xterm-xterm-$XTERM_VERSION.tgz" -C xterm --strip-components=1
tar -xzf "xterm-addon-fit-$XTERM_FIT_VERSION.tgz" -C xterm-fit --strip-components=1

rm -rf "$dest/htmx" "$dest/bootstrap" "$dest/swagger-ui" "$dest/redoc" "$dest/echarts" \
  "$dest/xterm"
mkdir -p "$dest/htmx" "$dest/bootstrap/css" "$dest/bootstrap/js" "$dest/swagger-ui" \
  "$dest/redoc/bundles" "$dest/echarts" "$dest/xterm"
# The API docs pages (drf-spectacular's Swagger UI and ReDoc views) load these.
cp swagger/swagger-ui.css swagger/swagger-ui-bundle.js swagger/swagger-ui-standalone-preset.js \
  swagger/favicon-32x32.png swagger/LICENSE "$dest/swagger-ui/"
cp redoc/bundles/redoc.standalone.js redoc/LICENSE "$dest/redoc/" 2>/dev/null \
  || cp redoc/bundles/redoc.standalone.js "$dest/redoc/"
mv "$dest/redoc/redoc.standalone.js" "$dest/redoc/bundles/"
# Their source maps are not vendored: drop the references, or collectstatic's manifest
# (DEBUG=false) stops on the missing files.
sed -i '/^\/\/# sourceMappingURL=/d' "$dest/redoc/bundles/redoc.standalone.js"
sed -i 's|/\*# sourceMappingURL=[^*]*\*/||' "$dest/swagger-ui/swagger-ui.css"
cp htmx/dist/htmx.min.js htmx/LICENSE "$dest/htmx/"
cp bootstrap/dist/css/bootstrap.min.css bootstrap/dist/css/bootstrap.min.css.map "$dest/bootstrap/css/"
cp bootstrap/dist/js/bootstrap.bundle.min.js bootstrap/dist/js/bootstrap.bundle.min.js.map "$dest/bootstrap/js/"
cp bootstrap/LICENSE "$dest/bootstrap/"
# The full build (every chart type, English and Chinese built in), with its licence notices.
cp echarts/dist/echarts.min.js echarts/LICENSE echarts/NOTICE "$dest/echarts/"
cp echarts/licenses/LICENSE-d3 "$dest/echarts/"
# The UMD builds (a global `Terminal` and `FitAddon`), without their source maps.
cp xterm/lib/xterm.js xterm/css/xterm.css xterm/LICENSE "$dest/xterm/"
cp xterm-fit/lib/addon-fit.js "$dest/xterm/"
sed -i '/^\/\/# sourceMappingURL=/d' "$dest/xterm/xterm.js" "$dest/xterm/addon-fit.js"

cat > "$dest/VERSIONS" <<VERSIONS
htmx.org $HTMX_VERSION
bootstrap $BOOTSTRAP_VERSION
swagger-ui-dist $SWAGGER_UI_VERSION
redoc $REDOC_VERSION
echarts $ECHARTS_VERSION
@xterm/xterm $XTERM_VERSION
@xterm/addon-fit $XTERM_FIT_VERSION
VERSIONS
echo "vendored into $dest:"; cat "$dest/VERSIONS"
