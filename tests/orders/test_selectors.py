import pytest

from apps.orders.models import ApprovalPolicy
from apps.orders.selectors import approval_policy_of
from tests.factories import ParkFactory

pytestmark = pytest.mark.django_db


def test_a_park_without_an_approval_policy_has_the_default_one():
    park = ParkFactory()
    policy = approval_policy_of(park.pk)
    default = ApprovalPolicy()
    assert policy.pk is None
    assert (
        policy.unverified_needs_approval,
        policy.max_accelerators,
        policy.max_hourly_minor,
    ) == (default.unverified_needs_approval, None, None)


@pytest.mark.parametrize("unverified", [True, False])
def test_a_parks_approval_policy_is_read_as_it_was_set(unverified):
    park = ParkFactory()
    ApprovalPolicy.objects.create(
        park=park, unverified_needs_approval=unverified, max_accelerators=8, max_hourly_minor=900
    )
    policy = approval_policy_of(park.pk)
    assert policy.unverified_needs_approval is unverified
    assert (policy.park_id, policy.max_accelerators, policy.max_hourly_minor) == (park.pk, 8, 900)
