"""The test Slurm cluster of deploy/slurm/start.sh, as fixtures (`slurm_cluster`, `slurm`) that the
conftests of the tests needing it import.

Its settings come from the environment (LOAM_SLURM_URL, LOAM_SLURM_USER, LOAM_SLURM_JWT_KEY,
LOAM_SLURM_JOBS_DIR; .ci/run exports them) or else from var/slurm/env, which start.sh writes.
Without a reachable cluster the tests that use it are skipped, except in CI
(LOAM_REQUIRE_SERVICES=1), where they fail: CI must not pass by skipping them.
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from apps.orchestration.backends.slurm.client import SlurmClient, SlurmError

REPO = Path(__file__).resolve().parents[1]
ENV_FILE = Path(os.environ.get("LOAM_SLURM_ROOT", REPO / "var" / "slurm")) / "env"
KEYS = ("LOAM_SLURM_URL", "LOAM_SLURM_USER", "LOAM_SLURM_JWT_KEY")


@dataclass(frozen=True)
class SlurmCluster:
    url: str
    user: str
    key: bytes
    key_path: Path
    jobs_dir: Path
    slurm_conf: str  # for Slurm's command-line tools (scontrol), as SLURM_CONF
    images_dir: str | None  # the OCI bundles of the images jobs run in (None: the bare node)

    def client(self, **kwargs) -> SlurmClient:
        return SlurmClient(self.url, self.user, key=self.key, **kwargs)


def _settings() -> dict[str, str]:
    settings = {}
    if ENV_FILE.is_file():
        for line in ENV_FILE.read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep and not line.startswith("#"):
                settings[name.strip()] = value.strip()
    settings.update(
        {k: v for k, v in os.environ.items() if k.startswith("LOAM_SLURM_") or k == "SLURM_CONF"}
    )
    return settings


def _unavailable(reason: str):
    if os.environ.get("LOAM_REQUIRE_SERVICES") == "1":
        pytest.fail(f"the test Slurm cluster is required in CI: {reason}", pytrace=False)
    pytest.skip(f"needs the test Slurm cluster (bash deploy/slurm/start.sh): {reason}")


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    settings = _settings()
    missing = [k for k in KEYS if not settings.get(k)]
    if missing:
        _unavailable(f"{', '.join(missing)} not set and no {ENV_FILE}")
    key_path = Path(settings["LOAM_SLURM_JWT_KEY"])
    try:
        key = key_path.read_bytes()
    except OSError as exc:
        _unavailable(f"cannot read the JWT key {key_path}: {exc}")
    run_dir = key_path.parent.parent  # start.sh keeps the key in <run dir>/state
    cluster = SlurmCluster(
        url=settings["LOAM_SLURM_URL"],
        user=settings["LOAM_SLURM_USER"],
        key=key,
        key_path=key_path,
        jobs_dir=Path(settings.get("LOAM_SLURM_JOBS_DIR") or run_dir / "jobs"),
        slurm_conf=settings.get("SLURM_CONF") or str(run_dir / "etc" / "slurm.conf"),
        images_dir=settings.get("LOAM_SLURM_IMAGES_DIR") or None,
    )
    with cluster.client(timeout=10) as client:
        try:
            client.ping()
        except SlurmError as exc:
            _unavailable(f"{cluster.url} does not answer: {exc}")
    return cluster


@pytest.fixture
def slurm(slurm_cluster):
    """A client for the test cluster, closed after the test."""
    with slurm_cluster.client() as client:
        yield client


def require_images(cluster: SlurmCluster, *names: str) -> dict[str, str]:
    """{name: digest} of the images the cluster's bundles hold (deploy/slurm/bundles.sh makes
    them from `loam-agent image build`'s): skipped without them, failed in CI."""
    if not cluster.images_dir:
        _unavailable("LOAM_SLURM_IMAGES_DIR is not set (start.sh of an older deploy?)")
    digests = {}
    for name in names:
        try:
            built = json.loads((Path(cluster.images_dir) / name / "image.json").read_text())
        except (OSError, ValueError) as exc:
            _unavailable(
                f"no bundle of the image {name} (loam-agent image build --name {name}, "
                f"then deploy/slurm/bundles.sh): {exc}"
            )
        digests[name] = built["digest"]
    return digests


A100 = "a100-sxm-80gb"  # the catalog's model the test cluster's GRES "a100" maps to


def driver_config(cluster: SlurmCluster) -> dict:
    """A `slurm` Backend's config for the test cluster."""
    return {
        "url": cluster.url,
        "user": cluster.user,
        "key_file": str(cluster.key_path),
        "jobs_dir": str(cluster.jobs_dir),
        "gpu_models": {"a100": A100},
        "slurm_conf": cluster.slurm_conf,
        **({"images_dir": cluster.images_dir} if cluster.images_dir else {}),
    }


def slurm_park(park, operator, cluster: SlurmCluster, *, card_hour_minor: int):
    """The test cluster registered by `operator` as `park`'s backend "hpc" in a region "HPC
    centre", with an A100 image and a one-card training-task price; (backend, image)."""
    from apps.catalog.models import ResourceType
    from apps.orchestration.services import register_backend
    from tests.factories import (
        AcceleratorModelFactory,
        FlavorFactory,
        FlavorFamilyFactory,
        ImageFactory,
        PriceFactory,
        RegionFactory,
    )

    region = RegionFactory(park=park, code="hpc", name="HPC centre", latency_ms=5)
    model = AcceleratorModelFactory(name="A100 SXM 80GB", slug=A100, tdp_w=400)
    image = ImageFactory(park=park, code="pytorch", name="PyTorch", compatible_accelerators=[model])
    family = FlavorFamilyFactory(
        park=park, accelerator_model=model, resource_type=ResourceType.TRAINING_TASK
    )
    flavor = FlavorFactory(family=family, accelerator_count=1, vcpu=4, ram_gb=16)
    PriceFactory(region=region, flavor=flavor, amount_minor=card_hour_minor)
    backend = register_backend(
        park=park,
        operator=operator,
        name="hpc",
        driver="slurm",
        config=driver_config(cluster),
        region=region,
    )
    return backend, image
