"""A Slurm cluster as a Loam backend, for real (deploy/slurm/start.sh): registered by an
operator, its GPU nodes synced as a pool, training tasks run as Slurm jobs on the node Loam's
scheduler chose, followed to the end, cancelled, failed, and billed from Slurm's accounting."""

import os
import pwd
import re
import subprocess
import time

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from apps.billing.metering import meter_organization
from apps.billing.models import Meter, UsageRecord
from apps.catalog.models import ResourceType
from apps.core.errors import DomainError
from apps.orchestration import tasks as jobs
from apps.orchestration.backends.base import TASK_FAILED, TASK_SUCCEEDED, BackendError, TaskSpec
from apps.orchestration.backends.registry import get_driver
from apps.orchestration.models import Backend, Node, NodeHealth, Task, TaskState
from apps.orchestration.scheduling import cancel_task, submit_task
from apps.orchestration.services import drain_node, probe_backend, undrain_node
from apps.orders.models import Instance
from apps.orders.services import HostRequest, submit_create
from apps.tenants.models import VerificationState
from tests.factories import (
    AcceleratorModelFactory,
    FlavorFactory,
    FlavorFamilyFactory,
    ImageFactory,
    ParkFactory,
    ParkOperatorFactory,
    PriceFactory,
    RegionFactory,
)
from tests.slurm import A100, driver_config, require_images, slurm_park
from tests.worlds import SSH_KEY

pytestmark = pytest.mark.slurm


def wait_for(condition, *, seconds=30.0, every=0.25):
    """Poll `condition()` until it returns something truthy; fail after `seconds`."""
    end = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"not within {seconds} s")
        time.sleep(every)


# --- the driver alone ------------------------------------------------------------------------


@pytest.fixture
def driver(slurm_cluster):
    return get_driver("slurm", driver_config(slurm_cluster))


def spec(node="gpu-node2", command="echo CUDA=$CUDA_VISIBLE_DEVICES", milli=2000, **fields):
    return TaskSpec(
        name=fields.pop("name", "loam-test"),
        node=node,
        accelerator_indices=(),
        accelerator_milli=milli,
        vcpu=fields.pop("vcpu", 2),
        ram_gb=fields.pop("ram_gb", 2),
        image=fields.pop("image", "pytorch"),
        command=command,
        **fields,
    )


def finished(driver, handle):
    status = driver.task_status(handle)
    return status if status.finished else None


def test_capacity_is_a_pool_of_the_mapped_model(driver):
    [pool] = driver.capacity()
    assert (pool.name, pool.accelerator_model) == ("slurm-a100", A100)
    nodes = {node.hostname: node for node in pool.nodes}
    assert set(nodes) >= {"gpu-node1", "gpu-node2", "gpu-node3"}
    assert nodes["gpu-node2"].accelerators == 4
    assert nodes["gpu-node2"].vcpu == 16


def test_a_job_runs_on_the_chosen_node_with_its_gpus(driver):
    handle = driver.submit_task(spec(command="echo CUDA=$CUDA_VISIBLE_DEVICES; sleep 1"))
    running = wait_for(
        lambda: driver.task_status(handle).device_indices and driver.task_status(handle)
    )
    assert running.node == "gpu-node2"
    assert len(running.device_indices) == 2

    done = wait_for(lambda: finished(driver, handle))
    assert (done.state, done.exit_code) == (TASK_SUCCEEDED, 0)
    assert done.started_at <= done.finished_at
    logs = wait_for(lambda: driver.task_logs(handle))
    assert f"CUDA={','.join(map(str, running.device_indices))}" in logs


def test_a_gang_job_runs_on_both_chosen_nodes_and_sees_its_peers(driver):
    """2 nodes × 2 GPUs: one job on exactly the two nodes Loam chose, each with its 2 GPUs, and
    the rendezvous a torchrun launch needs in its environment."""
    command = (
        "echo NODELIST=$SLURM_JOB_NODELIST NNODES=$NNODES; echo MASTER=$MASTER_ADDR:$MASTER_PORT;"
        " echo GPUS=$SLURM_GPUS_ON_NODE"
    )
    handle = driver.submit_task(
        spec(node="gpu-node1", nodes=("gpu-node1", "gpu-node3"), command=command)
    )
    done = wait_for(lambda: finished(driver, handle))
    assert (done.state, done.exit_code) == (TASK_SUCCEEDED, 0)
    assert done.node == "gpu-node[1,3]"
    logs = wait_for(lambda: driver.task_logs(handle))
    assert "NODELIST=gpu-node[1,3] NNODES=2" in logs
    master = re.search(r"MASTER=(\S+):(\d+)", logs)
    assert master and master[1] == os.uname().nodename and 20000 <= int(master[2]) < 40000


