"""A host's data disk on a real host agent: ordered with the host, it is a volume at /data;
kept when the host is released, it is attached to a new host with the files written on the
first."""

import pytest

from apps.orders.models import InstanceState
from apps.orders.volumes import attach_volume
from apps.storage.models import Volume, VolumeState
from tests.agent_server import ssh_answers
from tests.orders.real_agent_hosts import real_agent as real_agent
from tests.orders.real_agent_hosts import wait_until

pytestmark = [pytest.mark.containers, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def run(instance, key, command: str) -> str:
    wait_until(lambda: ssh_answers(instance.access, key).returncode == 0, what="SSH to the host")
    answered = ssh_answers(instance.access, key, command)
    assert answered.returncode == 0, answered.stderr
    return answered.stdout.strip()


def test_a_kept_data_disk_brings_its_files_to_the_next_host(real_agent):
    first = real_agent.order("first", data_disk_gb=1)
    disk = Volume.objects.get(data_disk_of=first.workload)
    wait_until(
        lambda: Volume.objects.get(pk=disk.pk).state == VolumeState.READY, what="the disk ready"
    )
    run(first, real_agent.key, "echo 'ordered with first' > /data/proof && sync")

    first = real_agent.operate(first, "release", keep_data_disk=True)
    assert first.state == InstanceState.RELEASED
    disk.refresh_from_db()
    assert (disk.state, disk.workload, disk.data_disk_of) == (VolumeState.READY, None, None)

    second = real_agent.order("second")
    second = real_agent.operate(second, "stop")
    attach_volume(volume=disk, instance=second, mount_path="/mnt/kept", actor=real_agent.park.owner)
    second = real_agent.operate(second, "start")
    assert second.state == InstanceState.RUNNING, second.error_message
    assert run(second, real_agent.key, "cat /mnt/kept/proof") == "ordered with first"
