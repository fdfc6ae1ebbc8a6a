"""On the real test cluster (deploy/slurm/start.sh): two organizations' 2-node × 2-card gang jobs
run at once, each in its own account; the park's fair share reaches each account's `fairshare`;
and a task that may not be preempted makes room by requeueing a preemptible one, whose job (in
the preemptible QOS) Slurm then ends."""

import os
import subprocess
import time

import pytest

from apps.orchestration import tasks as jobs
from apps.orchestration.models import Preemption, Task, TaskState
from apps.orchestration.scheduling import set_fair_share, submit_task
from apps.tenants.models import VerificationState
from tests.slurm import slurm_park

pytestmark = pytest.mark.slurm


@pytest.fixture
def image(db, park, organization, other_organization, operator, slurm_cluster):
    for tenant in (organization, other_organization):
        type(tenant).objects.filter(pk=tenant.pk).update(
            verification_state=VerificationState.VERIFIED
        )
    _backend, image = slurm_park(park, operator, slurm_cluster, card_hour_minor=3600)
    yield image
    for task in Task.objects.filter(state__in=(TaskState.PLACED, TaskState.RUNNING)):
        if task.backend_handle:
            jobs.task_driver(task).cancel_task(task.backend_handle)


def submit(image, organization, owner, capture, **fields):
    data = {
        "name": "train",
        "image": image,
        "command": "sleep 120",
        "accelerator_milli": 1000,
        "vcpu": 1,
        "ram_gb": 1,
        **fields,
    }
    with capture(execute=True):
        return submit_task(organization=organization, actor=owner, data=data)


def until_running(*tasks_, seconds=40):
    deadline = time.monotonic() + seconds
    while True:
        for task in tasks_:
            jobs.follow_task(task.pk)
            task.refresh_from_db()
        if all(t.state == TaskState.RUNNING for t in tasks_):
            return
        assert all(t.state in (TaskState.PLACED, TaskState.RUNNING) for t in tasks_)
        assert time.monotonic() < deadline, [t.backend_status for t in tasks_]
        time.sleep(0.5)


def sacct(cluster, *args) -> str:
    return subprocess.run(
        args,
        env={**os.environ, "SLURM_CONF": cluster.slurm_conf},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def job_id(task) -> str:
    return task.backend_handle.rpartition("/")[2]


def test_two_organizations_run_2x2_gangs_at_once(
    image,
    slurm_cluster,
    organization,
    owner,
    other_organization,
    other_owner,
    django_capture_on_commit_callbacks,
):
    capture = django_capture_on_commit_callbacks
    mine = submit(image, organization, owner, capture, node_count=2, accelerator_milli=2000)
    theirs = submit(
        image, other_organization, other_owner, capture, node_count=2, accelerator_milli=2000
    )

    until_running(mine, theirs)

    for task, org in ((mine, organization), (theirs, other_organization)):
        row = sacct(slurm_cluster, "squeue", "-h", "-j", job_id(task), "-o", "%T|%D|%a|%b")
        assert row.split("|")[:3] == ["RUNNING", "2", f"loam_o{org.pk}"]


def test_the_parks_fair_share_is_the_accounts_fairshare(
    image, slurm_cluster, organization, owner, operator, django_capture_on_commit_callbacks
):
    task = submit(image, organization, owner, django_capture_on_commit_callbacks)
    until_running(task)
    account = f"loam_o{organization.pk}"

    with django_capture_on_commit_callbacks(execute=True):
        set_fair_share(organization=organization, operator=operator, shares=5)

    shown = sacct(
        slurm_cluster,
        "sacctmgr",
        "-n",
        "-P",
        "show",
        "assoc",
        "where",
        f"account={account}",
        "user=",
        "format=fairshare,qos",
    )
    fairshare, qos = shown.split("|")
    assert fairshare == "5" and set(qos.split(",")) >= {"normal", "preemptible"}


def test_a_task_that_may_not_wait_requeues_a_preemptible_job(
    image, slurm_cluster, organization, owner, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    cheap = [
        submit(image, organization, owner, capture, accelerator_milli=4000, preemptible=True)
        for _ in range(3)
    ]  # the cluster's 3 nodes × 4 cards, all held by preemptible jobs
    until_running(*cheap)
    assert sacct(slurm_cluster, "squeue", "-h", "-j", job_id(cheap[0]), "-o", "%q") == (
        "preemptible"
    )
    handles = {t.pk: job_id(t) for t in cheap}

    urgent = submit(image, organization, owner, capture, accelerator_milli=4000)

    [preemption] = Preemption.objects.filter(preempted_by=urgent)
    victim = preemption.task
    victim.refresh_from_db()
    assert victim.state == TaskState.QUEUED
    until_running(urgent)
    deadline = time.monotonic() + 20
    while sacct(slurm_cluster, "squeue", "-h", "-j", handles[victim.pk], "-o", "%T"):
        assert time.monotonic() < deadline, "the preempted job still runs"
        time.sleep(0.5)