def test_srun_in_a_gang_job_on_the_bare_node_starts_one_rank_per_node_that_share_the_rendezvous(
    bare_driver,
):
    """What `srun torchrun …` relies on where the cluster runs no images: one process on each
    node, each with its rank and the same MASTER_ADDR:MASTER_PORT."""
    command = (
        "srun bash -c 'echo rank=$SLURM_NODEID node=$SLURMD_NODENAME at=$MASTER_ADDR:$MASTER_PORT'"
    )
    handle = bare_driver.submit_task(
        spec(node="gpu-node1", nodes=("gpu-node1", "gpu-node2"), command=command, milli=1000)
    )
    done = wait_for(lambda: finished(bare_driver, handle))
    assert done.state == TASK_SUCCEEDED
    assert_one_rank_per_node(wait_for(lambda: bare_driver.task_logs(handle)))


def assert_one_rank_per_node(logs):
    ranks = {
        rank: (node, at) for rank, node, at in re.findall(r"rank=(\d) node=(\S+) at=(\S+)", logs)
    }
    assert {rank: node for rank, (node, _at) in ranks.items()} == {
        "0": "gpu-node1",
        "1": "gpu-node2",
    }, logs
    assert len({at for _node, at in ranks.values()}) == 1, logs


# --- jobs in their image (Slurm's --container, rootless runc as the job's user) --------------


@pytest.fixture
def images(slurm_cluster):
    return require_images(slurm_cluster, "debian-12", "pytorch")


@pytest.fixture
def bare_driver(slurm_cluster):
    """The test cluster where it runs no images: commands run on the bare node."""
    config = {k: v for k, v in driver_config(slurm_cluster).items() if k != "images_dir"}
    return get_driver("slurm", config)


def test_capacity_reports_the_images_of_the_clusters_bundles(driver, bare_driver, images):
    [pool] = driver.capacity()
    assert {name: pool.images[name] for name in images} == images
    [bare_pool] = bare_driver.capacity()
    assert bare_pool.images is None


def test_a_job_runs_in_its_image_as_the_organizations_own_user(driver, images, slurm_cluster):
    """debian-12's os-release, the image read-only, and the process the organization's Unix
    user on the node: root only inside its own user namespace, whose one mapping is that uid."""
    command = (
        "grep PRETTY_NAME /etc/os-release; cat /proc/self/uid_map; "
        "touch /etc/x 2>/dev/null || echo image-read-only; echo rank=$NODE_RANK"
    )
    handle = driver.submit_task(
        spec(command=command, milli=1000, image="debian-12", organization_id=9101)
    )
    done = wait_for(lambda: finished(driver, handle))
    logs = driver.task_logs(handle)
    assert (done.state, done.exit_code) == (TASK_SUCCEEDED, 0), logs
    assert 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"' in logs
    tenant = pwd.getpwnam("loam_o9101")
    assert re.search(rf"^\s*0\s+{tenant.pw_uid}\s+1\s*$", logs, re.M), logs
    assert "image-read-only" in logs and "rank=0" in logs
    output = slurm_cluster.jobs_dir / "loam_o9101" / f"loam-{handle.split('/')[1]}.out"
    assert output.stat().st_uid == tenant.pw_uid


def test_torch_imports_in_the_pytorch_image_where_the_bare_node_has_none(
    driver, bare_driver, images
):
    command = "python -c 'import torch; print(\"torch\", torch.__version__)'"
    in_image = driver.submit_task(spec(command=command, milli=1000, image="pytorch"))
    on_node = bare_driver.submit_task(spec(command=command, milli=1000, image="pytorch"))

    done = wait_for(lambda: finished(driver, in_image))
    assert (done.state, done.exit_code) == (TASK_SUCCEEDED, 0), driver.task_logs(in_image)
    assert re.search(r"^torch \d+\.\d+", driver.task_logs(in_image), re.M)
    bare = wait_for(lambda: finished(bare_driver, on_node))
    assert bare.state == TASK_FAILED  # no python, or no torch, on the bare node


