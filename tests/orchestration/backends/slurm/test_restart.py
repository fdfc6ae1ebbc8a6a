"""deploy/slurm/restart-rest.sh on the real test cluster: slurmrestd restarts alone, and a job
that runs meanwhile keeps running (stop.sh, which start.sh used to call, cancelled every job)."""

import os
import subprocess
import time
from pathlib import Path

import pytest

from apps.orchestration.backends.slurm.client import JobRequest

DEPLOY = Path(__file__).resolve().parents[4] / "deploy"
pytestmark = pytest.mark.slurm


def test_restarting_slurmrestd_keeps_a_running_job(slurm_cluster):
    run_dir = slurm_cluster.key_path.parent.parent  # start.sh keeps the key in <run dir>/state
    with slurm_cluster.client() as client:
        job_id = client.submit(
            JobRequest(
                script="#!/bin/bash\nsleep 30\n",
                working_dir=str(slurm_cluster.jobs_dir),
                name="restart-rest",
                memory_mb=100,
                standard_output="/dev/null",
            )
        )
        try:
            _until(lambda: client.job(job_id).state == "RUNNING")
            old_pid = (run_dir / "pids" / "slurmrestd.pid").read_text()

            restarted = subprocess.run(
                ["bash", str(DEPLOY / "slurm" / "restart-rest.sh")],
                env={**os.environ, "LOAM_SLURM_ROOT": str(run_dir)},
                capture_output=True,
                text=True,
                timeout=120,
            )

            assert restarted.returncode == 0, restarted.stdout + restarted.stderr
            assert (run_dir / "pids" / "slurmrestd.pid").read_text() != old_pid
            squeue = subprocess.run(
                ["squeue", "-h", "-j", str(job_id), "-o", "%T"],
                env={**os.environ, "SLURM_CONF": slurm_cluster.slurm_conf},
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert squeue.stdout.strip() == "RUNNING"
            with slurm_cluster.client() as fresh:  # a new connection to the new daemon
                fresh.ping()
                assert fresh.job(job_id).state == "RUNNING"
        finally:
            with slurm_cluster.client() as fresh:
                fresh.cancel(job_id)


def _until(condition, seconds=30.0):
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"not within {seconds} s")
        time.sleep(0.25)
