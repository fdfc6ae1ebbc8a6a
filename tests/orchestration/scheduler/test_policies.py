"""Each baseline on tiny clusters with a known answer, loam's extras, and the fast engine making
exactly the decisions the plain per-node loop makes."""

import random
from collections import Counter

import pytest

from apps.orchestration.scheduler.baselines import (
    POLICY_NAMES,
    PWR,
    PWRFGD,
    BestFit,
    DotProduct,
    GpuPacking,
    RandomPolicy,
    make_policy,
)
from apps.orchestration.scheduler.engine import Cluster
from apps.orchestration.scheduler.fragmentation import ShapeDistribution
from apps.orchestration.scheduler.loam import Loam
from apps.orchestration.scheduler.model import signature
from apps.orchestration.scheduler.policies import FGD

from .helpers import node, task


def test_best_fit_prefers_the_node_left_fullest():
    small = node("small", gpus=(1000, 1000), cpu=16000)
    big = node("big", gpus=(1000,) * 8, cpu=96000)
    assert BestFit().choose(task(num_gpu=1), [big, small]) is small
    # A sharing task takes the fullest GPU that holds it.
    n = node(gpus=(1000, 400, 700))
    assert BestFit().place(task(num_gpu=1, gpu_milli=300), n).gpu_indices == (1,)


def test_gpu_packing_tiers():
    idle = node("idle", gpus=(1000, 1000))
    half = node("half", gpus=(500, 1000))
    most = node("most", gpus=(300, 1000))
    nodes = [idle, half, most]
    # A share that fits a used GPU goes to the fullest used GPU.
    assert GpuPacking().choose(task(num_gpu=1, gpu_milli=300), nodes) is most
    assert GpuPacking().choose(task(num_gpu=1, gpu_milli=400), nodes) is half
    # A whole GPU goes to a node already in use before an idle one.
    assert GpuPacking().choose(task(num_gpu=1), [idle, half]) is half
    # Among idle nodes, the one with fewer GPUs.
    four = node("four", gpus=(1000,) * 4)
    assert GpuPacking().choose(task(num_gpu=1), [four, idle]) is idle


def test_dot_product_goes_where_least_is_free_of_what_the_task_needs():
    roomy = node("roomy", gpus=(1000, 1000), cpu=32000)
    tight = node("tight", gpus=(1000, 1000), cpu=32000, cpu_milli_free=6000)
    policy = DotProduct()
    assert policy.choose(task(num_gpu=0, cpu=4000), [roomy, tight]) is tight
    half = node("half", gpus=(1000, 0), cpu=32000)
    assert policy.choose(task(num_gpu=1, cpu=1000), [roomy, half]) is half


def test_random_is_seeded_uniform_and_feasible_only():
    nodes = [node(f"n{i}", gpus=(1000,)) for i in range(3)] + [node("full", gpus=(0,))]
    policy = RandomPolicy(seed=3)
    seen = Counter(policy.choose(task(), nodes).id for _ in range(600))
    assert set(seen) == {"n0", "n1", "n2"}
    assert all(150 < c < 250 for c in seen.values())
    a = [RandomPolicy(5).choose(task(), nodes).id for _ in range(5)]
    b = [RandomPolicy(5).choose(task(), nodes).id for _ in range(5)]
    assert a == b
    assert RandomPolicy(0).choose(task(num_gpu=2), nodes) is None


def test_loam_sends_cpu_tasks_to_nodes_without_free_gpus():
    d = ShapeDistribution({(1000, 0, 1, 1000, frozenset()): 1, (1000, 0, 0, 0, frozenset()): 1})
    gpu_node = node("gpu", gpus=(1000, 1000), cpu=64000)
    cpu_node = node("cpu", gpus=(), model="", cpu=64000)
    t = task(num_gpu=0, cpu=1000)
    assert Loam(d).choose(t, [gpu_node, cpu_node]) is cpu_node
    # FGD scores both 50 (ΔF = 0 on each) and takes the first in the list.
    assert FGD(d).choose(t, [gpu_node, cpu_node]) is gpu_node