def test_a_gang_job_in_its_image_runs_the_command_once_on_each_node(driver, images):
    """In an image there is no srun: the command itself runs on every node, with its rank, and
    every rank meets at the same rendezvous."""
    command = "echo rank=$NODE_RANK node=$SLURMD_NODENAME at=$MASTER_ADDR:$MASTER_PORT"
    handle = driver.submit_task(
        spec(node="gpu-node1", nodes=("gpu-node1", "gpu-node2"), command=command, milli=1000)
    )
    done = wait_for(lambda: finished(driver, handle))
    assert done.state == TASK_SUCCEEDED
    assert_one_rank_per_node(wait_for(lambda: driver.task_logs(handle)))


def test_an_image_the_cluster_has_no_bundle_of_is_refused_before_submitting(driver, images):
    with pytest.raises(BackendError, match="no image 'cuda-99'") as excinfo:
        driver.submit_task(spec(image="cuda-99"))
    assert not excinfo.value.transient


def test_a_job_that_exits_3_fails_with_exit_code_3(driver):
    handle = driver.submit_task(spec(command="echo bye; exit 3", milli=1000))
    done = wait_for(lambda: finished(driver, handle))
    assert (done.state, done.exit_code) == (TASK_FAILED, 3)
    assert "exit code 3" in done.message


def test_a_share_of_a_card_and_an_impossible_job_are_refused(driver):
    with pytest.raises(BackendError, match="whole GPUs"):
        driver.submit_task(spec(milli=500))
    with pytest.raises(BackendError) as excinfo:
        driver.submit_task(spec(milli=64000))
    assert not excinfo.value.transient


def test_an_unreadable_key_is_a_clear_error(slurm_cluster, tmp_path):
    config = {**driver_config(slurm_cluster), "key_file": str(tmp_path / "nope.key")}
    with pytest.raises(BackendError, match="JWT key file"):
        get_driver("slurm", config).capacity()


# --- the portal: an operator registers it, tenants' tasks run on it --------------------------


@pytest.fixture
def slurm_world(db, park, organization, owner, operator, slurm_cluster):
    type(organization).objects.filter(pk=organization.pk).update(
        verification_state=VerificationState.VERIFIED
    )
    return slurm_park(park, operator, slurm_cluster, card_hour_minor=3600)  # 1 a second


def submit(world, organization, owner, **fields):
    _backend, image = world
    data = {
        "name": "train",
        "image": image,
        "command": "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; sleep 2",
        "accelerator_milli": 2000,
        "vcpu": 2,
        "ram_gb": 2,
        **fields,
    }
    return submit_task(organization=organization, actor=owner, data=data)


def follow_until(task, states, seconds=40.0):
    def reached():
        jobs.follow_task(task.pk)
        task.refresh_from_db()
        return task.state in states

    wait_for(reached, seconds=seconds, every=0.5)
    return task


def test_registration_syncs_the_nodes_and_refuses_host_orders(slurm_world):
    backend, _image = slurm_world
    [pool] = backend.pools.all()
    assert pool.name == "slurm-a100"
    assert Node.objects.filter(pool=pool).count() >= 3
    assert pool.nodes.get(hostname="gpu-node1").accelerators.count() == 4
    probe_backend(backend=backend)
    backend.refresh_from_db()
    assert backend.last_error == ""


