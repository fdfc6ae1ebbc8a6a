"""The feasibility filters (scheduler/filters.py): one test per reason code, and the fast
signature check agreeing with the full one."""

from apps.orchestration.scheduler import filters
from apps.orchestration.scheduler.model import signature

from .helpers import node, task

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