def test_loam_picks_the_gpu_by_exact_delta_within_a_node():
    d = ShapeDistribution({(0, 0, 1, 100, frozenset()): 1, (0, 0, 1, 1000, frozenset()): 1000})
    n = node(gpus=(1000, 300, 150))
    t = task(cpu=0, mem=0, num_gpu=1, gpu_milli=100)
    # Every choice keeps the one whole GPU; the 150 GPU leaves 50, which nothing can use, the
    # 300 one leaves 200, which the 100-type can: ΔF is smaller on the 300 GPU.
    loam = Loam(d)
    key, pick = loam.rank(t, signature(n))
    assert pick == 300
    # FGD gives the node the same score but keeps the fullest GPU among equal scores.
    assert FGD(d).rank(t, signature(n)) == (key, 150)


def test_pwr_takes_the_node_whose_power_grows_least():
    v100 = node("v100", gpus=(1000, 1000), model="V100M32", cpu=48000)
    t4 = node("t4", gpus=(1000, 1000), model="T4", cpu=48000)
    whole = task(num_gpu=1)
    # Idle nodes: a T4 wakes for 60 W (+ socket), a V100 for 270 W (+ socket).
    assert PWR().choose(whole, [v100, t4]) is t4
    # A share fits on a V100 that is already busy, with its socket awake: no increase at all,
    # so PWR packs it there, on the busy GPU, rather than waking a T4.
    busy = node("busy", gpus=(1000, 600), model="V100M32", cpu=48000, cpu_milli_free=40000)
    share = task(num_gpu=1, gpu_milli=300)
    assert PWR().choose(share, [t4, busy]) is busy
    assert PWR().place(share, busy).gpu_indices == (1,)
    # Equal increases go to the first node in the list.
    twin = node("twin", gpus=(1000, 1000), model="T4", cpu=48000)
    assert PWR().choose(whole, [twin, t4]) is twin
    # CPU-only work packs onto an awake socket.
    awake = node("awake", gpus=(), model="", cpu=32000, cpu_milli_free=30000)
    asleep = node("asleep", gpus=(), model="", cpu=32000)
    assert PWR().choose(task(num_gpu=0, cpu=2000), [asleep, awake]) is awake


def test_pwr_fgd_blends_the_two_scores():
    d = ShapeDistribution({(1000, 0, 1, 1000, frozenset()): 1})
    v100 = node("v100", gpus=(1000, 1000), model="V100M32", cpu=48000)
    t4 = node("t4", gpus=(1000, 1000), model="T4", cpu=48000)
    whole = task(num_gpu=1)
    # FGD alone: both nodes score the same, the first wins; with PWR's weight, the T4.
    assert PWRFGD(d, pwr_weight=0.0).choose(whole, [v100, t4]) is v100
    assert FGD(d).choose(whole, [v100, t4]) is v100
    assert PWRFGD(d, pwr_weight=0.2).choose(whole, [v100, t4]) is t4
    # The key is kube-scheduler's integer weighted sum: 200 * PWR + 800 * FGD.
    p = PWRFGD(d, pwr_weight=0.2)
    p.prepare([v100, t4])
    (key,), _ = p.rank(whole, signature(t4))
    (fgd_key,), _ = FGD(d).rank(whole, signature(t4))
    assert key == -(200 * p.power_score.score(whole, signature(t4)) - 800 * fgd_key)


def test_loam_packs_cpu_work_onto_an_awake_socket():
    d = ShapeDistribution({(1000, 0, 1, 1000, frozenset()): 1, (1000, 0, 0, 0, frozenset()): 1})
    asleep = node("asleep", gpus=(), model="", cpu=32000)
    awake = node("awake", gpus=(), model="", cpu=32000, cpu_milli_free=30000)
    assert Loam(d).choose(task(num_gpu=0, cpu=1000), [asleep, awake]) is awake


def test_make_policy_names_and_errors():
    tasks = [task(), task(num_gpu=0)]
    for name in ("random", "best_fit", "gpu_packing", "dot_product", "fgd", "loam", "pwr"):
        assert make_policy(name, workload=tasks).name == name
    assert set(POLICY_NAMES) >= {"pwr", "pwr_fgd"}
    pwr_fgd = make_policy("pwr_fgd", workload=tasks)
    assert pwr_fgd.name == "pwr_fgd" and pwr_fgd.pwr_weight == 0.2
    assert not pwr_fgd.dist.include_memory  # FGD's part as the simulator
    assert make_policy("pwr_fgd", workload=tasks, pwr_weight=0.05).pwr_weight == 0.05
    assert make_policy("loam", workload=tasks, loam_power_weight=0.1).power_weight_milli == 100
    with pytest.raises(ValueError):
        make_policy("pwr_fgd")
    with pytest.raises(ValueError):
        make_policy("pwr_fgd", workload=tasks, pwr_weight=2)
    fgd = make_policy("fgd", workload=tasks)
    assert not fgd.dist.include_memory  # as the simulator
    assert make_policy("loam", workload=tasks).dist.include_memory
    with pytest.raises(ValueError):
        make_policy("fgd")
    with pytest.raises(ValueError):
        make_policy("first_fit")


