"""Outside a demo park (settings.LOAM_DEMO off, production's default) the simulator is not
offered: its hosts do not exist, so no tenant may order one and pay for it."""

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ValidationError

from apps.core.errors import DomainError
from apps.orchestration.backends.base import BackendError
from apps.orchestration.backends.registry import driver_names, driver_of
from apps.orchestration.selectors import schedulable_nodes
from apps.orchestration.services import register_backend
from apps.orders.services import submit_create
from tests.factories import ParkOperatorFactory, RegionFactory
from tests.worlds import sellable_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def production(settings):
    settings.LOAM_DEMO = False
    return settings


def test_a_demo_park_offers_the_simulator_and_production_does_not(settings):
    settings.LOAM_DEMO = True
    assert "simulator" in driver_names()
    settings.LOAM_DEMO = False
    assert "simulator" not in driver_names()
    assert {"slurm", "agent"} <= set(driver_names())


def test_no_tenant_orders_a_simulated_host_outside_a_demo_park(production):
    world = sellable_world()
    assert not schedulable_nodes(park=world.organization.park).exists()
    with pytest.raises(DomainError, match="simulator"):  # a refusal with its reason, never a 500
        submit_create(organization=world.organization, actor=world.owner, request=world.request)
    with pytest.raises(BackendError, match="demo park"):
        driver_of(world.pool.backend)


def test_the_simulator_cannot_be_registered_outside_a_demo_park(production):
    region = RegionFactory()
    operator = ParkOperatorFactory(park=region.park).user
    with pytest.raises(ValidationError, match="simulator") as refused:
        register_backend(
            park=region.park, operator=operator, name="sim", driver="simulator", config={}
        )
    assert "known" in str(refused.value)


def test_deploy_checks_warn_while_the_park_is_a_demo(settings):
    settings.LOAM_DEMO = True
    assert "loam.W002" in {message.id for message in run_checks(include_deployment_checks=True)}
    settings.LOAM_DEMO = False
    assert "loam.W002" not in {message.id for message in run_checks(include_deployment_checks=True)}
