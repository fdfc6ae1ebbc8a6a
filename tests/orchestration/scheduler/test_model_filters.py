"""NodeState/TaskRequest, applying placements, and each feasibility filter's reason code."""

import pytest

from apps.orchestration.scheduler import filters
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


# --- one test per reason code --------------------------------------------------------------


def test_fits():
    assert filters.check(task(), node()) is None
    assert filters.fits(task(num_gpu=0), node(gpus=(), model=""))


def test_drained():
    assert filters.check(task(), node(drained=True)) == filters.DRAINED


def test_gpu_model():
    t = task(gpu_models={"V100M16", "V100M32"})
    assert filters.check(t, node(model="T4")) == filters.GPU_MODEL
    assert filters.check(t, node(model="V100M32")) is None
    # A model constraint on a CPU-only task constrains nothing.
    assert filters.check(task(num_gpu=0, gpu_models={"T4"}), node(model="G2")) is None


def test_region():
    t = task(regions={"hz"})
    assert filters.check(t, node(region="sh")) == filters.REGION
    assert filters.check(t, node(region="hz")) is None


def test_cpu():
    assert filters.check(task(cpu=40000), node()) == filters.CPU


def test_memory():
    assert filters.check(task(mem=200000), node()) == filters.MEMORY


def test_gpu_count():
    # A GPU at 999 free is not whole.
    assert filters.check(task(num_gpu=2), node(gpus=(1000, 999))) == filters.GPU_COUNT
    assert filters.check(task(num_gpu=1), node(gpus=(), model="")) == filters.GPU_COUNT
    assert filters.check(task(num_gpu=2), node(gpus=(1000, 1000))) is None


def test_gpu_share():
    t = task(num_gpu=1, gpu_milli=600)
    assert filters.check(t, node(gpus=(500, 500))) == filters.GPU_SHARE  # 1000 free, split
    assert filters.check(t, node(gpus=(500, 600))) is None


def test_reasons_lists_every_failure_and_has_text():
    t = task(cpu=99000, mem=999999, num_gpu=1, gpu_milli=600)
    got = filters.reasons(t, node(gpus=(100,), drained=True))
    assert got == [filters.DRAINED, filters.CPU, filters.MEMORY, filters.GPU_SHARE]
    assert all(code in filters.REASON_TEXT for code, _ in filters.CHECKS)


def test_sig_fits_agrees_with_check():
    nodes = [
        node(gpus=(1000, 400), model="T4", region="a"),
        node(gpus=(), model="", cpu=8000),
        node(gpus=(1000, 1000, 1000, 0), model="G2", region="b", mem=4096),
    ]
    tasks = [
        task(num_gpu=0, cpu=4000),
        task(num_gpu=1, gpu_milli=300),
        task(num_gpu=1, gpu_milli=500),
        task(num_gpu=3),
        task(num_gpu=1, gpu_models={"T4"}),
        task(num_gpu=1, regions={"b"}, mem=8192),
        task(num_gpu=0, cpu=9000),
    ]
    for n in nodes:
        for t in tasks:
            assert filters.sig_fits(t, signature(n)) == filters.fits(t, n), (n.id, t)


def test_check_is_the_first_of_the_reasons_in_the_order_of_checks():
    nodes = [
        node(gpus=(1000, 400), model="T4", region="a"),
        node(gpus=(), model="", cpu=8000),
        node(gpus=(1000, 1000, 1000, 0), model="G2", region="b", mem=4096),
        node(gpus=(100,), model="T4", region="b", drained=True),
        node(gpus=(500, 500), model="G2", region="a", cpu=2000),
    ]
    tasks = [
        task(num_gpu=0, cpu=4000),
        task(num_gpu=1, gpu_milli=300),
        task(num_gpu=1, gpu_milli=600),
        task(num_gpu=2),
        task(num_gpu=3, gpu_models={"G2"}, regions={"b"}),
        task(num_gpu=1, gpu_models={"T4"}, regions={"b"}),
        task(num_gpu=1, regions={"b"}, mem=8192),
        task(num_gpu=0, cpu=9000, gpu_models={"T4"}),
    ]
    for n in nodes:
        for t in tasks:
            reasons = filters.reasons(t, n)
            assert filters.check(t, n) == (reasons[0] if reasons else None), (n.id, t)
