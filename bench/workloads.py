"""For the bench scripts that write their worlds in bulk: a Workload for each host or task."""


def give_workloads(owners, kind: str) -> None:
    """Make one Workload for each of `owners` (unsaved instances or tasks, their organizations
    saved) and attach it, in one statement, as the services do one by one."""
    from apps.workloads.models import Workload

    workloads = Workload.objects.bulk_create(
        Workload(organization=owner.organization, kind=kind) for owner in owners
    )
    for owner, workload in zip(owners, workloads, strict=True):
        owner.workload = workload
