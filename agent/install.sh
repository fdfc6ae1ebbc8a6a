#!/bin/bash
# Installs the Loam host agent on a Debian 12 server and enrols the server with a portal, in one
# command (the portal's join-token page shows it with the portal's address and a fresh token):
#
#   curl -fsSL https://portal.example.cn/agent/install.sh \
#     | sudo bash -s -- --portal https://portal.example.cn --token lj_…
#
# What it does, each step idempotent (a second run upgrades the agent in place):
#   1. Debian's packages: python3-venv and curl for this script, then what the agent needs to run
#      hosts (deploy/agent/install.sh, shipped in the agent's archive; the one list of them).
#   2. The agent from the portal (/agent/loam-agent.tar.gz) into its own venv, PREFIX/venv
#      (PREFIX: /opt/loam-agent), linked as /usr/local/bin/loam-agent. pip builds it with
#      setuptools and takes that and the agent's dependencies from the package index; it reads
#      its options from the environment, so a mirror works: PIP_INDEX_URL, or PIP_NO_INDEX=1
#      with PIP_FIND_LINKS=DIR holding the wheels (tests/agents/test_distribution.py does so).
#   3. /etc/loam-agent/agent.toml with the portal's address and, with --ca-file, the CA that
#      signed the portal's certificate (copied to /etc/loam-agent/portal-ca.pem).
#   4. loam-agent enrol with the join token (skipped when the server is already enrolled).
#   5. loam-agent image build: the host image (debootstrap, a minute or two; cached).
#   6. The systemd unit (deploy/agent/loam-agent.service), enabled and (re)started.
#
# Options:
#   --portal URL      the portal's address (required)
#   --token TOKEN     the join token (required unless this server is already enrolled)
#   --ca-file PATH    the CA certificate (PEM) the portal's certificate is signed by, when it is
#                     a private CA; also used to download the agent
#   --prefix DIR      where the venv goes (default /opt/loam-agent, under --root)
#   --root DIR        install under DIR instead of / (DIR/etc, DIR/usr/local/bin, DIR/var/lib):
#                     for staging and tests; no systemctl then, and root is not needed
#   --reenrol         enrol again as a new server, with --token (a revoked credential)
#   --no-image        don't build the host image now (loam-agent image build later)
#   --no-start        install the unit but neither enable nor start it
# Environment: LOAM_AGENT_SKIP_APT=1 installs no Debian package (tests and containers, where
# they are present already); MIRROR: the Debian mirror of the host image.
set -euo pipefail

say() { echo "loam-agent install: $*" >&2; }
fail() {
  echo "loam-agent install: error: $*" >&2
  exit 1
}
usage() {
  echo "usage: install.sh --portal URL --token TOKEN [--ca-file PATH] [--prefix DIR] [--root DIR]" \
    "[--reenrol] [--no-image] [--no-start]" >&2
}
usage_error() {
  echo "loam-agent install: $*" >&2
  usage
  exit 2
}

# Debian packages this script itself needs, by the command (or module) that shows each is there.
bootstrap_packages() {
  local missing=()
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3 python3-venv)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  [ -e /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
  fi
}

