"""The placement engine on the openb production trace (Alibaba GPU cluster, FGD's ATC'23 data).

    python bench/scheduler_openb.py [--nodes NODES.csv] [--pods PODS.csv] [--seeds 42-51]
                                    [--policies random,fgd,loam] [--jobs 1] [--json]
                                    [--power-model proportional|paper] [--pwr-weight 0.2]

The standard experiment of /work/shared/data/openb/README.md, for each policy and seed:

1. load the nodes (``sn,cpu_milli,memory_mib,gpu,model``) and the pod list (all columns, or
   only the first five, as the ``multigpu*`` files have);
2. inflate: draw pods with ``random.Random(seed).choice`` (with replacement) until the next one
   would take the total GPU request (``num_gpu * 1000``, or ``gpu_milli`` for a sharing pod)
   past 1.3 x the cluster's GPU capacity (read from the node file);
3. schedule them in that order, no departures; a pod that fits nowhere fails and is skipped.

Columns (policies x seeds):

- ``alloc_pct``: allocated milli-GPU / cluster milli-GPU after all arrivals (mean over seeds);
- ``frag_ratio_pct``: at the end, the cluster's FGD fragmentation measured against the GPU
  tasks of the workload (the pod list's task-type histogram without CPU-only types), over the
  free GPU milli: the share of idle GPU capacity a GPU task drawn from the workload could not
  use (mean over seeds; 0 when no GPU is free);
- ``failed``: tasks that fit nowhere (mean over seeds);
- ``placements_per_s``: tasks actually placed / seconds of the scheduling loop alone
  (``time.perf_counter`` around it; loading, inflating and building the cluster are outside;
  failed attempts count in the time but not in the numerator). Median over seeds. Every run
  starts with cold caches.
- ``mean_power_kw`` / ``power_kw``: the cluster's estimated power (``scheduler.power``), the
  mean over arrivals of the power after each arrival (every node on, idle ones at idle power)
  and the power after the last; ``w_per_gpu``: final watts / allocated GPUs (allocated
  milli-GPU / 1000). Means over seeds. ``--power-model proportional`` (default): utilisation-
  proportional CPU and GPU power; ``paper``: the PWR paper's step model (a busy GPU or socket
  at full power). Power is not computed in the timed loop: the loop only records each
  placement, and the power curve is replayed from those records afterwards.

PWR and PWR+FGD (``--pwr-weight``, default 0.2) always score with the paper's step model,
as the paper does, whatever model the report uses; so does loam's power tie-break
(``--loam-power-weight`` blends a power score into loam's, for the trade-off curve).

FGD, PWR+FGD and loam score against the pod list's task-type histogram: FGD as the paper's simulator
(``typicalPodsConfig``: the most popular (CPU, GPU) types covering 95 % of the tasks), loam its
own (``Loam.distribution_for``). The fragmentation ratio uses the 95 % histogram with memory.

With ``--json`` stdout holds exactly one JSON object ``{"policies": {name: {alloc_pct,
frag_ratio_pct, failed, placements_per_s, power_kw, mean_power_kw, w_per_gpu}}}``; the wall
time goes to stderr. No Django needed.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from apps.orchestration.scheduler.baselines import POLICY_NAMES, make_policy  # noqa: E402
from apps.orchestration.scheduler.engine import Cluster  # noqa: E402
from apps.orchestration.scheduler.fragmentation import ShapeDistribution, gpu_only  # noqa: E402
from apps.orchestration.scheduler.model import MILLI, NodeState, TaskRequest  # noqa: E402
from apps.orchestration.scheduler.power import PowerModel  # noqa: E402

DATA = Path("/work/shared/data/openb")
DEFAULT_NODES = DATA / "openb_node_list_all_node.csv"
DEFAULT_PODS = DATA / "openb_pod_list_default.csv"
INFLATION = 1.3
COVERAGE = 0.95


def load_nodes(path) -> list[dict]:
    """Node rows as plain dicts (each run builds fresh ``NodeState``s from them)."""
    rows = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            gpus = int(row["gpu"] or 0)
            rows.append(
                {
                    "id": row["sn"],
                    "cpu_milli_total": int(row["cpu_milli"]),
                    "memory_mib_total": int(row["memory_mib"]),
                    "gpu_count": gpus,
                    "gpu_model": (row.get("model") or "").strip() if gpus else "",
                }
            )
    if not rows:
        raise SystemExit(f"{path}: no nodes")
    return rows


def build_nodes(rows: list[dict]) -> list[NodeState]:
    return [
        NodeState(
            id=r["id"],
            cpu_milli_total=r["cpu_milli_total"],
            memory_mib_total=r["memory_mib_total"],
            gpu_free=[MILLI] * r["gpu_count"],
            gpu_model=r["gpu_model"],
        )
        for r in rows
    ]


def load_pods(path) -> list[TaskRequest]:
    pods = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            spec = (row.get("gpu_spec") or "").strip()
            pods.append(
                TaskRequest(
                    id=row["name"],
                    cpu_milli=int(row["cpu_milli"]),
                    memory_mib=int(row["memory_mib"]),
                    num_gpu=int(row["num_gpu"] or 0),
                    gpu_milli=int(row["gpu_milli"] or 0),
                    gpu_models=frozenset(m for m in spec.split("|") if m),
                )
            )
    if not pods:
        raise SystemExit(f"{path}: no pods")
    return pods


def inflate(pods: list[TaskRequest], capacity_milli: int, seed: int, ratio=INFLATION):
    """README step 2: seeded draws with replacement until the next would pass the limit."""
    rng = random.Random(seed)
    limit = ratio * capacity_milli
    out, total = [], 0
    if not any(p.gpu_request_milli for p in pods):
        raise SystemExit("the pod list asks for no GPU; inflation would never stop")
    while True:
        pod = rng.choice(pods)
        if total + pod.gpu_request_milli > limit:
            return out
        out.append(pod)
        total += pod.gpu_request_milli


def power_curve(node_rows, placements, power: PowerModel) -> list[float]:
    """Cluster watts after each arrival, replayed from the placements (None: it failed).

    Starts from the idle cluster and adds each placement's change to its node's power."""
    index = {r["id"]: i for i, r in enumerate(node_rows)}
    models = [r["gpu_model"] for r in node_rows]
    cpu_total = [r["cpu_milli_total"] for r in node_rows]
    cpu_free = list(cpu_total)
    gpu_free = [[MILLI] * r["gpu_count"] for r in node_rows]
    node_power = power.node_power
    watts = sum(
        power.idle_power(m, c, len(g)) for m, c, g in zip(models, cpu_total, gpu_free, strict=True)
    )
    curve = []
    for p in placements:
        if p is not None:
            i = index[p.node_id]
            before = node_power(models[i], cpu_total[i], cpu_free[i], gpu_free[i])
            cpu_free[i] -= p.cpu_milli
            gpus = gpu_free[i]
            for g in p.gpu_indices:
                gpus[g] -= p.gpu_milli
            watts += node_power(models[i], cpu_total[i], cpu_free[i], gpus) - before
        curve.append(watts)
    return curve


def run_one(
    node_rows, tasks, name, seed, pods, frag_dist, power_step=False, pwr_weight=None, loam_w=0.0
):
    nodes = build_nodes(node_rows)
    # A fresh policy per run: its task-type histogram comes from the pod list, memo empty.
    policy = make_policy(
        name, seed=seed, workload=pods, pwr_weight=pwr_weight, loam_power_weight=loam_w
    )
    cluster = Cluster(nodes, policy, seed=seed)
    schedule = cluster.schedule
    placements = []
    record = placements.append
    start = time.perf_counter()
    for task in tasks:
        record(schedule(task))
    seconds = time.perf_counter() - start
    placed = len(placements) - placements.count(None)
    power = PowerModel(step=power_step)
    curve = power_curve(node_rows, placements, power)
    capacity = cluster.gpu_milli_total()
    allocated = cluster.gpu_milli_allocated()
    free = capacity - allocated
    frag = sum(frag_dist.fragmentation(n) for n in nodes)
    final_w = power.cluster_power(nodes)
    if curve and abs(curve[-1] - final_w) > 1e-6 * max(1.0, final_w):
        raise AssertionError(f"power replay {curve[-1]} != final state {final_w}")
    return {
        "power_kw": final_w / 1000,
        "mean_power_kw": statistics.fmean(curve) / 1000 if curve else final_w / 1000,
        "w_per_gpu": final_w / (allocated / MILLI) if allocated else 0.0,
        "alloc_pct": 100.0 * allocated / capacity if capacity else 0.0,
        "frag_ratio_pct": 100.0 * frag / free if free else 0.0,
        "failed": len(tasks) - placed,
        "placements_per_s": placed / seconds if seconds > 0 else float("inf"),
        "groups": cluster.group_count,
    }


def parse_seeds(text: str) -> list[int]:
    seeds = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = (int(x) for x in part.split("-", 1))
            if hi < lo:
                raise argparse.ArgumentTypeError(f"bad seed range {part!r}")
            seeds.extend(range(lo, hi + 1))
        else:
            seeds.append(int(part))
    if not seeds:
        raise argparse.ArgumentTypeError("no seeds")
    return seeds


def parse_policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [n for n in names if n not in POLICY_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown policies {unknown}; choose from {', '.join(POLICY_NAMES)}"
        )
    return names


def _job(args):
    return args[2], args[3], run_one(*args)


def parse_weight(text: str) -> float:
    w = float(text)
    if not 0 <= w <= 1:
        raise argparse.ArgumentTypeError(f"weight {text} is outside 0..1")
    return w


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES)
    parser.add_argument("--pods", type=Path, default=DEFAULT_PODS)
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("42-51"))
    parser.add_argument("--policies", type=parse_policies, default=list(POLICY_NAMES))
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (timing: use 1)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--power-model",
        choices=("proportional", "paper"),
        default="proportional",
        help="how load turns into watts in the report (scheduler/power.py)",
    )
    parser.add_argument(
        "--pwr-weight", type=parse_weight, default=None, help="PWR's weight in pwr_fgd (0.2)"
    )
    parser.add_argument(
        "--loam-power-weight",
        type=parse_weight,
        default=0.0,
        help="blend a power score into loam's FGD score (0; the trade-off curve)",
    )
    args = parser.parse_args(argv)

    wall = time.perf_counter()
    node_rows = load_nodes(args.nodes)
    pods = load_pods(args.pods)
    capacity = sum(r["gpu_count"] for r in node_rows) * MILLI
    if capacity == 0:
        raise SystemExit(f"{args.nodes}: the cluster has no GPU")
    frag_dist = gpu_only(ShapeDistribution.from_tasks(pods, coverage=COVERAGE))
    workloads = {seed: inflate(pods, capacity, seed) for seed in args.seeds}

    jobs = [
        (
            node_rows,
            workloads[seed],
            name,
            seed,
            pods,
            frag_dist,
            args.power_model == "paper",
            args.pwr_weight,
            args.loam_power_weight,
        )
        for name in args.policies
        for seed in args.seeds
    ]
    if args.jobs > 1:
        from multiprocessing import Pool

        with Pool(args.jobs) as pool:
            results = pool.map(_job, jobs)
    else:
        results = [_job(j) for j in jobs]

    runs: dict[str, list[dict]] = {name: [] for name in args.policies}
    for name, _seed, res in results:
        runs[name].append(res)
    summary = {
        name: {
            "alloc_pct": round(statistics.fmean(r["alloc_pct"] for r in rs), 3),
            "frag_ratio_pct": round(statistics.fmean(r["frag_ratio_pct"] for r in rs), 3),
            "failed": round(statistics.fmean(r["failed"] for r in rs), 1),
            "placements_per_s": round(statistics.median(r["placements_per_s"] for r in rs), 1),
            "power_kw": round(statistics.fmean(r["power_kw"] for r in rs), 3),
            "mean_power_kw": round(statistics.fmean(r["mean_power_kw"] for r in rs), 3),
            "w_per_gpu": round(statistics.fmean(r["w_per_gpu"] for r in rs), 2),
        }
        for name, rs in runs.items()
    }
    wall = time.perf_counter() - wall

    if args.json:
        print(json.dumps({"policies": summary}))
        print(f"wall time {wall:.1f} s", file=sys.stderr)
        return 0
    tasks = statistics.fmean(len(w) for w in workloads.values())
    print(
        f"{args.pods.name} on {args.nodes.name}: {len(node_rows)} nodes, {capacity} milli-GPU, "
        f"{tasks:.0f} tasks per seed (mean), seeds {args.seeds[0]}..{args.seeds[-1]} "
        f"({len(args.seeds)}); power model: {args.power_model}"
    )
    print(
        f"{'policy':<12} {'alloc %':>8} {'frag %':>8} {'failed':>8} {'placements/s':>13} "
        f"{'mean kW':>8} {'final kW':>9} {'W/GPU':>7}"
    )
    for name, s in summary.items():
        print(
            f"{name:<12} {s['alloc_pct']:>8.2f} {s['frag_ratio_pct']:>8.2f} "
            f"{s['failed']:>8.1f} {s['placements_per_s']:>13.0f} "
            f"{s['mean_power_kw']:>8.1f} {s['power_kw']:>9.1f} {s['w_per_gpu']:>7.1f}"
        )
    print(f"wall time {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
