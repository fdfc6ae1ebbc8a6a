"""Slurm backend: runs tasks as Slurm batch jobs through slurmrestd (see client.py)."""
