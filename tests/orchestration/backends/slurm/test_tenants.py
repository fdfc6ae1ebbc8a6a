"""Two organizations on one real Slurm cluster (deploy/slurm/start.sh): each runs as its own
account and Unix user, neither can read, overwrite or cancel the other's job or output (as Unix
users, and through slurmrestd with its own token), and an organization's accelerator quota is
the account's GrpTRES, which holds for a job submitted around the portal too."""

import os
import pwd
import subprocess
import time
from pathlib import Path

import pytest

from apps.orchestration import tasks as jobs
from apps.orchestration.backends.slurm import tenants
from apps.orchestration.backends.slurm.client import SlurmClient, SlurmError
from apps.orchestration.models import TaskState
from apps.orchestration.scheduling import submit_task
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.quotas.services import set_limit
from apps.tenants.models import VerificationState
from tests.slurm import slurm_park

pytestmark = pytest.mark.slurm

SECRET = "secret-of-{}"


@pytest.fixture
def two_tenants(
    db, park, organization, owner, other_organization, other_owner, operator, slurm_cluster
):
    for tenant in (organization, other_organization):
        type(tenant).objects.filter(pk=tenant.pk).update(
            verification_state=VerificationState.VERIFIED
        )
    _backend, image = slurm_park(park, operator, slurm_cluster, card_hour_minor=3600)
    return image


def run(image, organization, owner, command, django_capture_on_commit_callbacks, cards=1):
    data = {
        "name": "train",
        "image": image,
        "command": command,
        "accelerator_milli": 1000 * cards,
        "vcpu": 1,
        "ram_gb": 1,
    }
    with django_capture_on_commit_callbacks(execute=True):
        task = submit_task(organization=organization, actor=owner, data=data)
    deadline = time.monotonic() + 40
    while True:
        jobs.follow_task(task.pk)
        task.refresh_from_db()
        if task.state == TaskState.RUNNING and SECRET.format(organization.pk) in task.logs:
            return task
        assert task.state in (TaskState.PLACED, TaskState.RUNNING), task.logs
        assert time.monotonic() < deadline, f"{task} never ran: {task.backend_status}"
        time.sleep(0.5)


def account_and_job(task) -> tuple[str, int]:
    account, _, job_id = task.backend_handle.rpartition("/")
    return account, int(job_id)


def as_user(user: str, cluster, *command: str) -> subprocess.CompletedProcess:
    """`command` run as the Unix user `user`, with the cluster's slurm.conf."""
    return subprocess.run(
        ["runuser", "-u", user, "--", "env", f"SLURM_CONF={cluster.slurm_conf}", *command],
        capture_output=True,
        text=True,
        cwd="/",
    )


def account_limit(cluster, account: str) -> str:
    """The account's own GrpTRES, as sacctmgr shows it ("" for none)."""
    rows = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "assoc", "where", f"account={account}", "user="]
        + ["format=grptres"],
        env={**os.environ, "SLURM_CONF": cluster.slurm_conf},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return rows[0]


def slurm_state(cluster, job_id: int) -> str:
    answer = subprocess.run(
        ["squeue", "-h", "-j", str(job_id), "-o", "%T"],
        env={**os.environ, "SLURM_CONF": cluster.slurm_conf},
        capture_output=True,
        text=True,
    )
    return answer.stdout.strip()


def test_neither_organization_reaches_the_others_job_or_output(
    two_tenants,
    slurm_cluster,
    organization,
    owner,
    other_organization,
    other_owner,
    django_capture_on_commit_callbacks,
):
    # The uid the job has on the node, in its image too (root there only in a user namespace
    # whose one mapping is that uid), from its user namespace's map of its own id.
    host_uid = "awk -v me=$(id -u) '$1 <= me && me < $1 + $3 {{print \"uid=\" $2 + me - $1}}' "
    # The secret last: once the portal reads it, the uid line is read too.
    command = host_uid + "/proc/self/uid_map; echo {secret}; sleep 60"
    mine = run(
        two_tenants,
        organization,
        owner,
        command.format(secret=SECRET.format(organization.pk)),
        django_capture_on_commit_callbacks,
    )
    theirs = run(
        two_tenants,
        other_organization,
        other_owner,
        command.format(secret=SECRET.format(other_organization.pk)),
        django_capture_on_commit_callbacks,
    )
    my_account, my_job = account_and_job(mine)
    their_account, their_job = account_and_job(theirs)
    assert (my_account, their_account) == (
        f"loam_o{organization.pk}",
        f"loam_o{other_organization.pk}",
    )
    # Each job runs as its organization's own Unix user.
    assert f"\nuid={pwd.getpwnam(my_account).pw_uid}\n" in f"\n{mine.logs}"
    assert f"\nuid={pwd.getpwnam(their_account).pw_uid}\n" in f"\n{theirs.logs}"

    # As Unix users: the other's folder cannot be entered, its output read or written.
    my_output = Path(slurm_cluster.jobs_dir) / my_account / f"loam-{my_job}.out"
    assert my_output.exists()
    for command in (
        ["cat", str(my_output)],
        ["ls", str(my_output.parent)],
        ["sh", "-c", f"echo forged >> {my_output}"],
        ["touch", str(my_output.parent / "planted")],
    ):
        refused = as_user(their_account, slurm_cluster, *command)
        assert refused.returncode != 0 and "Permission denied" in refused.stderr, command
    assert SECRET.format(organization.pk) in my_output.read_text()
    assert "forged" not in my_output.read_text()
    # Its own output it reads (the probe is not refused for some other reason).
    their_output = Path(slurm_cluster.jobs_dir) / their_account / f"loam-{their_job}.out"
    assert as_user(their_account, slurm_cluster, "cat", str(their_output)).returncode == 0

    # As Slurm users: the other's job is neither listed nor cancelled, with scancel …
    listed = as_user(their_account, slurm_cluster, "squeue", "-h", "-o", "%i")
    assert str(their_job) in listed.stdout.split()
    assert str(my_job) not in listed.stdout.split()
    cancel = as_user(their_account, slurm_cluster, "scancel", str(my_job))
    assert cancel.returncode != 0, cancel
    # … nor through slurmrestd with the other's own token.
    with SlurmClient(
        slurm_cluster.url, their_account, key=Path(slurm_cluster.key_path).read_bytes()
    ) as their_client:
        with pytest.raises(SlurmError):
            their_client.cancel(my_job)
        with pytest.raises(SlurmError):
            their_client.job(my_job)
        assert their_client.job(their_job).state == "RUNNING"  # the token itself works
    time.sleep(1)
    assert slurm_state(slurm_cluster, my_job) == "RUNNING"

    for task in (mine, theirs):  # the portal cancels each as its owner
        jobs.task_driver(task).cancel_task(task.backend_handle)


