#!/usr/bin/env bash
# Restarts slurmrestd alone, by the PID start.sh recorded under $LOAM_SLURM_ROOT: slurmctld, the
# slurmd and their jobs keep running (stop.sh would cancel every job). Then start.sh starts what
# is not alive, which is slurmrestd, and writes the env file again once REST answers. Takes the
# knobs start.sh saved in the run dir (only LOAM_SLURM_ROOT is needed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
R=${LOAM_SLURM_ROOT:-$here/../../var/slurm}
[ -d "$R" ] || { echo "deploy/slurm/restart-rest.sh: no cluster under $R; run start.sh" >&2; exit 1; }
R=$(cd "$R" && pwd)

p=$(cat "$R/pids/slurmrestd.pid" 2>/dev/null || true)
# Only if the PID is still slurmrestd's: after a crash it may name another process.
if [ -n "$p" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmrestd ]; then
  kill "$p"
  # A zombie (until this machine's init reaps it) no longer holds the port: count it as gone.
  for _ in $(seq 100); do
    st=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) && [ "$st" != Z ] || break
    sleep 0.1
  done
  st=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) && [ "$st" != Z ] && kill -9 "$p" 2>/dev/null
fi
rm -f "$R/pids/slurmrestd.pid"
LOAM_SLURM_ROOT=$R exec bash "$here/start.sh"
