import pytest

from apps.orchestration.models import Accelerator
from apps.orchestration.services import register_node
from tests.factories import AllocationFactory, InstanceFactory, PoolFactory

pytestmark = pytest.mark.django_db


def indices(node):
    return sorted(node.accelerators.values_list("index", flat=True))


def test_register_node_creates_its_accelerators_and_is_idempotent():
    pool = PoolFactory()
    node = register_node(pool=pool, hostname="n1", accelerators=4, vcpu=64, ram_gb=512)
    again = register_node(pool=pool, hostname="n1", accelerators=4, vcpu=96, ram_gb=768)
    assert again.pk == node.pk
    assert indices(again) == [0, 1, 2, 3]
    again.refresh_from_db()
    assert (again.vcpu_total, again.ram_gb_total) == (96, 768)


def test_register_node_grows_and_shrinks_free_devices():
    pool = PoolFactory()
    node = register_node(pool=pool, hostname="n1", accelerators=2, vcpu=64, ram_gb=512)
    register_node(pool=pool, hostname="n1", accelerators=8, vcpu=64, ram_gb=512)
    assert indices(node) == list(range(8))
    register_node(pool=pool, hostname="n1", accelerators=3, vcpu=64, ram_gb=512)
    assert indices(node) == [0, 1, 2]


def test_register_node_never_removes_an_allocated_accelerator():
    pool = PoolFactory()
    node = register_node(pool=pool, hostname="n1", accelerators=4, vcpu=64, ram_gb=512)
    allocation = AllocationFactory(node=node, instance=InstanceFactory())
    Accelerator.objects.filter(node=node, index=3).update(allocation=allocation)
    with pytest.raises(ValueError, match="allocated"):
        register_node(pool=pool, hostname="n1", accelerators=2, vcpu=64, ram_gb=512)
    assert indices(node) == [0, 1, 2, 3]
