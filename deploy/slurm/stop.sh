#!/usr/bin/env bash
# Stops the test cluster that deploy/slurm/start.sh started, by the PIDs it recorded under
# $LOAM_SLURM_ROOT (never by process name: other Slurm or MariaDB processes on this machine are
# not ours). Safe to run when nothing is up. Leaves configs, state and the accounting DB in place.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
R=${LOAM_SLURM_ROOT:-$here/../../var/slurm}
[ -d "$R" ] || { echo "Slurm test cluster: nothing under $R"; exit 0; }
R=$(cd "$R" && pwd)
export SLURM_CONF=$R/etc/slurm.conf

# A daemon's exited process stays a zombie until this machine's init reaps it (up to ~2 s here):
# count it as stopped.
running() { local st; st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ "$st" != Z ]; }

# stop WAIT_S NAME:PIDFILE...: SIGTERM each PID that is still a NAME process (a PID file left by
# a crash may name an unrelated process by now), all at once (each daemon takes ~2 s to shut
# down), then SIGKILL whatever still runs after WAIT_S seconds.
stop() {
  local wait_s=$1 entry name f p pids=()
  shift
  for entry in "$@"; do
    name=${entry%%:*} f=${entry#*:}
    [ -s "$f" ] || { rm -f "$f"; continue; }
    p=$(cat "$f")
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$name" ] && kill "$p" 2>/dev/null; then
      pids+=("$p")
    fi
    rm -f "$f"
  done
  for _ in $(seq $((wait_s * 10))); do
    local left=()
    for p in "${pids[@]}"; do running "$p" && left+=("$p"); done
    pids=("${left[@]}")
    [ ${#pids[@]} -eq 0 ] && return 0
    sleep 0.1
  done
  echo "stop.sh: ${pids[*]} ignored SIGTERM for ${wait_s}s; killing" >&2
  kill -9 "${pids[@]}" 2>/dev/null
  return 0
}

# Jobs do not survive a restart of this test cluster: cancel what is left while the controller is
# up, so no job step keeps running (and holding fake GPUs) after its slurmd is gone.
if [ -s "$R/pids/slurmctld.pid" ] && kill -0 "$(cat "$R/pids/slurmctld.pid")" 2>/dev/null; then
  jobs=$(timeout 10 squeue -h -o %i 2>/dev/null)
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086
    timeout 10 scancel $jobs 2>/dev/null
    for _ in $(seq 50); do
      [ -z "$(timeout 5 squeue -h -t running,completing -o %i 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
fi

# Front to back: slurmctld may still report to slurmdbd, and every daemon needs munged for that.
nodes=()
for f in "$R"/pids/slurmd-*.pid; do [ -e "$f" ] && nodes+=("slurmd:$f"); done
stop 10 "slurmrestd:$R/pids/slurmrestd.pid" "${nodes[@]}"
stop 10 "slurmctld:$R/pids/slurmctld.pid"
stop 60 "slurmdbd:$R/pids/slurmdbd.pid" "mariadbd:$R/pids/mariadb.pid"  # only a private MariaDB has a PID file
stop 10 "munged:$R/munge/munged.pid"
rm -f "$R/env"  # the tests skip (or, in CI, fail) without it instead of timing out
echo "Slurm test cluster stopped ($R)"
