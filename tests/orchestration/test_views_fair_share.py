"""The back office's fair share and preemptible discount, on the scheduling policy page."""

import pytest

from apps.orchestration.models import FairShare, SchedulingPolicy
from tests.factories import ParkFactory, ParkOperatorFactory, UserFactory
from tests.orchestration.test_views import ops, policy_data  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}


def test_an_operator_gives_an_organization_shares(ops, task_world):  # noqa: F811
    url = f"/ops/tasks/policy/{task_world.park.pk}/shares/"

    response = ops.post(url, {"organization": task_world.organization.pk, "shares": "4"})

    assert response.status_code == 302
    assert FairShare.objects.get(organization=task_world.organization).shares == 4
    page = ops.get(f"/ops/tasks/policy/{task_world.park.pk}/", **ENGLISH).content.decode()
    assert f"{task_world.organization}: 4" in page


@pytest.mark.parametrize("shares", ["0", "1001", "many"])
def test_a_bad_share_is_a_form_error(ops, task_world, shares):  # noqa: F811
    response = ops.post(
        f"/ops/tasks/policy/{task_world.park.pk}/shares/",
        {"organization": task_world.organization.pk, "shares": shares},
        **ENGLISH,
    )

    assert response.status_code == 422
    assert response.context["share_form"].errors["shares"]
    assert not FairShare.objects.exists()


def test_another_parks_organization_or_operator_is_refused(client, task_world):
    other_park = ParkFactory()
    stranger = UserFactory()
    ParkOperatorFactory(park=other_park, user=stranger)
    client.force_login(stranger)

    response = client.post(
        f"/ops/tasks/policy/{task_world.park.pk}/shares/",
        {"organization": task_world.organization.pk, "shares": "4"},
    )

    assert response.status_code == 404
    assert not FairShare.objects.exists()


def test_the_policy_page_sets_the_preemptible_discount(ops, task_world):  # noqa: F811
    response = ops.post(
        f"/ops/tasks/policy/{task_world.park.pk}/",
        policy_data(preemptible_discount_pct="45", action="save"),
    )

    assert response.status_code == 302
    assert SchedulingPolicy.objects.get(park=task_world.park).preemptible_discount_pct == 45
