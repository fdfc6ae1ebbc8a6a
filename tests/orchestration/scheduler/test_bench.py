"""bench/scheduler_openb.py on tiny trace files in the openb format."""

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "bench" / "scheduler_openb.py"
POLICIES = {"random", "best_fit", "gpu_packing", "dot_product", "fgd", "loam", "pwr", "pwr_fgd"}
COLUMNS = {
    "alloc_pct",
    "frag_ratio_pct",
    "failed",
    "placements_per_s",
    "power_kw",
    "mean_power_kw",
    "w_per_gpu",
}


def load_bench():
    spec = importlib.util.spec_from_file_location("scheduler_openb", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load_bench()

NODES = """sn,cpu_milli,memory_mib,gpu,model
node-0,32000,131072,0,
node-1,64000,262144,4,A
node-2,64000,262144,4,A
node-3,32000,131072,2,B
node-4,96000,393216,8,A
"""

PODS_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
PODS_ROWS = [
    ("p0", 4000, 8192, 1, 1000, ""),
    ("p1", 2000, 4096, 1, 460, ""),
    ("p2", 2000, 4096, 1, 810, ""),
    ("p3", 8000, 16384, 0, 0, ""),
    ("p4", 16000, 65536, 2, 1000, ""),
    ("p5", 4000, 8192, 1, 250, "B"),
    ("p6", 32000, 131072, 8, 1000, ""),
    ("p7", 2000, 4096, 1, 500, "A|B"),
]


@pytest.fixture
def files(tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES)
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "\n".join(
            [PODS_HEADER]
            + [f"{n},{c},{m},{g},{gm},{s},LS,Running,0,10,0" for n, c, m, g, gm, s in PODS_ROWS]
        )
        + "\n"
    )
    five = tmp_path / "pods5.csv"
    five.write_text(
        "\n".join(
            ["name,cpu_milli,memory_mib,num_gpu,gpu_milli"]
            + [f"{n},{c},{m},{g},{gm}" for n, c, m, g, gm, _ in PODS_ROWS]
        )
        + "\n"
    )
    return nodes, pods, five


def check_summary(summary, policies=POLICIES):
    assert set(summary) == {"policies"}
    assert set(summary["policies"]) == set(policies)
    for name, row in summary["policies"].items():
        assert set(row) == COLUMNS, name
        assert 0 < row["mean_power_kw"] <= row["power_kw"]  # no departures: power only grows
        assert row["w_per_gpu"] > 0
        assert 0 < row["alloc_pct"] <= 100
        assert 0 <= row["frag_ratio_pct"] <= 100
        assert row["failed"] >= 0
        assert row["placements_per_s"] > 0


def test_main_json(files, capsys):
    nodes, pods, _ = files
    assert bench.main(["--nodes", str(nodes), "--pods", str(pods), "--seeds", "1-3", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # exactly one JSON object and nothing else
    check_summary(json.loads(out))


def test_five_column_pods_and_policy_selection(files, capsys):
    nodes, _, five = files
    argv = ["--nodes", str(nodes), "--pods", str(five), "--seeds", "7,8", "--policies", "loam,fgd"]
    assert bench.main([*argv, "--json"]) == 0
    check_summary(json.loads(capsys.readouterr().out), {"loam", "fgd"})
    assert bench.main(argv) == 0
    table = capsys.readouterr().out
    assert "loam" in table and "fgd" in table and "wall time" in table


def test_inflation_stops_before_the_limit(files):
    nodes, pods, _ = files
    rows = bench.load_nodes(nodes)
    capacity = sum(r["gpu_count"] for r in rows) * 1000
    assert capacity == 18000  # from the file, not a constant
    tasks = bench.load_pods(pods)
    drawn = bench.inflate(tasks, capacity, seed=4)
    total = sum(t.gpu_request_milli for t in drawn)
    assert total <= 1.3 * capacity
    # The draw that ended it (the same generator, one step further) would have passed 1.3x.
    rng = random.Random(4)
    assert [rng.choice(tasks) for _ in drawn] == drawn
    assert total + rng.choice(tasks).gpu_request_milli > 1.3 * capacity
    assert drawn == bench.inflate(tasks, capacity, seed=4)
    assert drawn != bench.inflate(tasks, capacity, seed=5)
    assert {t.gpu_models for t in tasks} >= {frozenset({"A", "B"}), frozenset({"B"})}


def test_seed_parsing():
    assert bench.parse_seeds("42-45") == [42, 43, 44, 45]
    assert bench.parse_seeds("42,43,50-51") == [42, 43, 50, 51]


def test_runs_as_a_plain_script_without_django(files):
    nodes, pods, _ = files
    env = {"PATH": "/usr/bin:/bin"}  # no DJANGO_SETTINGS_MODULE, no PYTHONPATH
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--seeds",
            "1",
            "--json",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    check_summary(json.loads(out.stdout))


def test_power_columns_replay_the_placements(files, capsys):
    nodes, pods, _ = files
    rows = bench.load_nodes(nodes)
    tasks = bench.load_pods(pods)
    capacity = sum(r["gpu_count"] for r in rows) * 1000
    drawn = bench.inflate(tasks, capacity, seed=2)
    frag = bench.gpu_only(bench.ShapeDistribution.from_tasks(tasks))
    for step in (False, True):
        res = bench.run_one(rows, drawn, "pwr", 2, tasks, frag, step)  # checks replay == state
        power = bench.PowerModel(step=step)
        idle = sum(
            power.idle_power(r["gpu_model"], r["cpu_milli_total"], r["gpu_count"]) for r in rows
        )
        assert idle / 1000 < res["mean_power_kw"] <= res["power_kw"]
        allocated = res["alloc_pct"] / 100 * capacity
        assert res["w_per_gpu"] == pytest.approx(res["power_kw"] * 1000 / (allocated / 1000))
    argv = ["--nodes", str(nodes), "--pods", str(pods), "--seeds", "1", "--json"]
    assert bench.main([*argv, "--power-model", "paper", "--pwr-weight", "0.1"]) == 0
    check_summary(json.loads(capsys.readouterr().out))
    assert bench.main([*argv, "--policies", "loam", "--loam-power-weight", "0.5"]) == 0
    check_summary(json.loads(capsys.readouterr().out), {"loam"})
