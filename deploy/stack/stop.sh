#!/usr/bin/env bash
# Stops the stack that deploy/stack/start.sh started, by the PIDs it recorded under
# $LOAM_STACK_ROOT (never by process name: other nginx, gunicorn or Celery processes on this
# machine are not ours). Safe to run when nothing is up. Leaves configs, logs, the database, the
# certificate and the SECRET_KEY in place, so the next start is quicker and sessions survive.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
R=${LOAM_STACK_ROOT:-$here/../../var/stack}
[ -d "$R" ] || { echo "Loam stack: nothing under $R"; exit 0; }
R=$(cd "$R" && pwd)

# An exited process stays a zombie until this machine's init reaps it (up to ~2 s here): count it
# as stopped.
running() { local st; st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ "$st" != Z ]; }

# stop WAIT_S NAME:COMMAND...: SIGTERM each recorded PID that is still a COMMAND process (a PID
# file left by a crash may name an unrelated process by now), all at once, then SIGKILL whatever
# still runs after WAIT_S seconds. SIGTERM is each one's graceful stop: nginx and gunicorn finish
# the requests in flight, the Celery worker the jobs it holds.
stop() {
  local wait_s=$1 entry name command f p pids=()
  shift
  for entry in "$@"; do
    name=${entry%%:*} command=${entry#*:} f=$R/pids/$name.pid
    [ -s "$f" ] || { rm -f "$f"; continue; }
    p=$(cat "$f")
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$command" ] && kill "$p" 2>/dev/null; then
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

rm -f "$R/env"  # the tests skip (or, in CI, fail) without it instead of timing out
# The front first, so no new request or job arrives; the worker last, finishing what it holds.
stop 35 nginx:nginx gunicorn:gunicorn asgi:daphne beat:celery
stop 40 worker:celery
echo "Loam stack stopped ($R)"
