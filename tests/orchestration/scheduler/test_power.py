"""The power model (scheduler/power.py): per-node arithmetic in both variants, the cluster sum,
and the 0..100 power score the PWR+FGD blend uses."""

import pytest

from apps.orchestration.scheduler.model import signature
from apps.orchestration.scheduler.power import (
    CPU_FOR_GPU,
    CPU_POWER,
    GPU_POWER,
    PAPER,
    PROPORTIONAL,
    UNKNOWN_GPU,
    Device,
    PowerModel,
    PowerScore,
    power_delta,
    sockets,
)

from .helpers import node, task


def test_figures_from_the_paper_repository():
    assert GPU_POWER["T4"] == Device(10, 70)
    assert GPU_POWER["G2"] == GPU_POWER["A10"] == Device(30, 150)
    assert GPU_POWER["G3"] == GPU_POWER["A100"] == Device(50, 400)
    assert GPU_POWER["V100M16"] == GPU_POWER["V100M32"] == Device(30, 300)
    assert CPU_POWER[CPU_FOR_GPU["G2"]] == Device(20, 270, cores=32)
    assert CPU_FOR_GPU[""] == CPU_FOR_GPU["P100"] == "Intel-Xeon-ES-2682-V4"
    with pytest.raises(ValueError):
        Device(100, 50)


def test_sockets_count_two_vcpus_per_core():
    assert sockets(96000, 32) == 2  # 48 cores on 32-core sockets
    assert sockets(104000, 24) == 3  # 52 cores on 24-core sockets
    assert sockets(32000, 16) == 1
    assert sockets(8000, 16) == 1
    assert sockets(0, 16) == 0


def test_an_idle_node_draws_idle_power_it_is_never_off():
    n = node(gpus=(1000,) * 8, model="G2", cpu=96000)
    # 2 sockets x 20 W + 8 GPUs x 30 W, in both variants.
    assert PROPORTIONAL.state_power(n) == PAPER.state_power(n) == 280
    assert PROPORTIONAL.idle_power("G2", 96000, 8) == 280
    cpu_only = node(gpus=(), model="", cpu=32000)
    assert PROPORTIONAL.state_power(cpu_only) == 15  # one E5-2682 v4 socket, idle


def test_proportional_model_arithmetic():
    n = node(gpus=(500, 1000, 0, 1000), model="T4", cpu=104000, cpu_milli_free=78000)
    # CPU: 3 sockets of 20..165 W at 26/104 = 25 % -> 3 * (20 + 145 * 0.25) = 168.75 W.
    # GPUs: 4 x 10 W idle + (70 - 10) x 1.5 GPUs allocated = 130 W.
    assert PROPORTIONAL.state_power(n) == pytest.approx(168.75 + 130)


def test_step_model_arithmetic():
    n = node(gpus=(500, 1000, 0, 1000), model="T4", cpu=104000, cpu_milli_free=78000)
    # 13 busy cores of 24 per socket: one socket at 165 W, two at 20 W; 2 busy GPUs at 70 W.
    assert PAPER.state_power(n) == pytest.approx(165 + 40 + 2 * 70 + 2 * 10)
    # A sliver of a GPU or of a core is enough to draw full power.
    m = node(gpus=(999, 1000), model="T4", cpu=104000, cpu_milli_free=102000)
    assert PAPER.state_power(m) == pytest.approx(165 + 40 + 70 + 10)


def test_unknown_models_fall_back():
    n = node(gpus=(1000, 0), model="X", cpu=32000)
    assert PROPORTIONAL.state_power(n) == pytest.approx(
        15 + 2 * UNKNOWN_GPU.idle_w + (UNKNOWN_GPU.full_w - UNKNOWN_GPU.idle_w)
    )


def test_cluster_power_is_the_sum_and_sig_power_matches():
    nodes = [
        node("a", gpus=(1000, 300), model="V100M32", cpu=48000, cpu_milli_free=40000),
        node("b", gpus=(), model="", cpu=96000, cpu_milli_free=1000),
        node("c", gpus=(1000,) * 4, model="P100", cpu=64000),
    ]
    for model in (PROPORTIONAL, PAPER, PowerModel(step=True)):
        assert model.cluster_power(nodes) == pytest.approx(sum(model.state_power(n) for n in nodes))
        for n in nodes:
            assert model.sig_power(signature(n)) == pytest.approx(model.state_power(n))


def test_power_delta_and_score():
    power = PowerModel(step=True)
    busy = node("busy", gpus=(1000, 400), model="T4", cpu=104000, cpu_milli_free=100000)
    idle = node("idle", gpus=(1000, 1000), model="T4", cpu=104000)
    share = task(cpu=1000, num_gpu=1, gpu_milli=300)
    # On the busy node the share joins the busy GPU and an awake socket: nothing more drawn.
    assert power_delta(power, share, signature(busy)) == (0, 400)
    # On the idle node it wakes a GPU (70 - 10) and a socket (165 - 20).
    assert power_delta(power, share, signature(idle)) == (60 + 145, 1000)
    score = PowerScore(power)
    score.prepare([busy, idle])
    assert score.span(share) == 205
    assert score.score(share, signature(busy)) == 100
    assert score.score(share, signature(idle)) == 0
