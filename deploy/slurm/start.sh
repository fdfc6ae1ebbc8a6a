#!/usr/bin/env bash
# Starts a single-machine Slurm 22.05 test cluster for Loam's Slurm backend (issue 13), built
# from Debian's packages (deploy/slurm/install.sh):
#   - its own munged (own key and socket: the system /run/munge is never used),
#   - slurmdbd accounting on MariaDB (a running one on 127.0.0.1:$MYSQL_PORT, else a private one),
#   - slurmctld and three `slurmd -N gpu-nodeN`, each with 4 fake A100s (device files made with
#     mknod; gres.conf has AutoDetect=off, so no driver or NVML is needed),
#   - slurmrestd (REST OpenAPI v0.0.38, JWT auth) on 127.0.0.1:$REST_PORT as a non-root user,
#   - jobs in their image (issue 32): oci.conf runs `--container` steps with rootless runc as
#     the job's user (oci-run), on the OCI bundles bundles.sh makes in $LOAM_SLURM_ROOT/images
#     from the host images built on this machine ($LOAM_SLURM_IMAGE_SOURCE).
# Everything lives under $LOAM_SLURM_ROOT (default var/slurm in the repo, git-ignored); /etc/slurm
# is never read (SLURM_CONF points at our own slurm.conf). Stop with deploy/slurm/stop.sh.
#
# Run again, it starts only the daemons that are not alive and leaves the others, and their jobs,
# running (deploy/slurm/restart-rest.sh restarts slurmrestd alone that way). Only stop.sh cancels
# jobs. The knobs below are saved in $LOAM_SLURM_ROOT/knobs: a later run reuses them unless set.
#
# Writes $LOAM_SLURM_ROOT/env (KEY=value lines; `set -a; . env` in bash) for the tests and the
# driver: LOAM_SLURM_URL, LOAM_SLURM_USER, LOAM_SLURM_JWT_KEY, LOAM_SLURM_JOBS_DIR,
# LOAM_SLURM_IMAGES_DIR, SLURM_CONF.
#
# Env knobs: LOAM_SLURM_ROOT, LOAM_SLURM_REST_PORT (6820), LOAM_SLURM_USER (loam-slurm: the Unix
# user that jobs run as and that the REST client names), LOAM_SLURM_MYSQL_PORT (3306),
# LOAM_SLURM_DB (loam_acct_<key>), LOAM_SLURM_DB_USER (loam_<key>: the MariaDB user slurmdbd logs
# in as), where <key> is named after the run dir, so each cluster on one MariaDB has its own
# database and user unless told otherwise, LOAM_SLURM_CTLD_PORT (6817),
# LOAM_SLURM_DBD_PORT (6819), LOAM_SLURM_SLURMD_PORT0 (17000: node N listens on PORT0+N),
# LOAM_SLURM_IMAGE_SOURCE (/var/cache/loam-agent/images: where `loam-agent image build` put
# the images the jobs may run in).
#
# The DB user's password is kept in $LOAM_SLURM_ROOT/state/db.pass and never changed: a user this
# script did not create with that password (another cluster's) is refused, not reset.
# The run dir and every folder above it must be searchable by the munge, slurmrestd and job
# users (a clone under a `mktemp -d` folder, mode 700, is refused before anything starts).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

R=${LOAM_SLURM_ROOT:-$repo/var/slurm}
mkdir -p "$R"
R=$(cd "$R" && pwd)  # Slurm's config files need absolute paths.
case "$R" in *[[:space:]]*)
  echo "deploy/slurm/start.sh: the run dir must not contain whitespace: '$R'" >&2; exit 1 ;;
esac
# A later run (restart-rest.sh's too) keeps the knobs this run dir was started with, unless set.
if [ -s "$R/knobs" ]; then
  while IFS='=' read -r k v; do
    [[ $k =~ ^LOAM_SLURM_[A-Z0-9_]+$ ]] && [ -z "${!k+x}" ] && export "$k=$v"
  done <"$R/knobs"