def _cluster(rng):
    kinds = [
        ("G2", 8, 96000),
        ("T4", 2, 104000),
        ("P100", 2, 64000),
        ("", 0, 32000),
    ]
    out = []
    for i in range(40):
        model, gpus, cpu = rng.choice(kinds)
        out.append(node(f"n{i:02d}", gpus=(1000,) * gpus, model=model, cpu=cpu, mem=262144))
    return out


def _tasks(rng, n):
    out = []
    for i in range(n):
        k = rng.choice([0, 1, 1, 1, 2, 4, 8])
        out.append(
            task(
                f"t{i}",
                cpu=rng.choice([2000, 6000, 12000, 32000]),
                mem=rng.choice([4096, 16384, 65536]),
                num_gpu=k,
                gpu_milli=rng.choice([200, 460, 810, 1000]) if k == 1 else 1000,
                gpu_models=rng.choice([frozenset()] * 4 + [frozenset({"T4"})]),
            )
        )
    return out


@pytest.mark.parametrize(
    "name", ["best_fit", "gpu_packing", "dot_product", "fgd", "loam", "pwr", "pwr_fgd"]
)
def test_engine_makes_the_same_decisions_as_the_plain_loop(name):
    rng = random.Random(11)
    template = _cluster(rng)
    tasks = _tasks(rng, 400)
    plain_nodes = [n.copy() for n in template]
    fast_nodes = [n.copy() for n in template]
    plain = make_policy(name, workload=tasks)
    fast = Cluster(fast_nodes, make_policy(name, workload=tasks))
    failures = 0
    for t in tasks:
        a = plain.schedule(t, plain_nodes)
        b = fast.schedule(t)
        assert a == b, t
        failures += a is None
    assert 0 < failures < len(tasks)  # the cluster filled up: the tail was exercised
    assert [n.gpu_free for n in plain_nodes] == [n.gpu_free for n in fast_nodes]


def test_engine_random_policy_and_random_ties_stay_feasible_and_reproducible():
    rng = random.Random(3)
    template = _cluster(rng)
    tasks = _tasks(rng, 300)

    def run(policy, seed):
        nodes = [n.copy() for n in template]
        c = Cluster(nodes, policy, seed=seed)
        return [p.node_id if p else None for p in map(c.schedule, tasks)], c

    a, c = run(RandomPolicy(1), 1)
    b, _ = run(RandomPolicy(1), 1)
    assert a == b and any(x is None for x in a)
    assert all(0 <= g <= 1000 for n in c.nodes for g in n.gpu_free)

    class RandomTieFGD(FGD):
        random_ties = True

    d = ShapeDistribution.from_tasks(tasks)
    x, c = run(RandomTieFGD(d), 2)
    y, _ = run(RandomTieFGD(d.copy()), 2)
    assert x == y
    assert c.gpu_milli_allocated() > 0.5 * c.gpu_milli_total()


def test_engine_release_puts_a_node_back():
    nodes = [node("a", gpus=(1000, 1000)), node("b", gpus=(1000,))]
    c = Cluster(nodes, BestFit())
    p = c.schedule(task(num_gpu=1))
    assert p.node_id == "b"
    assert c.schedule(task(num_gpu=2)).node_id == "a"
    assert c.schedule(task(num_gpu=1)) is None
    c.release(p)
    assert c.schedule(task(num_gpu=1)).node_id == "b"


def test_engine_follows_a_distribution_learned_online():
    """Learning task types as they arrive (``observe``) must not leave stale cached ranks."""
    rng = random.Random(5)
    template = _cluster(rng)
    tasks = _tasks(rng, 300)
    plain_nodes = [n.copy() for n in template]
    fast_nodes = [n.copy() for n in template]
    plain_dist, fast_dist = ShapeDistribution(), ShapeDistribution()
    plain, fast = FGD(plain_dist), Cluster(fast_nodes, FGD(fast_dist))
    for t in tasks:
        plain_dist.observe(t)
        fast_dist.observe(t)
        assert plain.schedule(t, plain_nodes) == fast.schedule(t)
