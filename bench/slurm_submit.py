"""Time from submitting a training task to Slurm until it runs, through Loam's Slurm driver.

Needs the test cluster (bash deploy/slurm/start.sh). For each count of --node-counts (default
"1,2": one-node jobs, then 2-node gang jobs with one GPU on each node), submits --jobs jobs, one
at a time
(each waits for the previous to be running, and to be gone once cancelled), round-robin over
the nodes and over --organizations tenants (each runs as its own Slurm account and Unix user,
made on its first job; 0: every job as the driver's own user), polls each every --poll seconds,
cancels it once running, and prints p50/p95/max of submit → running, and of the submit call
alone for a tenant's first job (its account made) and for the others. With --image (an image
the cluster has a bundle of, in LOAM_SLURM_IMAGES_DIR: pytorch, debian-12) each job runs in it,
as tasks do; without, on the bare node. No database is needed.

    python bench/slurm_submit.py --jobs 20 [--node-counts 1,2] [--organizations 2]
        [--first-organization 9000] [--image pytorch]
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from apps.orchestration.backends.base import TASK_PENDING, TaskSpec  # noqa: E402
from apps.orchestration.backends.registry import get_driver  # noqa: E402


def cluster_settings() -> dict:
    env_file = Path(os.environ.get("LOAM_SLURM_ROOT", REPO / "var" / "slurm")) / "env"
    settings = {}
    if env_file.is_file():
        for line in env_file.read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep:
                settings[name] = value
    settings.update({k: v for k, v in os.environ.items() if k.startswith("LOAM_SLURM_")})
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--node-counts", default="1,2", help="comma-separated, e.g. 1,2")
    parser.add_argument("--organizations", type=int, default=2)
    parser.add_argument(
        "--first-organization", type=int, default=9000, help="the tenants' ids start here"
    )
    parser.add_argument("--image", default="", help="run each job in this image's bundle")
    args = parser.parse_args()
    s = cluster_settings()
    config = {
        "url": s["LOAM_SLURM_URL"],
        "user": s["LOAM_SLURM_USER"],
        "key_file": s["LOAM_SLURM_JWT_KEY"],
        "jobs_dir": s["LOAM_SLURM_JOBS_DIR"],
        "slurm_conf": s.get("SLURM_CONF"),
    }
    if args.image:
        config["images_dir"] = s["LOAM_SLURM_IMAGES_DIR"]
    driver = get_driver("slurm", config)
    nodes = sorted(n.hostname for pool in driver.capacity() for n in pool.nodes)
    made = set()  # organizations whose account exists: their next submit is not a first
    for count in (int(c) for c in args.node_counts.split(",")):
        run(driver, args, nodes, count, made)


def run(driver, args, nodes: list[str], count: int, made: set) -> None:
    to_running, first_submits, submits = [], [], []
    for i in range(args.jobs):
        # None: every job as the configured user, as before tenants had accounts.
        organization_id = (
            args.first_organization + i % args.organizations if args.organizations else None
        )
        chosen = tuple(sorted(nodes[(i + k) % len(nodes)] for k in range(count)))
        spec = TaskSpec(
            name=f"bench-{count}n-{i}",
            node=chosen[0],
            nodes=chosen if count > 1 else (),
            accelerator_indices=(),
            accelerator_milli=1000,
            vcpu=1,
            ram_gb=1,
            image=args.image or "bench",
            command="sleep 30",
            organization_id=organization_id,
        )
        start = time.perf_counter()
        handle = driver.submit_task(spec)
        first = organization_id not in made
        made.add(organization_id)
        (first_submits if first else submits).append(time.perf_counter() - start)
        while driver.task_status(handle).state == TASK_PENDING:
            time.sleep(args.poll)
        to_running.append(time.perf_counter() - start)
        driver.cancel_task(handle)
        # Gone before the next submit: Slurm defers scheduling while a job completes, and a
        # submit within that moment would wait for its next cycle (about 3 s here).
        while not driver.task_status(handle).finished:
            time.sleep(args.poll)
    print(
        f"{count}-node jobs: {len(to_running)} over {len(nodes)} nodes and "
        f"{args.organizations} organizations, in {args.image or 'no image (the bare node)'}, "
        f"polled every {args.poll:g} s"
    )
    print(f"submit -> running: {spread(to_running)}")
    print(f"submit call, an organization's first job: {spread(first_submits)}")
    print(f"submit call, later jobs: {spread(submits)}")


def spread(seconds: list[float]) -> str:
    if not seconds:
        return "none"
    seconds = sorted(seconds)
    p95 = seconds[max(0, round(0.95 * len(seconds)) - 1)]
    return (
        f"p50 {statistics.median(seconds):.3f} s, p95 {p95:.3f} s, max {seconds[-1]:.3f} s "
        f"({len(seconds)})"
    )


if __name__ == "__main__":
    main()