main() {
  local portal="" token="" ca_file="" prefix="" root="" reenrol=0 image=1 start=1
  while [ $# -gt 0 ]; do
    case $1 in
      --portal | --token | --ca-file | --prefix | --root)
        if [ $# -lt 2 ] || [ -z "$2" ]; then usage_error "$1 needs a value"; fi
        case $1 in
          --portal) portal=$2 ;;
          --token) token=$2 ;;
          --ca-file) ca_file=$2 ;;
          --prefix) prefix=$2 ;;
          --root) root=$2 ;;
        esac
        shift 2
        ;;
      --reenrol) reenrol=1; shift ;;
      --no-image) image=0; shift ;;
      --no-start) start=0; shift ;;
      -h | --help) usage; exit 0 ;;
      *) usage_error "unknown option $1" ;;
    esac
  done

  [ -n "$portal" ] || usage_error "--portal URL is required (the portal's address)"
  [[ $portal =~ ^https?://[^/[:space:]]+(/[^[:space:]]*)?$ ]] ||
    usage_error "--portal must be an http(s) URL, not '$portal'"
  portal=${portal%/}
  if [ -n "$ca_file" ]; then
    if [ ! -f "$ca_file" ] || [ ! -r "$ca_file" ]; then
      fail "--ca-file $ca_file is not a readable file"
    fi
    grep -q -- "-----BEGIN CERTIFICATE-----" "$ca_file" ||
      fail "--ca-file $ca_file is not a PEM certificate (-----BEGIN CERTIFICATE-----)"
    ca_file=$(cd "$(dirname "$ca_file")" && pwd)/$(basename "$ca_file")
  fi

  # Where everything goes: / unless --root names a staging folder.
  local base=""
  if [ -n "$root" ]; then
    mkdir -p "$root" || fail "can't create --root $root"
    base=$(cd "$root" && pwd)
    [ "$base" = / ] && base=""
  elif [ "$(id -u)" -ne 0 ]; then
    fail "run it as root (sudo bash -s -- …): it installs packages, /opt/loam-agent and a unit"
  fi
  prefix=${prefix:-$base/opt/loam-agent}
  prefix=${prefix%/}
  local etc=$base/etc/loam-agent bin=$base/usr/local/bin state=$base/var/lib/loam-agent
  local unit_dir=$base/etc/systemd/system
  local config=$etc/agent.toml venv=$prefix/venv
  local credential=$state/credential.json enrolled
  if [ -f "$credential" ] && [ $reenrol = 0 ]; then
    enrolled=1
  else
    enrolled=0
    [ -n "$token" ] || usage_error "--token TOKEN is required (the join token from the portal)"
  fi

  local work
  work=$(mktemp -d)
  # shellcheck disable=SC2064  # expand now: $work is local
  trap "rm -rf '$work'" EXIT

  if [ "${LOAM_AGENT_SKIP_APT:-}" = 1 ]; then
    say "LOAM_AGENT_SKIP_APT=1: installing no Debian package"
  else
    command -v apt-get >/dev/null 2>&1 ||
      fail "no apt-get: this installer is for Debian 12 (LOAM_AGENT_SKIP_APT=1 if the packages are there)"
    bootstrap_packages
  fi
  command -v curl >/dev/null 2>&1 || fail "curl is not installed"
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 ||
    fail "python3 can't make a venv: install python3-venv"

  # 1-2. The agent's archive from the portal; the runtime packages it lists; the venv.
  local archive=$work/loam-agent.tar.gz curl_ca=()
  [ -n "$ca_file" ] && curl_ca=(--cacert "$ca_file")
  say "downloading the agent from $portal"
  curl -fsSL --retry 3 "${curl_ca[@]}" -o "$archive" "$portal/agent/loam-agent.tar.gz" </dev/null ||
    fail "couldn't download $portal/agent/loam-agent.tar.gz: is --portal right and reachable from" \
      "this server? (a portal whose certificate a private CA signed: --ca-file PATH)"
  mkdir "$work/source"
  tar -xzf "$archive" -C "$work/source" --strip-components=1 ||
    fail "$portal/agent/loam-agent.tar.gz is not the agent's archive"
  [ -f "$work/source/deploy/agent/loam-agent.service" ] ||
    fail "the portal's agent archive has no deploy/agent/loam-agent.service"
  if [ "${LOAM_AGENT_SKIP_APT:-}" != 1 ]; then
    say "installing what the agent's hosts need (deploy/agent/install.sh)"
    bash "$work/source/deploy/agent/install.sh" </dev/null
  fi

  if ! "$venv/bin/python" -c '' >/dev/null 2>&1; then
    say "creating the venv $venv"
    rm -rf "$venv"
    mkdir -p "$prefix"
    python3 -m venv "$venv" </dev/null || fail "python3 -m venv $venv failed"
  fi
  # pip builds the archive with its backend (setuptools, from the index like the dependencies)
  # and reinstalls it even when the version is the same: a re-run brings the portal's agent.
  say "installing the agent into $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "$archive" \
    </dev/null || fail "pip couldn't install the agent or its dependencies: does this server" \
    "reach the package index? (a mirror: PIP_INDEX_URL, or PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR" \
    "holding the wheels of its dependencies and of setuptools)"
  mkdir -p "$bin"
  ln -sfn "$venv/bin/loam-agent" "$bin/loam-agent"
  "$bin/loam-agent" --version >/dev/null || fail "$bin/loam-agent doesn't run"

  # 3. The configuration: our keys replaced, any other key the operator added kept.
  mkdir -p "$etc"
  local keys="portal_url" lines
  lines="portal_url = \"$portal\""
  if [ -n "$ca_file" ]; then
    if [ "$ca_file" != "$etc/portal-ca.pem" ]; then
      install -m 0644 "$ca_file" "$etc/portal-ca.pem"
    fi
    keys="$keys|ca_bundle"
    lines="$lines"$'\n'"ca_bundle = \"$etc/portal-ca.pem\""
  fi
  if [ -n "$base" ]; then
    keys="$keys|credential_path|state_dir"
    lines="$lines"$'\n'"credential_path = \"$credential\""$'\n'"state_dir = \"$state\""
  fi
  {
    echo "$lines"
    if [ -f "$config" ]; then
      grep -Ev "^[[:space:]]*($keys)[[:space:]]*=" "$config" || true
    fi
  } >"$work/agent.toml"
  install -m 0644 "$work/agent.toml" "$config"
  say "wrote $config"

  # 6 (file only). The unit, pointing at this install when it isn't the default one.
  mkdir -p "$unit_dir"
  local exec_start="ExecStart=/usr/local/bin/loam-agent run"
  if [ "$bin" != /usr/local/bin ] || [ "$config" != /etc/loam-agent/agent.toml ]; then
    exec_start="ExecStart=$bin/loam-agent --config $config run"
  fi
  sed "s|^ExecStart=.*|$exec_start|" "$work/source/deploy/agent/loam-agent.service" \
    >"$work/loam-agent.service"
  install -m 0644 "$work/loam-agent.service" "$unit_dir/loam-agent.service"

  # 4. Enrol.
  if [ $enrolled = 1 ]; then
    say "already enrolled (credential $credential): not enrolling again" \
      "(--reenrol --token TOKEN enrols it as a new server)"
  else
    local force=()
    [ $reenrol = 1 ] && force=(--force)
    say "enrolling with $portal"
    local status=0
    "$bin/loam-agent" --config "$config" enrol --portal "$portal" --token "$token" "${force[@]}" \
      </dev/null || status=$?
    case $status in
      0) ;;
      3) fail "the portal refused the join token (used, expired or revoked): issue a new one" ;;
      2) fail "loam-agent enrol refused its configuration or options (above)" ;;
      *) fail "loam-agent enrol couldn't reach the portal at $portal or understand it (above)" ;;
    esac
  fi

  # 5. The host image.
  if [ $image = 1 ]; then
    say "building the host image (loam-agent image build; a minute or two the first time)"
    "$bin/loam-agent" --config "$config" image build </dev/null ||
      fail "loam-agent image build failed (above); run it again, or MIRROR=<Debian mirror>"
  fi

  # 6. systemd.
  if [ -n "$base" ]; then
    say "installed under $base; not touching systemd (--root)"
  elif [ ! -d /run/systemd/system ] || ! command -v systemctl >/dev/null 2>&1; then
    say "no systemd here: not starting the unit; run the agent with: loam-agent run"
  else
    systemctl daemon-reload
    if [ $start = 0 ]; then
      say "installed; start it with: systemctl enable --now loam-agent (--no-start)"
    else
      systemctl enable --quiet loam-agent
      systemctl restart loam-agent
      say "loam-agent is running (systemctl status loam-agent; journalctl -u loam-agent)"
    fi
  fi
  say "done: loam-agent $("$bin/loam-agent" --version | sed 's/^loam-agent //') in $venv"
}

# All of it is read before any of it runs: piped into bash, a command that reads standard input
# can't swallow the rest of the script, and a download cut short runs nothing.
main "$@"
