"""The orchestration tables refuse bad rows themselves: no form or full_clean() runs here."""

from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.orchestration.models import Accelerator, Allocation, Backend, Node, Placement, Pool
from apps.workloads.models import WorkloadKind
from tests.factories import (
    AcceleratorFactory,
    AllocationFactory,
    BackendFactory,
    NodeFactory,
    PlacementFactory,
    PoolFactory,
    TaskFactory,
    refused,
)

pytestmark = pytest.mark.django_db


class TestBackend:
    def test_valid_row_saves(self):
        backend = BackendFactory(config={"seed": 7})
        saved = Backend.objects.get(pk=backend.pk)
        assert (saved.driver, saved.config) == ("simulator", {"seed": 7})

    def test_duplicate_name_in_park_refused(self):
        backend = BackendFactory()
        with refused("backend_name_unique"):
            BackendFactory(park=backend.park, name=backend.name)

    def test_same_name_in_another_park_accepted(self):
        BackendFactory(name="sim")
        BackendFactory(name="sim")
        assert Backend.objects.filter(name="sim").count() == 2


class TestPool:
    def test_valid_row_saves_in_backend_park(self):
        pool = PoolFactory(pue=Decimal("1.00"))
        saved = Pool.objects.get(pk=pool.pk)
        assert saved.pue == Decimal("1.00")
        assert saved.region.park == saved.backend.park

    def test_duplicate_name_in_backend_refused(self):
        pool = PoolFactory()
        with refused("pool_name_unique"):
            PoolFactory(backend=pool.backend, name=pool.name)

    def test_pue_below_one_refused(self):
        with refused("pool_pue_at_least_1"):
            PoolFactory(pue=Decimal("0.99"))

    def test_pue_lowered_below_one_by_update_refused(self):
        pool = PoolFactory()
        with refused("pool_pue_at_least_1"):
            Pool.objects.filter(pk=pool.pk).update(pue=Decimal("0.50"))


class TestNode:
    def test_valid_row_saves(self):
        node = NodeFactory(health="degraded")
        assert Node.objects.get(pk=node.pk).health == "degraded"

    def test_duplicate_hostname_in_pool_refused(self):
        node = NodeFactory()
        with refused("node_hostname_unique"):
            NodeFactory(pool=node.pool, hostname=node.hostname)

    def test_unknown_health_refused(self):
        with refused("node_health_known"):
            NodeFactory(health="on-fire")

    def test_zero_vcpu_refused(self):
        with refused("node_vcpu_positive"):
            NodeFactory(vcpu_total=0)

    def test_zero_ram_refused(self):
        with refused("node_ram_positive"):
            NodeFactory(ram_gb_total=0)


class TestAccelerator:
    def test_valid_row_saves(self):
        accelerator = AcceleratorFactory(index=0)
        assert Accelerator.objects.get(pk=accelerator.pk).index == 0

    def test_duplicate_index_on_node_refused(self):
        accelerator = AcceleratorFactory()
        with refused("accelerator_index_unique"):
            AcceleratorFactory(node=accelerator.node, index=accelerator.index)

    def test_deleting_an_allocation_frees_its_devices(self):
        allocation = AllocationFactory()
        accelerator = AcceleratorFactory(node=allocation.node, allocation=allocation)
        allocation.delete()
        accelerator.refresh_from_db()
        assert accelerator.allocation is None


class TestAllocation:
    def test_instance_allocation_saves_on_consistent_node(self):
        allocation = AllocationFactory()
        saved = Allocation.objects.get(pk=allocation.pk)
        instance = saved.workload.instance
        assert saved.workload.kind == WorkloadKind.HOST
        assert instance.node == saved.node
        assert instance.pool == saved.node.pool
        assert instance.region == saved.node.pool.region
        assert instance.organization.park == saved.node.pool.backend.park
        assert instance.flavor.family.accelerator_model == saved.node.pool.accelerator_model

    def test_task_allocation_saves(self):
        allocation = AllocationFactory(for_task=True)
        saved = Allocation.objects.get(pk=allocation.pk)
        assert saved.workload.kind == WorkloadKind.TASK
        assert saved.workload.task.node == saved.node

    def test_allocation_of_no_workload_refused(self):
        node = NodeFactory()
        with pytest.raises(IntegrityError, match="workload_id"), transaction.atomic():
            Allocation.objects.create(node=node, vcpu=8, ram_gb=32)

    def test_two_live_allocations_for_one_instance_refused(self):
        allocation = AllocationFactory()
        with refused("allocation_one_live_per_workload_node"):
            Allocation.objects.create(
                node=allocation.node, workload=allocation.workload, vcpu=8, ram_gb=32
            )

    def test_new_allocation_after_release_accepted(self):
        allocation = AllocationFactory(released_at=timezone.now())
        Allocation.objects.create(
            node=allocation.node, workload=allocation.workload, vcpu=8, ram_gb=32
        )
        live = Allocation.objects.filter(workload=allocation.workload, released_at__isnull=True)
        assert live.count() == 1

    def test_reviving_a_released_allocation_beside_a_live_one_refused(self):
        released = AllocationFactory(released_at=timezone.now())
        AllocationFactory(node=released.node, instance=released.workload.instance)
        with refused("allocation_one_live_per_workload_node"):
            Allocation.objects.filter(pk=released.pk).update(released_at=None)

    def test_two_live_allocations_for_one_task_refused(self):
        allocation = AllocationFactory(for_task=True)
        with refused("allocation_one_live_per_workload_node"):
            Allocation.objects.create(
                node=allocation.node, workload=allocation.workload, vcpu=8, ram_gb=32
            )

    def test_task_allocation_after_release_accepted(self):
        allocation = AllocationFactory(for_task=True, released_at=timezone.now())
        AllocationFactory(for_task=True, node=allocation.node, task=allocation.workload.task)
        assert Allocation.objects.filter(workload=allocation.workload).count() == 2


class TestPlacement:
    def test_host_placement_saves(self):
        placement = PlacementFactory()
        saved = Placement.objects.get(pk=placement.pk)
        assert saved.workload.instance == placement.workload.instance

    def test_task_placement_saves(self):
        task = TaskFactory()
        placement = PlacementFactory(instance=None, task=task)
        assert Placement.objects.get(pk=placement.pk).workload.task == task

    def test_placement_of_no_workload_refused(self):
        with pytest.raises(IntegrityError, match="workload_id"), transaction.atomic():
            PlacementFactory(instance=None, task=None)