def test_a_task_runs_as_a_slurm_job_and_is_billed_from_accounting(
    slurm_world, organization, owner, client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        task = submit(slurm_world, organization, owner)
    task.refresh_from_db()
    assert task.state in (TaskState.PLACED, TaskState.RUNNING)
    # The organization's own Slurm account, and the job id.
    assert re.fullmatch(rf"loam_o{organization.pk}/\d+", task.backend_handle)

    follow_until(task, {TaskState.RUNNING, TaskState.SUCCEEDED})
    follow_until(task, {TaskState.SUCCEEDED})
    status = task.backend_status
    assert status["node"] == task.node.hostname  # where Loam's scheduler put it
    assert len(status["devices"]) == 2
    assert status["exit_code"] == 0
    assert "CUDA_VISIBLE_DEVICES=" + ",".join(map(str, status["devices"])) in task.logs

    # Metering follows Slurm's own start and end (whole seconds), not when Loam looked.
    [meter] = Meter.objects.filter(workload__task=task)
    assert (meter.started_at, meter.ended_at) == (task.started_at, task.finished_at)
    assert task.started_at.microsecond == 0 and task.finished_at.microsecond == 0
    meter_organization(organization.pk, until=timezone.now())
    seconds = int((task.finished_at - task.started_at).total_seconds())
    records = UsageRecord.objects.filter(workload__task=task)
    assert sum(r.seconds for r in records) == seconds
    assert sum(r.amount_minor for r in records) == seconds * 2  # 2 cards × 1 minor unit / s

    client.force_login(owner)
    page = client.get(reverse("tasks:task_detail", args=[task.pk])).content.decode()
    assert task.backend_handle in page and task.node.hostname in page
    assert ", ".join(map(str, status["devices"])) in page


def test_a_task_runs_in_its_image_and_its_page_says_which_build(
    slurm_world, images, organization, owner, client, django_capture_on_commit_callbacks
):
    """Through the portal: the pool reports the cluster's images, the pytorch task imports torch
    (the bare node has none) as the organization's user, and its page names the build's digest;
    an image the cluster has no bundle of is refused at submit, naming the pool."""
    backend, image = slurm_world
    [pool] = backend.pools.all()
    assert pool.images["pytorch"] == images["pytorch"]
    command = "python -c 'import torch; print(\"torch\", torch.__version__)'"
    with django_capture_on_commit_callbacks(execute=True):
        task = submit(slurm_world, organization, owner, command=command, accelerator_milli=1000)

    follow_until(task, {TaskState.SUCCEEDED, TaskState.FAILED})
    assert task.state == TaskState.SUCCEEDED, task.logs
    assert re.search(r"^torch \d+\.\d+", task.logs, re.M)
    assert task.image_digest == images["pytorch"]
    client.force_login(owner)
    page = client.get(reverse("tasks:task_detail", args=[task.pk])).content.decode()
    assert f'title="{images["pytorch"]}"' in page

    cuda = ImageFactory(
        park=image.park, code="cuda-99", compatible_accelerators=[pool.accelerator_model]
    )
    with pytest.raises(ValidationError) as excinfo:
        submit(slurm_world, organization, owner, image=cuda)
    [refusal] = excinfo.value.message_dict["image"]
    assert "slurm-a100" in refusal and "cuda-99" in refusal


def job_id(task) -> int:
    """The Slurm job id of a task's handle ("<account>/<job id>")."""
    return int(task.backend_handle.rpartition("/")[2])


def sacct_elapsed_seconds(cluster, job: int) -> int:
    """What Slurm's accounting says the job ran (sacct's ElapsedRaw)."""
    answer = subprocess.run(
        ["sacct", "-j", str(job), "-n", "-X", "-P", "-o", "ElapsedRaw"],
        env={**os.environ, "SLURM_CONF": cluster.slurm_conf},
        capture_output=True,
        text=True,
        check=True,
    )
    return int(answer.stdout.split()[0])


def test_a_job_ending_while_slurmrestd_is_unreachable_is_billed_sacct_s_seconds(
    slurm_world, slurm_cluster, organization, owner, client, django_capture_on_commit_callbacks
):
    """Metering runs on while the portal cannot reach slurmrestd and the job ends unseen; the
    bill is still Slurm's own elapsed time, to the second, not the time until the portal
    learned of the end (this billed 118 s for a 40 s job before meters waited for the
    backend's word)."""
    backend, _image = slurm_world
    with django_capture_on_commit_callbacks(execute=True):
        task = submit(slurm_world, organization, owner, command="sleep 20")
    follow_until(task, {TaskState.RUNNING})
    time.sleep(3)
    follow_until(task, {TaskState.RUNNING})
    meter_organization(organization.pk, until=timezone.now())

    # The portal loses slurmrestd; the job runs on and ends meanwhile.
    reachable = lose_slurmrestd(backend)

    def ended_in_slurm():
        jobs.follow_task(task.pk)  # cannot ask: the task's state is unknown
        meter_organization(organization.pk, until=timezone.now())
        return slurm.accounting(job_id(task)).end_time

    with slurm_cluster.client() as slurm:
        wait_for(ended_in_slurm, seconds=40, every=2)
    time.sleep(3)
    meter_organization(organization.pk, until=timezone.now())
    task.refresh_from_db()
    assert task.state == TaskState.RUNNING and task.backend_status["unreachable_since"]
    client.force_login(owner)
    page = client.get(reverse("tasks:task_detail", args=[task.pk]), HTTP_ACCEPT_LANGUAGE="en")
    assert "backend unreachable" in page.content.decode()

    Backend.objects.filter(pk=backend.pk).update(config=reachable)  # it answers again
    probe_backend(backend=backend)
    assert Node.objects.get(pool__backend=backend, hostname=task.node.hostname).health == (
        NodeHealth.HEALTHY
    )
    follow_until(task, {TaskState.SUCCEEDED})
    meter_organization(organization.pk, until=timezone.now())
    billed = sum(UsageRecord.objects.filter(workload__task=task).values_list("seconds", flat=True))
    elapsed = sacct_elapsed_seconds(slurm_cluster, job_id(task))
    print(f"\nsacct elapsed {elapsed} s, billed {billed} s")
    assert 20 <= elapsed <= 25
    assert abs(billed - elapsed) <= 1
    assert "unreachable_since" not in task.backend_status


def lose_slurmrestd(backend) -> dict:
    """The portal loses the backend's slurmrestd (its URL now a closed port): a probe finds the
    pool's nodes unknown. Returns the configuration that reaches it again."""
    reachable = backend.config
    Backend.objects.filter(pk=backend.pk).update(config={**reachable, "url": "http://127.0.0.1:9"})
    probe_backend(backend=backend)
    assert set(Node.objects.filter(pool__backend=backend).values_list("health", flat=True)) == {
        NodeHealth.UNKNOWN
    }
    return reachable


def hostnames(cluster, nodelist: str) -> list[str]:
    """Slurm's hostlist ("gpu-node[1-2]") as names, by Slurm's own reading."""
    answer = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist],
        env={**os.environ, "SLURM_CONF": cluster.slurm_conf},
        capture_output=True,
        text=True,
        check=True,
    )
    return answer.stdout.split()


