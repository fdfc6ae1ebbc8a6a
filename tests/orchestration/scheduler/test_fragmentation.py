"""FGD's fragmentation measure on examples worked out by hand."""

import random

import pytest

from apps.orchestration.scheduler.fragmentation import ShapeDistribution, gpu_only
from apps.orchestration.scheduler.model import signature
from apps.orchestration.scheduler.policies import FGD

from .helpers import node, task

SHARE = (1000, 0, 1, 500, frozenset())  # half a GPU
WHOLE = (1000, 0, 1, 1000, frozenset())  # one whole GPU
CPU = (1000, 0, 0, 0, frozenset())  # no GPU at all
TWO_ON_Y = (1000, 0, 2, 1000, frozenset({"Y"}))  # two whole GPUs of model Y


def dist(**counts):
    names = {"share": SHARE, "whole": WHOLE, "cpu": CPU, "two_y": TWO_ON_Y}
    return ShapeDistribution({names[k]: v for k, v in counts.items()}, include_memory=False)


def test_share_and_whole_types():
    d = dist(share=1, whole=1)
    # [1000, 300]: the 300 is too small for the half-GPU type and not whole: fragment for both.
    assert d.fragmentation(node(gpus=(1000, 300))) == 300
    # [1000, 600]: the 600 serves the half-GPU type, not the whole-GPU one: 0.5*0 + 0.5*600.
    assert d.fragmentation(node(gpus=(1000, 600))) == 300
    # Idle: nothing is fragment.
    assert d.fragmentation(node(gpus=(1000, 1000))) == 0
    # [600, 600]: no whole GPU, so the whole-GPU type sees all 1200 as fragment: 0.5*1200.
    assert d.fragmentation(node(gpus=(600, 600))) == 600


def test_cpu_type_sees_all_free_gpu_as_fragment():
    d = dist(share=1, whole=1, cpu=2)
    # (1*300 + 1*300 + 2*1300) / 4
    assert d.fragmentation(node(gpus=(1000, 300))) == 800
    assert d.weighted(signature(node(gpus=(1000, 300)))) == 3200


def test_a_node_that_cannot_fit_the_type_is_all_fragment():
    d = dist(share=1, whole=1)
    # CPU short (500 < 1000): neither type fits, all 1300 free milli is fragment.
    assert d.fragmentation(node(gpus=(1000, 300), cpu=500)) == 1300
    # Memory counts when the distribution includes it.
    with_mem = ShapeDistribution({(1000, 2048, 1, 1000, frozenset()): 1})
    assert with_mem.fragmentation(node(gpus=(1000,), mem=1024)) == 1000
    assert with_mem.fragmentation(node(gpus=(1000,), mem=4096)) == 0


def test_gpu_model_constraint():
    d = dist(two_y=1)
    assert d.fragmentation(node(gpus=(1000, 1000), model="X")) == 2000  # wrong model
    assert d.fragmentation(node(gpus=(1000, 1000), model="Y")) == 0
    assert d.fragmentation(node(gpus=(1000, 700), model="Y")) == 1700  # needs two whole GPUs
    assert d.fragmentation(node(gpus=(), model="")) == 0  # no GPU, nothing to fragment


def test_fgd_delta_and_gpu_choice():
    d = dist(share=1, whole=1)
    fgd = FGD(d, quantize=False)
    n = node(gpus=(1000, 600))
    t = task(num_gpu=1, gpu_milli=500)
    # On the 600 GPU: [1000, 100] -> F = 0.5*100 + 0.5*100 = 100, from 300: ΔF = -200.
    # On the idle GPU: [500, 600] -> F = 0.5*0 + 0.5*1100 = 550: ΔF = +250. FGD takes the 600.
    weighted_delta, pick = fgd.delta(t, signature(n))
    assert (weighted_delta / d.total, pick) == (-200, 600)
    # The simulator's node score: int(100 * sigmoid(200 / 1000)) = int(54.98) = 54.
    assert FGD(d).rank(t, signature(n)) == ((-54,), 600)
    assert FGD(d).score(0) == 50


def test_fgd_places_on_the_node_whose_fragmentation_grows_least():
    d = dist(share=1, whole=1)
    idle, used = node("idle", gpus=(1000, 1000)), node("used", gpus=(1000, 600))
    placement = FGD(d).schedule(task(num_gpu=1, gpu_milli=500), [idle, used])
    assert (placement.node_id, placement.gpu_indices) == ("used", (1,))
    assert used.gpu_free == [1000, 100] and idle.gpu_free == [1000, 1000]


def test_from_tasks_coverage_and_memory():
    tasks = [task(cpu=1000, mem=10, num_gpu=1)] * 6 + [task(cpu=2000, num_gpu=0)] * 3
    tasks += [task(cpu=3000, num_gpu=2)]
    d = ShapeDistribution.from_tasks(tasks, coverage=0.9, include_memory=False)
    assert [(k[0], k[1], k[2], c) for k, c in d.items()] == [(1000, 0, 1, 6), (2000, 0, 0, 3)]
    full = ShapeDistribution.from_tasks(tasks, coverage=1.0)
    assert full.total == 10 and full.popularity((1000, 10, 1, 1000, frozenset())) == 0.6
    assert gpu_only(full).total == 7


@pytest.mark.parametrize("include_memory", [True, False])
def test_fast_path_matches_the_definition(include_memory):
    rng = random.Random(7)
    tasks = [
        task(
            cpu=rng.choice([1000, 4000, 16000]),
            mem=rng.choice([1024, 8192]),
            num_gpu=(k := rng.choice([0, 1, 1, 2, 4])),
            gpu_milli=rng.choice([100, 250, 500, 810, 1000]) if k == 1 else 1000,
            gpu_models=rng.choice([frozenset(), frozenset({"X"}), frozenset({"Y", "Z"})]),
        )
        for _ in range(60)
    ]
    d = ShapeDistribution.from_tasks(tasks, coverage=1.0, include_memory=include_memory)
    for _ in range(200):
        n = node(
            gpus=[rng.choice([0, 90, 190, 500, 1000, 1000]) for _ in range(rng.choice([1, 2, 4]))],
            model=rng.choice(["X", "Y"]),
            cpu=rng.choice([2000, 32000]),
            mem=rng.choice([4096, 65536]),
        )
        by_type = d.fragmentation_by_type(n)
        expected = sum(p * f for _, p, f in by_type)
        assert d.fragmentation(n) == pytest.approx(expected)
