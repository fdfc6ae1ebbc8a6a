#!/bin/bash
# What loam-agent needs on a server to run GPU cloud hosts: systemd-nspawn (systemd-container),
# debootstrap for the host image, ssh for the readiness probe and the tests, ip/tc, ext4 tools,
# nftables and conntrack (NAT, published ports, security groups), nsenter; iperf3, dnsmasq and
# curl serve the tests' outside world (tests/outside_world.py).
# Idempotent and quiet: installs only what is missing. The one list: agent/install.sh (the
# partner's installer) runs this file from the agent's archive the portal serves, and CI runs it
# for the container tests.
set -euo pipefail
declare -A command_of=(
  [systemd-container]=systemd-nspawn [debootstrap]=debootstrap [openssh-client]=ssh
  [iproute2]=ip [e2fsprogs]=resize2fs [nftables]=nft [util-linux]=nsenter
  [conntrack]=conntrack [iperf3]=iperf3 [dnsmasq-base]=dnsmasq [curl]=curl
)
missing=()
for package in "${!command_of[@]}"; do
  command -v "${command_of[$package]}" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin \
    command -v "${command_of[$package]}" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
