"""The pools a host may be placed on, as an order reads them (written out) and as the ORM
reads them (`schedulable_park_pools`)."""

import pytest
from django.forms.models import model_to_dict

from apps.orchestration.backends.base import Capability
from apps.orchestration.selectors import host_pools, schedulable_park_pools
from tests.factories import (
    AcceleratorModelFactory,
    AgentPoolFactory,
    BackendFactory,
    NodeFactory,
    ParkFactory,
    PoolFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def pools():
    """A park's pools of one accelerator model, those that may place hosts and the others."""
    park, model = ParkFactory(), AcceleratorModelFactory()
    backend = BackendFactory(park=park)
    open_pool = PoolFactory(backend=backend, accelerator_model=model)
    NodeFactory(pool=open_pool)
    NodeFactory(pool=open_pool, health="down")
    drained = PoolFactory(backend=backend, accelerator_model=model, region=open_pool.region)
    NodeFactory(pool=drained, is_drained=True)
    empty = PoolFactory(backend=backend, accelerator_model=model)  # its own region, no node
    agent = AgentPoolFactory(backend__park=park, accelerator_model=model, region=open_pool.region)
    NodeFactory(pool=agent)
    # None of these: another model's, not schedulable, a disabled backend's, a backend's that
    # runs tasks, not hosts, another park's.
    PoolFactory(backend=backend)
    PoolFactory(backend=backend, accelerator_model=model, is_schedulable=False)
    PoolFactory(backend=BackendFactory(park=park, is_enabled=False), accelerator_model=model)
    PoolFactory(backend=BackendFactory(park=park, driver="slurm"), accelerator_model=model)
    PoolFactory(accelerator_model=model)
    return park, model, {"open": open_pool, "drained": drained, "empty": empty, "agent": agent}


def test_host_pools_are_the_orms_schedulable_pools_for_hosts_of_the_model(
    pools, django_assert_num_queries
):
    park, model, named = pools
    with django_assert_num_queries(1):
        found = host_pools(park, accelerator_model_id=model.pk)
        read = {
            pool.pk: (
                model_to_dict(pool),
                model_to_dict(pool.region),
                model_to_dict(pool.accelerator_model),
            )
            for pool in found
        }
    by_orm = schedulable_park_pools(park, capability=Capability.HOSTS).filter(
        accelerator_model=model
    )
    assert read == {
        pool.pk: (
            model_to_dict(pool),
            model_to_dict(pool.region),
            model_to_dict(pool.accelerator_model),
        )
        for pool in by_orm
    }
    assert {pool.pk: (pool.driver, pool.has_open_node) for pool in found} == {
        named["open"].pk: ("simulator", True),
        named["drained"].pk: ("simulator", False),
        named["empty"].pk: ("simulator", False),
        named["agent"].pk: ("agent", True),
    }


def test_host_pools_of_a_region_are_those_in_it(pools):
    park, model, named = pools
    found = host_pools(park, accelerator_model_id=model.pk, region=named["open"].region)
    assert {pool.pk for pool in found} == {named[n].pk for n in ("open", "drained", "agent")}
