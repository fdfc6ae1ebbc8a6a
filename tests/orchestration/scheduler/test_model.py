"""The scheduler's model (scheduler/model.py): TaskRequest's normalised shares, NodeState from
the portal's figures, applying and releasing placements, and signatures."""

import pytest

from apps.orchestration.scheduler.model import (
    NodeState,
    apply,
    release,
    sig_after,
    signature,
)

from .helpers import node, task


def test_task_normalises_gpu_milli():
    assert task(num_gpu=0, gpu_milli=500).gpu_milli == 0
    assert task(num_gpu=4, gpu_milli=250).gpu_milli == 1000  # multi-GPU takes whole devices
    share = task(num_gpu=1, gpu_milli=460)
    assert share.is_share and share.gpu_request_milli == 460
    assert task(num_gpu=2).gpu_request_milli == 2000
    assert not task(num_gpu=1, gpu_milli=1000).is_share
    with pytest.raises(ValueError):
        task(num_gpu=1, gpu_milli=1500)


def test_from_portal_maps_whole_accelerators():
    n = NodeState.from_portal(
        "db-7",
        accelerators=4,
        accelerator_model="A100",
        vcpu=64,
        ram_gb=512,
        busy_accelerators=1,
        vcpu_used=8,
        region="sh",
        price_per_hour_minor=1200,
    )
    assert n.gpu_free == [0, 1000, 1000, 1000]
    assert (n.cpu_milli_total, n.cpu_milli_free) == (64000, 56000)
    assert (n.memory_mib_total, n.memory_mib_free) == (512 * 1024, 512 * 1024)
    assert n.gpu_model == "A100" and n.region == "sh" and n.price_per_hour_minor == 1200
    assert (
        NodeState.from_portal(
            "cpu", accelerators=0, accelerator_model="A100", vcpu=8, ram_gb=16
        ).gpu_model
        == ""
    )


def test_apply_and_release_round_trip():
    n = node(gpus=(1000, 1000, 600))
    t = task(cpu=2000, mem=4096, num_gpu=1, gpu_milli=500)
    p = apply(n, t, (2,))
    assert n.gpu_free == [1000, 1000, 100]
    assert (n.cpu_milli_free, n.memory_mib_free) == (30000, 131072 - 4096)
    release(n, p)
    assert n.gpu_free == [1000, 1000, 600] and n.cpu_milli_free == 32000


def test_apply_refuses_oversubscription():
    n = node(gpus=(1000, 300))
    with pytest.raises(ValueError):
        apply(n, task(num_gpu=1, gpu_milli=500), (1,))
    with pytest.raises(ValueError):
        apply(n, task(num_gpu=2), (0, 0))
    assert n.gpu_free == [1000, 300]


@pytest.mark.parametrize(
    "gpus, t, pick",
    [
        ((1000, 700, 300), task(num_gpu=1, gpu_milli=300), 700),
        ((1000, 700, 300), task(num_gpu=1, gpu_milli=300), 300),
        ((1000, 1000, 0), task(num_gpu=2), None),
        ((1000, 500), task(num_gpu=0, cpu=5000), None),
    ],
)
def test_sig_after_matches_the_real_state(gpus, t, pick):
    n = node(gpus=gpus)
    before = signature(n)
    index = n.gpu_free.index(pick) if t.is_share else None
    indices = (index,) if t.is_share else tuple(i for i, g in enumerate(n.gpu_free) if g == 1000)
    apply(n, t, indices[: t.num_gpu])
    assert sig_after(before, t, pick) == signature(n)
