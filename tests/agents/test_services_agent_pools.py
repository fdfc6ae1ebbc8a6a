"""A pool for partner servers, added from the join-token page with no JSON to write
(apps.agents.services.add_agent_pool): the park's first makes its agent backend."""

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from apps.agents import services
from apps.agents.models import JoinToken
from apps.core.errors import PermissionDenied
from apps.orchestration.models import Backend, Pool
from tests.factories import (
    AcceleratorModelFactory,
    BackendFactory,
    ParkOperatorFactory,
    RegionFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def place(park):
    return RegionFactory(park=park, code="wuxi"), AcceleratorModelFactory(slug="l40s")


def add(park, operator, place, name="wuxi-l40s"):
    region, model = place
    return services.add_agent_pool(
        park=park, operator=operator, name=name, region=region, accelerator_model=model
    )


def test_the_first_pool_makes_the_parks_agent_backend_and_lists_itself_in_its_config(
    park, operator, place
):
    pool = add(park, operator, place)

    backend = Backend.objects.get(park=park)
    assert (backend.name, backend.driver) == ("agents", "agent")
    assert backend.config == {"pools": [{"name": "wuxi-l40s", "accelerator_model": "l40s"}]}
    assert (pool.backend, pool.region, pool.accelerator_model) == (backend, *place)


def test_later_pools_join_the_same_backend(park, operator, place):
    add(park, operator, place)
    add(park, operator, place, name="wuxi-l40s-b")

    [backend] = Backend.objects.filter(park=park)
    assert [p["name"] for p in backend.config["pools"]] == ["wuxi-l40s", "wuxi-l40s-b"]
    assert Pool.objects.filter(backend=backend).count() == 2


def test_an_agent_backend_registered_before_is_used(park, operator, place):
    existing = BackendFactory(park=park, name="partners", driver="agent", config={"pools": []})

    assert add(park, operator, place).backend == existing


def test_a_name_taken_in_the_backend_is_refused(park, operator, place):
    add(park, operator, place)
    with pytest.raises(ValidationError) as refused:
        add(park, operator, place)
    assert "name" in refused.value.message_dict
    assert Pool.objects.count() == 1


def test_a_region_of_another_park_is_refused(park, operator, place):
    _region, model = place
    elsewhere = RegionFactory()
    with pytest.raises(ValidationError) as refused:
        services.add_agent_pool(
            park=park, operator=operator, name="x", region=elsewhere, accelerator_model=model
        )
    assert "region" in refused.value.message_dict


def test_only_the_parks_operators_add_pools(park, place):
    stranger = UserFactory()
    ParkOperatorFactory(user=stranger)  # operates another park
    with pytest.raises(PermissionDenied):
        add(park, stranger, place)
    assert not Pool.objects.exists()


def test_the_page_adds_a_pool_then_issues_a_token_for_it(client, park, operator, place):
    region, model = place
    client.force_login(operator)
    url = reverse("agents_ops:token_list", args=[park.pk])
    assert 'id="no-agent-pools"' in client.get(url).content.decode()

    added = client.post(
        url,
        {
            "action": "add_pool",
            "name": "wuxi-l40s",
            "region": region.pk,
            "accelerator_model": model.pk,
        },
    )
    assert added.status_code == 302
    pool = Pool.objects.get(name="wuxi-l40s")
    issued = client.post(url, {"action": "issue", "pool": pool.pk, "valid_hours": 24})
    assert issued.status_code == 200
    assert JoinToken.objects.get().pool == pool


def test_bad_input_on_the_page_is_a_form_error(client, park, operator, place):
    region, _model = place
    client.force_login(operator)
    url = reverse("agents_ops:token_list", args=[park.pk])

    refused = client.post(
        url, {"action": "add_pool", "name": " ", "region": region.pk, "accelerator_model": "x"}
    )

    assert refused.status_code == 422
    assert set(refused.context["pool_form"].errors) == {"name", "accelerator_model"}
    assert not Pool.objects.exists()


def test_another_parks_operator_gets_a_404(client, park, place):
    region, model = place
    stranger = UserFactory()
    ParkOperatorFactory(user=stranger)
    client.force_login(stranger)

    answer = client.post(
        reverse("agents_ops:token_list", args=[park.pk]),
        {"action": "add_pool", "name": "p", "region": region.pk, "accelerator_model": model.pk},
    )

    assert answer.status_code == 404
    assert not Pool.objects.exists()
