"""The `slurm` driver: a Slurm cluster's GPU nodes as pools, training tasks as Slurm jobs.

It talks to slurmrestd (OpenAPI v0.0.38, `client.py`). Capabilities: inventory and batch; a
Slurm cluster runs jobs, not GPU cloud hosts, so host orders are refused before anything is
reserved.

Config (a Backend row's JSON):
    url            slurmrestd's base URL, e.g. "http://127.0.0.1:6820"            (required)
    user           the Unix user jobs run as, named in X-SLURM-USER-NAME          (required)
    key_file       path of the cluster's HS256 JWT key (`jwt_key` in slurm.conf): the driver
                   mints its own short-lived tokens; or
    token          a ready token (`scontrol token`), for a key the portal may not read
    jobs_dir       a directory the jobs run in and write their output to, which the portal
                   can read (the same path on the portal's machine: a shared filesystem)
                                                                                  (required)
    partition      the partition to submit to (default: the cluster's default)
    pool_prefix    pools are named "<pool_prefix><gpu model>" (default "slurm-")
    gpu_models     {GRES type: accelerator model slug}, e.g. {"a100": "a100-sxm-80gb"};
                   a GRES type not mapped is passed on as is, and the catalog must know it
                   (an unknown model is reported at registration, never guessed)
    slurm_conf     path of slurm.conf, for `scontrol` (node drain and resume: REST v0.0.38 has
                   no endpoint for them) and `sacctmgr`
    timeout_s      seconds per REST call (default 30)
    tenants        "accounts" (default): each organization's tasks run under its own Slurm
                   account and Unix user, in its own directory under jobs_dir (`tenants.py`),
                   submitted and cancelled with a token of that user (needs key_file), while
                   `user` (a Slurm operator: it sees every job) reads their state; "shared":
                   every task runs as `user` in jobs_dir (one tenant only: nothing keeps them
                   apart)
    account_prefix an organization's account and Unix user are "<account_prefix><its id>"
                   (default "loam_o")
    create_users   add a missing Unix user with useradd (default true: the worker runs as root
                   on the head node); false: the site's directory provides them
    images_dir     OCI bundles of the images tasks run in, a folder per image named by its code,
                   each with the runtime's config.json, its rootfs and the agent's image.json
                   (name, digest): deploy/slurm/bundles.sh makes them from the host images built
                   by `loam-agent image build`; the same path on every node and here. Unset:
                   the pools run no images, and a task's command runs on the bare node

Jobs in their image (issue 32): where `images_dir` is set, the pools report the images it holds
(`ReportedPool.images`, {code: digest}: the portal refuses a task of another image at submit and
never places one there), and the batch script, on the node as the organization's user, starts
the command in the image with Slurm's own `srun --container=<bundle>` (oci.conf: rootless runc
as that same user; see deploy/slurm/oci-run), once on each of the job's nodes, in a login shell
(the image's PATH, its /opt/venv first) with NODE_RANK set. The image is read-only; /tmp is the
job's scratch space and its output goes where the bare node's did. `srun` is not in the images:
a multi-node command is already running on every node, torchrun-style (`torchrun
--nnodes=$NNODES --node_rank=$NODE_RANK --master_addr=$MASTER_ADDR …`).

A job is pinned to the node Loam's scheduler chose with `constraints` naming the node: v0.0.38
rejects `required_nodes`, so every node carries a feature named after itself. A multi-node
(gang) task is one job on all its nodes (`--nodes=N --ntasks-per-node=1`, N × M GPUs), pinned
with the constraint "node1|node2|…": every node must carry one of those features, so Slurm can
only take the nodes Loam chose, and starts the job on all of them or waits.

The job sees its peers the way torchrun wants them (`RENDEZVOUS`): Slurm's SLURM_JOB_NODELIST
and SLURM_JOB_NUM_NODES, and MASTER_ADDR (the batch script runs on the job's first node: its
host) with MASTER_PORT (from the job id, so two jobs sharing a first node differ) and NNODES.
The command runs once, on the first node; `srun torchrun --nnodes=$NNODES
--rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT train.py` starts it on each.
"""

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from apps.orchestration.backends.base import (
    TASK_CANCELLED,
    TASK_FAILED,
    TASK_PENDING,
    TASK_RUNNING,
    TASK_SUCCEEDED,
    BackendError,
    Capability,
    NodeCapacity,
    NodeTelemetry,
    ReportedPool,
    TaskSpec,
    TaskStatus,
)
from apps.orchestration.backends.slurm import tenants
from apps.orchestration.backends.slurm.client import (
    JobRequest,
    SlurmClient,
    SlurmError,
    SlurmJob,
    SlurmNode,
    endpoint_of,
)
from apps.orchestration.backends.slurm.commands import slurm_command