def test_a_two_node_task_runs_on_both_nodes_with_a_rendezvous_and_bills_four_cards(
    slurm_world, slurm_cluster, organization, owner, client, django_capture_on_commit_callbacks
):
    """2 nodes × 2 cards through the portal: Loam's scheduler chooses two nodes of the Slurm
    pool, Slurm runs one job on exactly those, the job's output names both and the rendezvous,
    and the bill is sacct's elapsed seconds × 4 cards."""
    command = (
        "echo NODELIST=$SLURM_JOB_NODELIST NNODES=$NNODES; "
        "echo RENDEZVOUS=$MASTER_ADDR:$MASTER_PORT; sleep 5"
    )
    with django_capture_on_commit_callbacks(execute=True):
        task = submit(slurm_world, organization, owner, node_count=2, command=command)
    task.refresh_from_db()
    assert task.state in (TaskState.PLACED, TaskState.RUNNING)
    [placement] = task.workload.placements.all()
    chosen = placement.gang["nodes"]
    assert len(chosen) == 2 and task.hourly_minor == 4 * 3600

    follow_until(task, {TaskState.SUCCEEDED})
    nodelist = re.search(r"NODELIST=(\S+) NNODES=2", task.logs)
    assert nodelist, task.logs
    assert hostnames(slurm_cluster, nodelist[1]) == chosen
    rendezvous = re.search(r"RENDEZVOUS=(\S+):(\d+)", task.logs)
    assert rendezvous and rendezvous[1] == os.uname().nodename  # the first node's host
    assert not task.workload.allocations.filter(released_at__isnull=True).exists()

    meter_organization(organization.pk, until=timezone.now())
    records = UsageRecord.objects.filter(workload__task=task)
    elapsed = sacct_elapsed_seconds(slurm_cluster, job_id(task))
    billed = sum(r.seconds for r in records)
    print(f"\nsacct elapsed {elapsed} s, billed {billed} s for 4 cards")
    assert abs(billed - elapsed) <= 1
    assert sum(r.amount_minor for r in records) == billed * 4  # 4 cards × 1 minor unit / s

    client.force_login(owner)
    page = client.get(reverse("tasks:task_detail", args=[task.pk]), HTTP_ACCEPT_LANGUAGE="en")
    assert "2 nodes × 2 cards" in page.content.decode()


