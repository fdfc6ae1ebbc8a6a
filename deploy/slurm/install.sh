#!/usr/bin/env bash
# Installs what deploy/slurm/start.sh needs from Debian 12's own packages (Slurm 22.05).
# Quiet, and a no-op when everything is already there, so CI can call it on every run.
# Only packages are installed: no system service is enabled or configured (start.sh runs its
# own daemons under its run dir and never uses /etc/slurm or /run/munge).
set -euo pipefail

# slurm-wlm-jwt-plugin holds auth_jwt.so (slurmrestd's token auth); slurmdbd pulls in the
# MySQL storage plugin. The slurm-wlm metapackage would pull in much more than we use. runc runs
# jobs in their image (Slurm's --container, rootless: see oci-run), python3 rewrites its config.
packages=(slurmctld slurmd slurmdbd slurmrestd slurm-client slurm-wlm-jwt-plugin munge
  mariadb-server mariadb-client curl runc python3)

missing=()
for p in "${packages[@]}"; do
  # dpkg-query prints "install ok installed" only for a fully installed package.
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deploy/slurm/install.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Recommends would add a dozen unused -dev and monitoring plugins.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