MILLI = 1000
# The rendezvous a job's nodes meet at, set before its command (see the module docstring).
RENDEZVOUS = (
    "export MASTER_ADDR=$(hostname)\n"
    "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n"
    "export NNODES=${SLURM_JOB_NUM_NODES:-1}\n"
)
# Starts the command in its image on each of the job's nodes (see the module docstring), with
# the job's nodes in order, from which deploy/slurm/oci-run gives each its SLURM_NODEID.
IN_IMAGE = (
    'export LOAM_NODES="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)"\n'
    "exec srun --container={bundle} --nodes=$SLURM_JOB_NUM_NODES --ntasks-per-node=1 "
    "--kill-on-bad-exit=1 /bin/bash -lc {command}\n"
)
LOG_LIMIT_BYTES = 256 * 1024  # the tail of a job's output the portal keeps
# Slurm states that end a job without it having exited by itself (or that it failed).
_FAILED = {"FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
_UNHEALTHY = {"DOWN", "FAIL", "FAILING", "UNKNOWN", "NOT_RESPONDING", "FUTURE"}


class SlurmDriver:
    name = "slurm"
    is_simulator = False
    capabilities = frozenset({Capability.INVENTORY, Capability.BATCH, Capability.GANG})
    config_example = {
        "url": "http://slurm-head:6820",
        "user": "loam",
        "key_file": "/etc/loam/slurm_jwt_hs256.key",
        "jobs_dir": "/shared/loam/jobs",
        "gpu_models": {"a100": "a100-sxm-80gb"},
    }

    @staticmethod
    def endpoint(config: dict) -> str | None:
        """slurmrestd's URL, normalized: a cluster is registered once (issue 32)."""
        return endpoint_of(config["url"]) if config.get("url") else None

    def __init__(self, config: dict):
        config = config or {}
        missing = [key for key in ("url", "user", "jobs_dir") if not config.get(key)]
        if not config.get("key_file") and not config.get("token"):
            missing.append("key_file or token")
        if missing:
            raise BackendError(f"Slurm config is missing {', '.join(missing)}")
        self.tenants = config.get("tenants", "accounts")
        if self.tenants not in ("accounts", "shared"):
            raise BackendError('Slurm config "tenants" is "accounts" or "shared"')
        if self.tenants == "accounts" and not config.get("key_file"):
            raise BackendError(
                "Slurm config needs key_file to run each organization's jobs as its own user "
                '(a ready token names one user only), or "tenants": "shared"'
            )
        self.config = config
        self.jobs_dir = str(config["jobs_dir"]).rstrip("/")
        self.gpu_models: Mapping[str, str] = config.get("gpu_models") or {}
        self.pool_prefix = str(config.get("pool_prefix", "slurm-"))
        images_dir = config.get("images_dir")
        self.images_dir = str(images_dir).rstrip("/") if images_dir else None

    # --- the client ------------------------------------------------------------------------------

    def _client(self, user: str | None = None) -> SlurmClient:
        """A client speaking as `user` (default: the configured operator user)."""
        key = None
        if self.config.get("key_file"):
            try:
                key = Path(self.config["key_file"]).read_bytes()
            except OSError as exc:
                raise BackendError(f"cannot read the Slurm JWT key file: {exc}") from exc
        return SlurmClient(
            self.config["url"],
            user or self.config["user"],
            key=key,
            token=None if key else self.config["token"],
            timeout=float(self.config.get("timeout_s", 30)),
        )

    def _call(self, method: str, *args, user: str | None = None):
        """One client call, Slurm's errors as BackendError (transient ones retried)."""
        try:
            with self._client(user) as client:
                return getattr(client, method)(*args)
        except SlurmError as exc:
            raise BackendError(f"Slurm: {exc}", transient=exc.transient) from exc

    # --- inventory -------------------------------------------------------------------------------

    def _model(self, gres_type: str) -> str:
        return self.gpu_models.get(gres_type, gres_type)

    def capacity(self) -> list[ReportedPool]:
        """A pool per GPU model; a node's GPUs of one model are its accelerators. Nodes without
        GPUs are left out (Loam schedules GPU work)."""
        by_model: dict[str, list[NodeCapacity]] = {}
        images = self.images()
        for node in self._call("nodes"):
            for gres_type, count in node.gpus.items():
                by_model.setdefault(gres_type, []).append(
                    NodeCapacity(
                        hostname=node.name,
                        accelerators=count,
                        vcpu=node.cpus,
                        ram_gb=node.memory_mb // 1024,
                        healthy=_healthy(node),
                        telemetry={"slurm_state": node.state, "drained": node.drained},
                    )
                )
        return [
            ReportedPool(
                name=f"{self.pool_prefix}{gres_type}",
                accelerator_model=self._model(gres_type),
                nodes=tuple(nodes),
                images=images,
            )
            for gres_type, nodes in sorted(by_model.items())
        ]

    def images(self) -> dict[str, str] | None:
        """{image code: digest} of the bundles in `images_dir` (None where it is not set)."""
        if self.images_dir is None:
            return None
        try:
            folders = sorted(os.scandir(self.images_dir), key=lambda entry: entry.name)
        except OSError as exc:
            raise BackendError(f"cannot list the Slurm images in {self.images_dir}: {exc}") from exc
        images = {}
        for folder in folders:
            digest = self._bundle_digest(folder.path)
            if digest:
                images[folder.name] = digest
        return images

    @staticmethod
    def _bundle_digest(bundle: str) -> str | None:
        """The digest of the image a bundle runs; None where it is no complete bundle."""
        if not os.path.isfile(f"{bundle}/config.json"):
            return None
        try:
            with open(f"{bundle}/image.json") as built:
                digest = json.load(built).get("digest")
        except (OSError, ValueError, AttributeError):
            return None
        return digest if isinstance(digest, str) and digest else None

    def telemetry(
        self, hosts: Mapping[str, int], held: Mapping[str, frozenset[int]] | None = None
    ) -> list[NodeTelemetry]:
        """Health from Slurm's node state. Slurm measures no GPU utilization, so no card
        reading is reported (idle detection never calls a Slurm card idle or busy); `held` is
        not needed."""
        return [
            NodeTelemetry(hostname=node.name, healthy=_healthy(node))
            for node in self._call("nodes")
            if node.name in hosts
        ]

    def drain_node(self, hostname: str, reason: str) -> None:
        self._scontrol(
            "update", f"nodename={hostname}", "state=drain", f"reason={reason or 'loam'}"
        )

    def resume_node(self, hostname: str) -> None:
        self._scontrol("update", f"nodename={hostname}", "state=resume")

    def _scontrol(self, *args: str) -> None:
        slurm_command("scontrol", *args, slurm_conf=self.config.get("slurm_conf"))

    # --- batch -----------------------------------------------------------------------------------

    def submit_task(self, spec: TaskSpec) -> str:
        """The job's handle: "<account>/<job id>" for an organization's own account, the job id
        alone where every task runs as the configured user."""
        if spec.accelerator_milli % MILLI:
            raise BackendError(
                "Slurm pools run whole GPUs only: a share of a card cannot be given to a job"
            )
        tenant = self._tenant(spec.organization_id)
        if tenant is not None:
            tenants.ensure(
                tenant,
                gpu_limit=spec.accelerator_limit,
                create_users=bool(self.config.get("create_users", True)),
                slurm_conf=self.config.get("slurm_conf"),
                fair_share=spec.fair_share,
            )
        jobs_dir = self._jobs_dir(tenant.name if tenant else None)
        nodes = spec.node_names
        job = JobRequest(
            script=f"#!/bin/bash\n{RENDEZVOUS}{self._run(spec)}\n",
            working_dir=jobs_dir,
            name=spec.name,
            partition=self.config.get("partition"),
            cpus_per_task=spec.vcpu,
            memory_mb=spec.ram_gb * 1024,
            gpus=spec.accelerator_milli // MILLI,
            nodes=len(nodes),
            time_limit_min=spec.time_limit_min,
            constraints="|".join(nodes),
            standard_output=f"{jobs_dir}/loam-%j.out",
            account=tenant.name if tenant else None,
            # The cluster's "normal" QOS requeues this one's jobs (PreemptMode=REQUEUE): a
            # safety net under the portal's own decision, for jobs submitted around it.
            qos=tenants.PREEMPTIBLE_QOS if spec.preemptible else None,
            environment={
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "LOAM_TASK": spec.name,
                "LOAM_IMAGE": spec.image,
            },
        )
        job_id = self._call("submit", job, user=tenant.name if tenant else None)
        return f"{tenant.name}/{job_id}" if tenant else str(job_id)

    def _run(self, spec: TaskSpec) -> str:
        """The batch script's last line: the command on the bare node, or in its image."""
        if self.images_dir is None:
            return spec.command
        bundle = f"{self.images_dir}/{spec.image}"
        if "/" in spec.image or self._bundle_digest(bundle) is None:
            raise BackendError(
                f"this Slurm cluster has no image {spec.image!r} (no bundle in {self.images_dir})"
            )
        in_image = f"export NODE_RANK=$SLURM_NODEID\n{spec.command}"
        return IN_IMAGE.format(bundle=shlex.quote(bundle), command=shlex.quote(in_image))

    def set_tenant_limit(self, organization_id: int, gpu_limit: int | None) -> None:
        """The organization's accelerator quota changed: its account's GrpTRES follows."""
        tenant = self._tenant(organization_id)
        if tenant is not None:
            tenants.set_limit(tenant, gpu_limit=gpu_limit, slurm_conf=self.config.get("slurm_conf"))

    def set_tenant_fair_share(self, organization_id: int, shares: int) -> None:
        """The park's operator changed the organization's share: its account's fairshare
        follows."""
        tenant = self._tenant(organization_id)
        if tenant is not None:
            tenants.set_fair_share(tenant, shares=shares, slurm_conf=self.config.get("slurm_conf"))

    def _tenant(self, organization_id: int | None) -> tenants.SlurmTenant | None:
        if self.tenants == "shared" or organization_id is None:
            return None
        prefix = str(self.config.get("account_prefix", "loam_o"))
        name = tenants.account_name(prefix, organization_id)
        return tenants.SlurmTenant(name=name, jobs_dir=self._jobs_dir(name))

    def _jobs_dir(self, account: str | None) -> str:
        """Where an account's jobs run and write (its own folder), or, with none, every job
        that runs as `user`."""
        return f"{self.jobs_dir}/{account}" if account else self.jobs_dir

    def task_status(self, handle: str) -> TaskStatus:
        _account, job_id = _parse_handle(handle)
        try:
            job = self._call("job", job_id)
        except BackendError as exc:
            # slurmctld forgets a job MinJobAge after it ends: accounting still has it.
            if exc.transient:
                raise
            job = None
        record = self._call("accounting", job_id) if job is None or job.finished else None
        if job is None and record is None:
            raise BackendError(f"Slurm knows no job {job_id}")
        return _status(job, record)

    def task_logs(self, handle: str) -> str:
        account, job_id = _parse_handle(handle)
        path = f"{self._jobs_dir(account)}/loam-{job_id}.out"
        try:
            with open(path, "rb") as output:
                output.seek(0, os.SEEK_END)
                size = output.tell()
                output.seek(max(0, size - LOG_LIMIT_BYTES))
                return output.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""  # not started yet
        except OSError as exc:
            raise BackendError(f"cannot read the job's output {path}: {exc}") from exc

    def cancel_task(self, handle: str) -> None:
        account, job_id = _parse_handle(handle)
        self._call("cancel", job_id, user=account)  # as its owner: Slurm checks that too


def _healthy(node: SlurmNode) -> bool:
    return not node.drained and not (set(node.state.split("+")) & _UNHEALTHY)


def _parse_handle(handle: str) -> tuple[str | None, int]:
    """(account or None, job id) from "<account>/<job id>" or a bare job id."""
    account, _, job_id = handle.rpartition("/")
    try:
        return account or None, int(job_id)
    except ValueError:
        raise BackendError(f"not a Slurm job handle: {handle!r}") from None


def _status(job: SlurmJob | None, record: SlurmJob | None) -> TaskStatus:
    """The task's state from slurmctld's view of the job, with the accounting record's start and
    end times and exit code once it has ended (Slurm's own, which metering follows)."""
    current = job or record
    state = current.state
    started = (record.start_time if record else None) or current.start_time
    ended = (record.end_time if record else None) or current.end_time
    exit_code = (
        job.exit_code if job and job.exit_code is not None else (record and record.exit_code)
    )
    signal = (job and job.signal) or (record and record.signal)
    common = {
        "node": current.node or "",
        "device_indices": job.gpu_indices if job else (),
        "started_at": started,
        "exit_code": exit_code,
    }
    if state in ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD"):
        reason = current.reason or "waiting"
        return TaskStatus(TASK_PENDING, message=f"Slurm: pending ({reason})", **common)
    if not current.finished:
        return TaskStatus(TASK_RUNNING, **common)
    if state == "COMPLETED":
        return TaskStatus(TASK_SUCCEEDED, finished_at=ended, **common)
    if state == "CANCELLED":
        return TaskStatus(TASK_CANCELLED, message="Slurm: cancelled", finished_at=ended, **common)
    if exit_code is not None:
        why = f"exit code {exit_code}"
    elif signal:
        why = f"killed by signal {signal}"
    else:
        why = (current.reason or state).lower()
    message = f"Slurm: the job ended {state} ({why})"
    if state not in _FAILED:
        message = f"Slurm: the job ended {state}"
    return TaskStatus(TASK_FAILED, message=message, finished_at=ended, **common)
