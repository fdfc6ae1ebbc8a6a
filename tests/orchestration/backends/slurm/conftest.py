from tests.slurm import slurm, slurm_cluster  # noqa: F401  (fixtures)