fi
REST_PORT=${LOAM_SLURM_REST_PORT:-6820}
CTLD_PORT=${LOAM_SLURM_CTLD_PORT:-6817}
DBD_PORT=${LOAM_SLURM_DBD_PORT:-6819}
SLURMD_PORT0=${LOAM_SLURM_SLURMD_PORT0:-17000}
MYSQL_PORT=${LOAM_SLURM_MYSQL_PORT:-3306}
IMAGE_SOURCE=${LOAM_SLURM_IMAGE_SOURCE:-/var/cache/loam-agent/images}
run_key=$(printf %s "$R" | sha1sum | cut -c1-10)
DB=${LOAM_SLURM_DB:-loam_acct_$run_key}
DB_USER=${LOAM_SLURM_DB_USER:-loam_$run_key}
JOB_USER=${LOAM_SLURM_USER:-loam-slurm}
REST_DAEMON_USER=slurmrest  # slurmrestd refuses to run as root or as SlurmUser
CLUSTER=loam
NODES=3 GPUS=4
# Fake node sizes: SlurmdParameters=config_overrides makes slurmd trust these over the hardware.
NODE_CPUS=16 NODE_MEM_MB=64000

export SLURM_CONF=$R/etc/slurm.conf
t0=$(date +%s%N)
elapsed() { local ms=$((($(date +%s%N) - t0) / 1000000)); printf '%d.%03ds' $((ms / 1000)) $((ms % 1000)); }
stamp() { printf '[%8s] %s\n' "$(elapsed)" "$*"; }
wait_for() {  # wait_for SECONDS WHAT CMD...: poll CMD every 0.2 s; fail after SECONDS
  local end=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS > end)); then
      echo "deploy/slurm/start.sh: timed out waiting for $what (logs: $R/log)" >&2; return 1
    fi
    sleep 0.2
  done
}
# alive NAME PIDFILE: the PID file names a running NAME (a PID left by a crash may be another
# process's by now).
alive() {
  local p; p=$(cat "$2" 2>/dev/null) && [ -n "$p" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$1" ]
}
port_busy() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

cat >"$R/knobs" <<KNOBS
LOAM_SLURM_REST_PORT=$REST_PORT
LOAM_SLURM_CTLD_PORT=$CTLD_PORT
LOAM_SLURM_DBD_PORT=$DBD_PORT
LOAM_SLURM_SLURMD_PORT0=$SLURMD_PORT0
LOAM_SLURM_MYSQL_PORT=$MYSQL_PORT
LOAM_SLURM_DB=$DB
LOAM_SLURM_DB_USER=$DB_USER
LOAM_SLURM_USER=$JOB_USER
LOAM_SLURM_IMAGE_SOURCE=$IMAGE_SOURCE
KNOBS

# --- users, and can they reach the run dir? ------------------------------------------------------
# Jobs run as JOB_USER (the user named in the JWT), so it must be a real Unix user;
# slurmrestd runs as its own system user.
for u in "$JOB_USER" "$REST_DAEMON_USER"; do
  id "$u" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$u"
done
# munged, slurmrestd and the jobs run as these users, each in the run dir: a folder above it they
# cannot search fails much later, in a daemon's log (munged: "Failed to check logfile").
unreachable() {  # unreachable USER: the first folder from / down to $R that USER cannot search
  local d=/ part parts
  IFS=/ read -ra parts <<<"${R#/}"
  for part in "${parts[@]}"; do
    runuser -u "$1" -- test -x "$d" || { echo "$d"; return 0; }
    d=${d%/}/$part
  done
  runuser -u "$1" -- test -x "$d" || { echo "$d"; return 0; }
  return 1
}
for u in munge "$REST_DAEMON_USER" "$JOB_USER"; do
  if d=$(unreachable "$u"); then
    echo "deploy/slurm/start.sh: user $u cannot reach the run dir $R: $d is not searchable by it" \
      "(mode $(stat -c %a "$d")); use a LOAM_SLURM_ROOT outside it, or chmod o+x $d" >&2
    exit 1
  fi
done

# --- already up? ---------------------------------------------------------------------------------
all_alive() {
  local n
  alive munged "$R/munge/munged.pid" && alive slurmdbd "$R/pids/slurmdbd.pid" \
    && alive slurmctld "$R/pids/slurmctld.pid" && alive slurmrestd "$R/pids/slurmrestd.pid" || return 1
  for n in $(seq 1 "$NODES"); do alive slurmd "$R/pids/slurmd-gpu-node$n.pid" || return 1; done
}
if all_alive && [ -s "$R/env" ] && scontrol ping 2>/dev/null | grep -q UP; then
  echo "Slurm test cluster already up under $R (env: $R/env)"
  exit 0
fi
# Some daemons alive (a restart, or a run that died half-way): they are kept, with their jobs,
# and only the others are started below. Each `alive` check stands before its daemon's start.
rm -f "$R/env"  # written again only once the cluster answers
# A port taken by someone else would make a daemon exit with only a line in its log.
ports=()
alive slurmrestd "$R/pids/slurmrestd.pid" || ports+=("$REST_PORT")
alive slurmctld "$R/pids/slurmctld.pid" || ports+=("$CTLD_PORT")
alive slurmdbd "$R/pids/slurmdbd.pid" || ports+=("$DBD_PORT")
for n in $(seq 1 "$NODES"); do
  alive slurmd "$R/pids/slurmd-gpu-node$n.pid" || ports+=($((SLURMD_PORT0 + n)))
done
for p in "${ports[@]}"; do
  if port_busy "$p"; then
    echo "deploy/slurm/start.sh: port $p on 127.0.0.1 is already in use" >&2; exit 1
  fi
done

# --- directories ---------------------------------------------------------------------------------
mkdir -p "$R"/{etc,state,log,dev,munge,pids,spool,jobs,bin}
chmod 755 "$R" "$R/etc"  # the job user and slurmrestd read slurm.conf and reach jobs/
chmod 700 "$R/state"     # the JWT key and the DB password live here
# Job scripts run with jobs/ as their working dir and write their output there: each
# organization's in its own folder (made by the driver, mode 2750 in this folder's group), so
# this one is only crossed, not listed, by the tenants' users.
chown "$JOB_USER:" "$R/jobs"
chmod 711 "$R/jobs"
for n in $(seq 1 "$NODES"); do mkdir -p "$R/spool/gpu-node$n"; done
# Fake GPUs: character devices with NVIDIA's major number; Slurm only needs the files to exist
# (they are never opened here) to hand out indices and set CUDA_VISIBLE_DEVICES.
for i in $(seq 0 $((GPUS - 1))); do
  [ -e "$R/dev/nvidia$i" ] || mknod "$R/dev/nvidia$i" c 195 "$i"
done
# HS256 key shared by slurmctld/slurmdbd (to check tokens) and Loam (to mint them).
[ -s "$R/state/jwt_hs256.key" ] || head -c 32 /dev/urandom >"$R/state/jwt_hs256.key"
chmod 600 "$R/state/jwt_hs256.key"
[ -s "$R/state/db.pass" ] || head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$R/state/db.pass"
chmod 600 "$R/state/db.pass"

# --- munge: own daemon, key and socket -----------------------------------------------------------
# munged insists that its key is owned by it and that no one else can write its directories.
[ -s "$R/munge/munge.key" ] || head -c 1024 /dev/urandom >"$R/munge/munge.key"
chown -R munge:munge "$R/munge"
chmod 400 "$R/munge/munge.key"
chmod 711 "$R/munge"  # other users (slurmrestd, job steps) must reach the socket
if alive munged "$R/munge/munged.pid"; then
  stamp "munged already up"
else
  rm -f "$R/munge/munge.sock"*
  runuser -u munge -- /usr/sbin/munged --socket="$R/munge/munge.sock" --key-file="$R/munge/munge.key" \
    --pid-file="$R/munge/munged.pid" --log-file="$R/munge/munged.log" --seed-file="$R/munge/munged.seed" \
    </dev/null
  stamp "munged up"
fi

# --- configuration -------------------------------------------------------------------------------
cat >"$R/etc/slurm.conf" <<CONF
# Generated by deploy/slurm/start.sh; edit that script instead.
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
# Everything runs as root on this machine; jobs still run as the submitting user.
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$R/munge/munge.sock
CredType=cred/munge
# slurmrestd's tokens: HS256 JWTs checked against this key.
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$R/state/jwt_hs256.key
StateSaveLocation=$R/state
SlurmdSpoolDir=$R/spool/%n
SlurmctldPidFile=$R/pids/slurmctld.pid
SlurmdPidFile=$R/pids/slurmd-%n.pid
SlurmctldLogFile=$R/log/slurmctld.log
SlurmdLogFile=$R/log/slurmd-%n.log
# Our own (empty) SPANK config: the default would read /etc/slurm/plugstack.conf.
PlugStackConfig=$R/etc/plugstack.conf
# The nodes are fake: trust slurm.conf's CPUs/memory, not this machine's.
SlurmdParameters=config_overrides
# No cgroups in this container: track processes by parent PID, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
GresTypes=gpu
SchedulerType=sched/backfill
# Preemption by QOS: a job of the "normal" QOS may requeue "preemptible" ones (Loam submits its
# preemptible tasks in that QOS; Loam's queue pass decides and cancels them itself, this is what
# holds for a job submitted around it, or one that lands before the cancel).
PreemptType=preempt/qos
PreemptMode=REQUEUE
# Fair share between accounts (sacctmgr ... fairshare=N, set from the park's policy).
PriorityType=priority/multifactor
PriorityWeightFairshare=10000
MpiDefault=none
# A node that was down comes back by itself once its slurmd registers again.
ReturnToService=2
# Keep finished jobs visible to GET /job/{id} for 10 minutes.
MinJobAge=600
# A cancelled job gets SIGKILL 2 s after SIGTERM (default 30 s), to keep tests fast.
KillWait=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# For slurmdbd connections Slurm reads the munge socket from here, not from AuthInfo.
AccountingStoragePass=$R/munge/munge.sock
AccountingStorageTRES=gres/gpu
# Only users with an association run jobs, within its limits (an organization's GrpTRES is its
# accelerator quota); a user sees only its own jobs (JOB_USER, an operator, sees them all).
AccountingStorageEnforce=associations,limits
PrivateData=jobs,usage,users,accounts
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
# Feature=<own name>: REST v0.0.38 rejects "required_nodes", so a job is pinned to a node with
# "constraints": "gpu-nodeN" instead.
for n in $(seq 1 "$NODES"); do
  echo "NodeName=gpu-node$n NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$((SLURMD_PORT0 + n))" \
    "CPUs=$NODE_CPUS RealMemory=$NODE_MEM_MB Gres=gpu:a100:$GPUS Feature=gpu-node$n,a100 State=UNKNOWN"
done >>"$R/etc/slurm.conf"
cat >"$R/etc/gres.conf" <<CONF
# No NVML here: list the fake device files instead of detecting GPUs.
AutoDetect=off
NodeName=gpu-node[1-$NODES] Name=gpu Type=a100 File=$R/dev/nvidia[0-$((GPUS - 1))]
CONF
: >"$R/etc/plugstack.conf"
# Jobs in their image: slurmstepd writes the step's config.json into its spool folder (%b, the
# job user's) from the bundle given as --container, then runs these as the job's user; runc's
# state lives in that folder, so no tenant can reach another's containers.
install -m 755 "$here/oci-run" "$R/bin/oci-run"
cat >"$R/etc/oci.conf" <<CONF
# Generated by deploy/slurm/start.sh; edit that script instead.
RunTimeRun="$R/bin/oci-run %b %n.%u.%j.%s.%t %n"
RunTimeQuery="runc --root %b/runc state %n.%u.%j.%s.%t"
RunTimeKill="runc --root %b/runc kill %n.%u.%j.%s.%t KILL"
RunTimeDelete="runc --root %b/runc delete --force %n.%u.%j.%s.%t"
CONF
bash "$here/bundles.sh" "$R/images" "$IMAGE_SOURCE"
chmod 644 "$R"/etc/*.conf
cat >"$R/etc/slurmdbd.conf" <<CONF
# Generated by deploy/slurm/start.sh; edit that script instead.
AuthType=auth/munge
AuthInfo=socket=$R/munge/munge.sock
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$R/state/jwt_hs256.key
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$R/log/slurmdbd.log
PidFile=$R/pids/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MYSQL_PORT
StorageUser=$DB_USER
StoragePass=$(cat "$R/state/db.pass")
StorageLoc=$DB
CONF
chmod 600 "$R/etc/slurmdbd.conf"  # slurmdbd refuses a config others can read (it has a password)

# --- MariaDB: reuse the one on 127.0.0.1:$MYSQL_PORT, else start a private one ------------------
sql() { mariadb -h 127.0.0.1 -P "$MYSQL_PORT" -u root -e "$1"; }
if alive slurmdbd "$R/pids/slurmdbd.pid"; then
  stamp "slurmdbd already up: its database is left as it is"
else
  if alive mariadbd "$R/pids/mariadb.pid"; then
    stamp "private MariaDB already up on 127.0.0.1:$MYSQL_PORT"
  elif mariadb-admin -h 127.0.0.1 -P "$MYSQL_PORT" -u root ping >/dev/null 2>&1; then
    # mariadb-admin ping succeeds even when the login is refused: check that root can log in.
    if ! sql "SELECT 1" >/dev/null 2>&1; then
      echo "deploy/slurm/start.sh: MariaDB on 127.0.0.1:$MYSQL_PORT does not let root in without" \
        "a password; set LOAM_SLURM_MYSQL_PORT to a free port to use a private one" >&2
      exit 1
    fi
    stamp "reusing MariaDB on 127.0.0.1:$MYSQL_PORT"
  else
    mkdir -p "$R/mysql"
    chown mysql:mysql "$R/mysql"
    [ -d "$R/mysql/mysql" ] || mariadb-install-db --no-defaults --user=mysql --datadir="$R/mysql" \
      --auth-root-authentication-method=normal >"$R/log/mariadb-install.log" 2>&1
    # --no-defaults: ignore /etc/mysql (the system server's config and socket).
    setpriv --reuid=mysql --regid=mysql --init-groups /usr/sbin/mariadbd --no-defaults \
      --datadir="$R/mysql" --bind-address=127.0.0.1 --port="$MYSQL_PORT" \
      --socket="$R/mysql/mysqld.sock" --pid-file="$R/mysql/mariadbd.pid" --skip-log-bin \
      --innodb-buffer-pool-size=64M --innodb-log-file-size=16M \
      </dev/null >"$R/log/mariadb.log" 2>&1 &
    echo $! >"$R/pids/mariadb.pid"
    wait_for 60 "MariaDB on 127.0.0.1:$MYSQL_PORT" sql "SELECT 1"
    stamp "private MariaDB up on 127.0.0.1:$MYSQL_PORT"
  fi
  # The DB user is created with this run dir's password. One named by the knob that exists with
  # another password belongs to another cluster on this MariaDB, whose slurmdbd would lose it:
  # refused, never altered. The default user is named after this run dir, so one with another
  # password was an earlier cluster's in this same folder, since removed: it is this one's now.
  pass=$(cat "$R/state/db.pass")
  sql "CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$pass';
    CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$pass';"
  db_login() { MYSQL_PWD=$pass mariadb -h 127.0.0.1 -P "$MYSQL_PORT" -u "$DB_USER" -e "SELECT 1" >/dev/null 2>&1; }
  if ! db_login && [ "$DB_USER" = "loam_$run_key" ]; then
    sql "ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$pass';
      ALTER USER '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$pass';"
  fi
  if ! db_login; then
    echo "deploy/slurm/start.sh: the MariaDB user $DB_USER exists with another password than" \
      "$R/state/db.pass (another cluster's user?); set LOAM_SLURM_DB_USER to a user of this" \
      "cluster's own (and LOAM_SLURM_DB to its own database)" >&2
    exit 1
  fi
  # The accounting DB belongs to this run dir: with no saved controller state (a new run dir),
  # job ids restart at 1, so old accounting rows would be mistaken for new jobs; start it afresh.
  [ -e "$R/state/job_state" ] || sql "DROP DATABASE IF EXISTS \`$DB\`"
  sql "CREATE DATABASE IF NOT EXISTS \`$DB\`;
    GRANT ALL ON \`$DB\`.* TO '$DB_USER'@'localhost'; GRANT ALL ON \`$DB\`.* TO '$DB_USER'@'127.0.0.1';"
  slurmdbd </dev/null
fi

# --- slurmdbd (started above with its database), then the controller and the nodes ----------------
wait_for 60 slurmdbd sacctmgr -n show cluster
# slurmctld must find its cluster in the accounting DB.
sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null
# The portal's own user: an operator (it reads every organization's jobs) with an account for
# the tasks of a backend that runs every tenant as it ("tenants": "shared").
sacctmgr -n -P show account loam format=account | grep -qx loam \
  || sacctmgr -i add account loam description=portal organization=loam >/dev/null
sacctmgr -n -P show user "$JOB_USER" format=user | grep -qx "$JOB_USER" \
  || sacctmgr -i add user "$JOB_USER" account=loam defaultaccount=loam adminlevel=operator >/dev/null
# The QOS a preemptible task's job runs in; "normal" jobs may requeue its jobs.
sacctmgr -n -P show qos preemptible format=name | grep -qx preemptible \
  || sacctmgr -i add qos preemptible preemptmode=requeue >/dev/null
sacctmgr -n -P show qos normal format=preempt | grep -qx preemptible \
  || sacctmgr -i modify qos normal set preempt=preemptible >/dev/null
stamp "slurmdbd up (database $DB)"

alive slurmctld "$R/pids/slurmctld.pid" || slurmctld </dev/null
ctld_up() { scontrol ping | grep -q UP; }
wait_for 30 slurmctld ctld_up
stamp "slurmctld up on port $CTLD_PORT"
for n in $(seq 1 "$NODES"); do
  alive slurmd "$R/pids/slurmd-gpu-node$n.pid" || slurmd -N "gpu-node$n" </dev/null
done
# Ready when every node answers; jobs recovered from saved state may keep one mixed/allocated.
nodes_up() {
  local states; states=$(sinfo -h -N -o %T | sort -u)
  [ -n "$states" ] && ! grep -qvxE 'idle|mixed|allocated|completing' <<<"$states"
}
wait_for 60 "the $NODES nodes" nodes_up
stamp "$NODES slurmd up ($(sinfo -h -o '%N %T' | tr '\n' ' '))"

# --- slurmrestd ----------------------------------------------------------------------------------
# SLURM_JWT=daemon: slurmrestd passes each request's token on instead of using munge itself.
# It does not daemonize: run it in the background and record its PID.
if ! alive slurmrestd "$R/pids/slurmrestd.pid"; then
  SLURM_JWT=daemon setpriv --reuid="$REST_DAEMON_USER" --regid="$REST_DAEMON_USER" --init-groups \
    /usr/sbin/slurmrestd -a rest_auth/jwt -s openapi/v0.0.38,openapi/dbv0.0.38 "127.0.0.1:$REST_PORT" \
    </dev/null >>"$R/log/slurmrestd.log" 2>&1 &
  echo $! >"$R/pids/slurmrestd.pid"
fi
# Ready only when a real token for JOB_USER works (proves the JWT setup end to end).
token=$(scontrol token username="$JOB_USER" lifespan=60 | sed -n 's/^SLURM_JWT=//p')
rest_ok() {
  curl -sf -o /dev/null -H "X-SLURM-USER-NAME: $JOB_USER" -H "X-SLURM-USER-TOKEN: $token" \
    "http://127.0.0.1:$REST_PORT/slurm/v0.0.38/ping"
}
wait_for 30 "slurmrestd on 127.0.0.1:$REST_PORT" rest_ok
stamp "slurmrestd up on 127.0.0.1:$REST_PORT"

cat >"$R/env.tmp" <<ENV
LOAM_SLURM_URL=http://127.0.0.1:$REST_PORT
LOAM_SLURM_USER=$JOB_USER
LOAM_SLURM_JWT_KEY=$R/state/jwt_hs256.key
LOAM_SLURM_JOBS_DIR=$R/jobs
LOAM_SLURM_IMAGES_DIR=$R/images
SLURM_CONF=$SLURM_CONF
ENV
mv "$R/env.tmp" "$R/env"
echo "Slurm test cluster up in $(elapsed) under $R (env: $R/env)"
