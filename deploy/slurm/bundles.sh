#!/usr/bin/env bash
# Makes an OCI bundle of each host image built on this machine (`loam-agent image build`, into
# SOURCE, default /var/cache/loam-agent/images), so Slurm jobs run in the same images as agent
# hosts (issue 32): TARGET/<name>/ holds the runtime's config.json, `rootfs` (a link to the
# built image's root file system, shared read-only by every job, never copied) and the image's
# image.json (its name and digest, which the Slurm driver reports as the images its pool runs).
# An image still being built (no image.json yet) is left out; a bundle whose image is gone is
# removed. Run again after building an image; start.sh runs it on every start.
#
# Usage: deploy/slurm/bundles.sh TARGET [SOURCE]
set -euo pipefail
target=${1:?usage: bundles.sh TARGET [SOURCE]}
source=${2:-/var/cache/loam-agent/images}
mkdir -p "$target"
chmod 755 "$target"

# Rootless: a user namespace (oci-run maps the job's own user into it), its own mount, PID and
# IPC namespaces (killing the PID namespace's first process ends every process of the job: how
# oci-run ends a cancelled one); the node's network and host name, so a multi-node job's ranks
# meet at MASTER_ADDR as on the bare node. The image stays read-only: /tmp is the job's scratch space.
# Slurm replaces process.args and adds the job's environment and its own mounts. HOME is the
# scratch space too (the image's /root is not the job's user's), unless the job sets its own.
config='{
  "ociVersion": "1.0.2-dev",
  "process": {
    "terminal": false,
    "user": {"uid": 0, "gid": 0},
    "args": ["/bin/sh"],
    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp"],
    "cwd": "/",
    "noNewPrivileges": true
  },
  "root": {"path": "rootfs", "readonly": true},
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
     "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
     "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
     "options": ["nosuid", "noexec", "nodev", "mode=1777"]},
    {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
     "options": ["nosuid", "noexec", "nodev"]},
    {"destination": "/sys", "type": "none", "source": "/sys",
     "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]},
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
     "options": ["nosuid", "nodev", "mode=1777"]},
    {"destination": "/etc/resolv.conf", "type": "none", "source": "/etc/resolv.conf",
     "options": ["bind", "ro"]}
  ],
  "linux": {
    "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}, {"type": "user"}],
    "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
      "/proc/timer_list", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
    "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
  }
}'

for built in "$source"/*/; do
  name=$(basename "$built")
  [ -s "$built/image.json" ] && [ -d "$built/rootfs" ] || continue
  bundle=$target/$name
  mkdir -p "$bundle"
  printf '%s\n' "$config" >"$bundle/config.json.tmp"
  mv "$bundle/config.json.tmp" "$bundle/config.json"
  cp "$built/image.json" "$bundle/image.json.tmp"
  mv "$bundle/image.json.tmp" "$bundle/image.json"
  ln -sfn "${built%/}/rootfs" "$bundle/rootfs"
  chmod 755 "$bundle"
  chmod 644 "$bundle/config.json" "$bundle/image.json"
done
for bundle in "$target"/*/; do
  [ -d "$bundle" ] || continue
  name=$(basename "$bundle")
  [ -s "$source/$name/image.json" ] || rm -rf "${bundle%/}"
done
