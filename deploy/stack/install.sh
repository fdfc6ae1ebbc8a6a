#!/usr/bin/env bash
# Installs what deploy/stack/start.sh needs beyond the virtualenv: nginx from Debian 12's own
# packages, openssl (the self-signed certificate) and envsubst (renders deploy/nginx/loam.conf).
# Quiet, and a no-op when everything is already there, so CI can call it on every run.
# Only packages are installed: no system service is enabled or configured (start.sh runs its
# own nginx under its run dir and never uses /etc/nginx/sites-enabled).
set -euo pipefail

# `nginx` is the server itself (in bookworm's updates nginx-light only adds the echo module on
# top of it); gettext-base holds envsubst.
packages=(nginx openssl gettext-base curl)

missing=()
for p in "${packages[@]}"; do
  # dpkg-query prints "install ok installed" only for a fully installed package.
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deploy/stack/install.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