def test_the_accelerator_quota_is_the_accounts_limit_even_around_the_portal(
    two_tenants, slurm_cluster, organization, owner, django_capture_on_commit_callbacks
):
    QuotaLimit.objects.create(
        park=organization.park,
        organization=organization,
        resource=QuotaResource.ACCELERATORS,
        limit=2,
    )
    task = run(
        two_tenants,
        organization,
        owner,
        f"echo {SECRET.format(organization.pk)}; sleep 60",
        django_capture_on_commit_callbacks,
    )
    account, _job = account_and_job(task)
    assert account_limit(slurm_cluster, account) == "gres/gpu=2"

    # A job of 2 more cards submitted straight to Slurm, as the organization's user, waits
    # on the account's limit: with the portal's task it would hold 3.
    around = as_user(
        account,
        slurm_cluster,
        "sbatch",
        "--parsable",
        f"--account={account}",
        "--gres=gpu:2",
        f"--chdir={Path(slurm_cluster.jobs_dir) / account}",
        "--output=/dev/null",
        "--wrap=sleep 30",
    )
    assert around.returncode == 0, around.stderr
    around_job = int(around.stdout.strip().split(";")[0])
    time.sleep(3)
    reason = subprocess.run(
        ["squeue", "-h", "-j", str(around_job), "-o", "%T %r"],
        env={**os.environ, "SLURM_CONF": slurm_cluster.slurm_conf},
        capture_output=True,
        text=True,
    ).stdout.split()
    assert reason == ["PENDING", "AssocGrpGRES"], reason
    subprocess.run(
        ["scancel", str(around_job)],
        env={**os.environ, "SLURM_CONF": slurm_cluster.slurm_conf},
        check=True,
    )
    jobs.task_driver(task).cancel_task(task.backend_handle)


def test_a_changed_quota_reaches_the_account_at_once(
    two_tenants,
    slurm_cluster,
    organization,
    owner,
    operator,
    django_capture_on_commit_callbacks,
):
    """Lowered by an operator, the quota holds on the cluster now, not from the organization's
    next task."""
    limit = QuotaLimit.objects.create(
        park=organization.park,
        organization=organization,
        resource=QuotaResource.ACCELERATORS,
        limit=3,
    )
    task = run(
        two_tenants,
        organization,
        owner,
        f"echo {SECRET.format(organization.pk)}; sleep 1",
        django_capture_on_commit_callbacks,
    )
    account, _job = account_and_job(task)
    assert account_limit(slurm_cluster, account) == "gres/gpu=3"
    with django_capture_on_commit_callbacks(execute=True):
        set_limit(limit=limit, operator=operator, value=1)
    assert account_limit(slurm_cluster, account) == "gres/gpu=1"


def test_an_account_another_worker_made_meanwhile_is_taken_as_made(slurm_cluster, monkeypatch):
    """An organization's first tasks are submitted by several workers at once: one that read
    "no account" just before another made it finds it there when its own add is refused
    ("Nothing new added"), and goes on."""
    prefix = f"loam_t{os.getpid()}_"  # an account no other test made
    name = tenants.account_name(prefix, int(time.time()))
    tenant = tenants.SlurmTenant(name=name, jobs_dir=f"{slurm_cluster.jobs_dir}/{name}")
    conf = slurm_cluster.slurm_conf
    tenants.ensure(tenant, gpu_limit=4, create_users=True, slurm_conf=conf)  # the other worker
    read = tenants._associations
    reads = []

    def stale_first(*args):  # this worker read before the other made it
        reads.append(args)
        return {} if len(reads) == 1 else read(*args)

    monkeypatch.setattr(tenants, "_associations", stale_first)
    tenants.ensure(tenant, gpu_limit=4, create_users=True, slurm_conf=conf)
    assert len(reads) == 2  # its add was refused, and it read again
    assert account_limit(slurm_cluster, tenant.name) == "gres/gpu=4"
