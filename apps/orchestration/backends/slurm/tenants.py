"""An organization on a Slurm cluster, the way HPC centres run one: its own Slurm account, a
Unix user its jobs run as (one per organization, not per member: the portal, not Slurm, knows
who in an organization may do what, and a member's files are the organization's), and a jobs
directory only that user (and the portal's group) can enter.

Slurm then keeps tenants apart by itself: a job runs with its organization's uid, so it cannot
read or write another's output; `PrivateData=jobs` hides other accounts' jobs, and Slurm lets a
user cancel only its own; the account's `GrpTRES=gres/gpu=N` is the organization's accelerator
quota, so even a job submitted around the portal cannot pass it.

Made on the organization's first task (`ensure`), checked again on each: one `sacctmgr` call
when nothing changed. Needs what an HPC centre's provisioning needs: Slurm admin rights for
`sacctmgr` (the portal's worker runs as root or SlurmUser on the head node) and, with
`create_users`, root to add the Unix user (else the site's directory must already have it).
"""

import grp
import os
import pwd
import re
import subprocess
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from apps.orchestration.backends.base import BackendError
from apps.orchestration.backends.slurm.commands import slurm_command

PREEMPTIBLE_QOS = "preemptible"  # made by the cluster's setup (deploy/slurm/start.sh)
# A Slurm account name and a Unix user name at once: lower case, digits and "_", short.
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,31}$")


@dataclass(frozen=True)
class SlurmTenant:
    """One organization's identity on the cluster: its account and Unix user share `name`."""

    name: str
    jobs_dir: str


def account_name(prefix: str, organization_id: int) -> str:
    """The organization's account and Unix user name."""
    name = f"{prefix}{organization_id}"
    if not _NAME.match(name):
        raise BackendError(f"Slurm: {name!r} is not a valid account and user name")
    return name


def ensure(
    tenant: SlurmTenant,
    *,
    gpu_limit: int | None,
    create_users: bool,
    slurm_conf: str | None,
    fair_share: int = 1,
) -> None:
    """The tenant's Unix user, jobs directory and Slurm account exist, with `gpu_limit` (None:
    no limit) as the account's GrpTRES and `fair_share` as its fairshare; the account may run
    jobs in the preemptible QOS."""
    _unix_user(tenant.name, create=create_users)
    _jobs_dir(tenant)
    sacctmgr = _sacctmgr(slurm_conf)
    associations = _associations(sacctmgr, tenant)
    adds = {
        "": [
            "account",
            tenant.name,
            "description=loam organization",
            "organization=loam",
            f"fairshare={fair_share}",
            f"qos=normal,{PREEMPTIBLE_QOS}",
        ],
        tenant.name: [
            "user",
            tenant.name,
            f"account={tenant.name}",
            f"defaultaccount={tenant.name}",
        ],
    }
    for user, add in adds.items():  # the account's own association, then its user's
        if user not in associations:
            try:
                sacctmgr("add", *add)
            except BackendError:
                # Another worker submitting the organization's first tasks made it meanwhile.
                associations = _associations(sacctmgr, tenant)
                if user not in associations:
                    raise
    own = associations.get("", _Association("", ""))
    _limit(sacctmgr, tenant, own.grptres, gpu_limit)
    _share(sacctmgr, tenant, own.fairshare, fair_share)


@dataclass(frozen=True)
class _Association:
    grptres: str
    fairshare: str


def _associations(sacctmgr, tenant: SlurmTenant) -> dict[str, _Association]:
    """{user ("" for the account itself): its GrpTRES and fairshare} of the tenant's account."""
    rows = sacctmgr(
        "show",
        "assoc",
        "where",
        f"account={tenant.name}",
        "format=user,grptres,fairshare",
        "-n",
        "-P",
    )
    associations = {}
    for line in rows.splitlines():
        parts = line.split("|")
        if len(parts) >= 3:
            associations[parts[0]] = _Association(grptres=parts[1], fairshare=parts[2])
    return associations


def set_fair_share(tenant: SlurmTenant, *, shares: int, slurm_conf: str | None) -> None:
    """The account's fairshare is `shares` now, if the account exists (one made later gets it
    then)."""
    sacctmgr = _sacctmgr(slurm_conf)
    associations = _associations(sacctmgr, tenant)
    if "" in associations:
        _share(sacctmgr, tenant, associations[""].fairshare, shares)


def _share(sacctmgr, tenant: SlurmTenant, current: str, shares: int) -> None:
    if current != str(shares):
        sacctmgr("modify", "account", "where", f"name={tenant.name}", "set", f"fairshare={shares}")


def set_limit(tenant: SlurmTenant, *, gpu_limit: int | None, slurm_conf: str | None) -> None:
    """The account's GrpTRES is `gpu_limit` now (None: no limit), if the account exists (one
    made later gets the limit then)."""
    sacctmgr = _sacctmgr(slurm_conf)
    associations = _associations(sacctmgr, tenant)
    if "" in associations:
        _limit(sacctmgr, tenant, associations[""].grptres, gpu_limit)


def _limit(sacctmgr, tenant: SlurmTenant, current: str, gpu_limit: int | None) -> None:
    if current != (f"gres/gpu={gpu_limit}" if gpu_limit is not None else ""):
        sacctmgr(
            "modify",
            "account",
            "where",
            f"name={tenant.name}",
            "set",
            f"grptres=gres/gpu={gpu_limit if gpu_limit is not None else -1}",
        )


def _unix_user(name: str, *, create: bool) -> None:
    try:
        pwd.getpwnam(name)
        return
    except KeyError:
        if not create:
            raise BackendError(
                f"Slurm: the Unix user {name} does not exist on the cluster; add it to the "
                "site's directory, or let the portal create it (create_users)"
            ) from None
    done = subprocess.run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        capture_output=True,
        text=True,
    )
    # Another worker may have made it meanwhile (exit 9: the name is taken).
    if done.returncode not in (0, 9):
        raise BackendError(f"Slurm: cannot add the Unix user {name}: {done.stderr.strip()}")


def _jobs_dir(tenant: SlurmTenant) -> None:
    """Owned by the tenant's user, in the jobs root's group (the portal's, which reads the
    output), mode 2750: other tenants cannot enter it, and what the jobs write stays readable
    by the portal (the set-group-id bit gives new files the directory's group)."""
    path = Path(tenant.jobs_dir)
    user = pwd.getpwnam(tenant.name)
    group = path.parent.stat().st_gid
    try:
        path.mkdir(mode=0o750, exist_ok=True)
        if (path.stat().st_uid, path.stat().st_gid) != (user.pw_uid, group):
            os.chown(path, user.pw_uid, group)
        path.chmod(0o2750)
    except OSError as exc:
        raise BackendError(
            f"Slurm: cannot prepare {path} for {tenant.name} "
            f"(group {grp.getgrgid(group).gr_name}): {exc}"
        ) from exc


def _sacctmgr(slurm_conf: str | None):
    return partial(slurm_command, "sacctmgr", "-i", slurm_conf=slurm_conf)
