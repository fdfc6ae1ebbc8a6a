"""Slurm's own commands, for what REST v0.0.38 has no endpoint for (`scontrol` to drain or
resume a node, `sacctmgr` for accounts), with the cluster's slurm.conf."""

import os
import shlex
import subprocess

from apps.orchestration.backends.base import BackendError


def slurm_command(program: str, *args: str, slurm_conf: str | None) -> str:
    """What `program args…` printed; a failure to run it is transient, its refusal is not."""
    env = {**os.environ, **({"SLURM_CONF": slurm_conf} if slurm_conf else {})}
    what = shlex.join([program, *args])
    try:
        done = subprocess.run([program, *args], env=env, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(f"{what} failed: {exc}", transient=True) from exc
    if done.returncode != 0:
        raise BackendError(f"{what}: {done.stderr.strip()}")
    return done.stdout
