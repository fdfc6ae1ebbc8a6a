import factory

from apps.sharedfs.models import SharedFileSystem
from apps.workloads.models import WorkloadKind
from tests.factories import Factory, OrganizationFactory, RegionFactory, WorkloadFactory


class SharedFileSystemFactory(Factory):
    """A file system's row only: no database on the storage server (services make that)."""

    class Meta:
        model = SharedFileSystem

    organization = factory.SubFactory(OrganizationFactory)
    region = factory.SubFactory(RegionFactory, park=factory.SelfAttribute("..organization.park"))
    workload = factory.SubFactory(
        WorkloadFactory,
        organization=factory.SelfAttribute("..organization"),
        kind=WorkloadKind.SHAREDFS,
    )
    name = factory.LazyAttribute(lambda o: f"loam-o{o.organization.pk}-r{o.region.pk}")
    used_bytes = 3 * 1024**3