def test_a_failing_task_shows_slurms_exit_code(
    slurm_world, organization, owner, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        task = submit(slurm_world, organization, owner, command="echo oops; exit 3")
    follow_until(task, {TaskState.FAILED})
    assert task.backend_status["exit_code"] == 3
    assert "exit code 3" in task.logs
    assert (
        Task.objects.get(pk=task.pk).node.accelerators.filter(allocation__isnull=False).count() == 0
    )


def test_cancelling_a_task_cancels_its_slurm_job(
    slurm_world, slurm, organization, owner, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        task = submit(slurm_world, organization, owner, command="sleep 120")
    follow_until(task, {TaskState.RUNNING})
    with django_capture_on_commit_callbacks(execute=True):
        cancel_task(task=task, actor=owner)
    # Right after a cancel Slurm says COMPLETING for a moment, then CANCELLED.
    wait_for(lambda: slurm.job(job_id(task)).state == "CANCELLED")
    task.refresh_from_db()
    assert task.state == TaskState.CANCELLED


def test_draining_a_node_drains_it_in_slurm(slurm_world, slurm, operator):
    backend, _image = slurm_world
    node = Node.objects.get(pool__backend=backend, hostname="gpu-node3")
    try:
        drain_node(node=node, operator=operator, reason="maintenance")
        assert next(n for n in slurm.nodes() if n.name == "gpu-node3").drained
    finally:
        undrain_node(node=node, operator=operator)
    assert not next(n for n in slurm.nodes() if n.name == "gpu-node3").drained


def test_a_host_order_on_a_slurm_only_model_is_refused_before_anything_is_held(
    slurm_world, organization, owner
):
    backend, image = slurm_world
    pool = backend.pools.get()
    family = FlavorFamilyFactory(
        park=organization.park,
        accelerator_model=pool.accelerator_model,
        resource_type=ResourceType.CLOUD_HOST,
    )
    flavor = FlavorFactory(family=family, accelerator_count=1)
    PriceFactory(region=pool.region, flavor=flavor, amount_minor=1000)
    request = HostRequest(
        flavor=flavor,
        image=image,
        region=None,
        system_disk_gb=flavor.system_disk_gb,
        ssh_public_key=SSH_KEY,
        name="host",
    )

    with pytest.raises(DomainError) as excinfo:
        submit_create(organization=organization, actor=owner, request=request)

    assert excinfo.value.code == "not_supported"
    assert "slurm" in excinfo.value.message
    assert not Instance.objects.filter(organization=organization).exists()


def test_an_operator_registers_a_slurm_backend_in_the_console(
    db, park, operator, client, slurm_cluster
):
    import json

    from apps.orchestration.models import Backend

    region = RegionFactory(park=park, code="hpc", name="HPC centre")
    AcceleratorModelFactory(name="A100 SXM 80GB", slug=A100)
    client.force_login(operator)
    url = reverse("operations:backend_list", args=[park.pk])
    form = {"action": "register", "name": "hpc", "driver": "slurm", "region": region.pk}

    broken = {**driver_config(slurm_cluster), "key_file": "/nonexistent/jwt.key"}
    refused = client.post(url, {**form, "config": json.dumps(broken)})
    assert refused.status_code == 422
    assert "JWT key file" in refused.content.decode()
    assert not Backend.objects.filter(park=park).exists()

    answered = client.post(url, {**form, "config": json.dumps(driver_config(slurm_cluster))})
    assert answered.status_code == 302
    backend = Backend.objects.get(park=park, name="hpc")
    assert backend.driver == "slurm"
    assert backend.pools.get().nodes.count() >= 3

    # The same cluster again, its slurmrestd URL spelled otherwise, even from another park.
    other_park = ParkFactory()
    other_operator = ParkOperatorFactory(park=other_park).user
    client.force_login(other_operator)
    again = {**driver_config(slurm_cluster), "url": slurm_cluster.url.upper() + "/"}
    refused = client.post(
        reverse("operations:backend_list", args=[other_park.pk]),
        {**form, "region": RegionFactory(park=other_park).pk, "config": json.dumps(again)},
    )
    assert refused.status_code == 422
    [error] = refused.context["form"].errors["config"]  # in this operator's language
    assert "“hpc”" in error and f"“{park.name}”" in error
    assert list(Backend.objects.values_list("name", flat=True)) == ["hpc"]
