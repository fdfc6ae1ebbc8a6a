import pytest
from django.forms.models import model_to_dict

from apps.orders.models import ApprovalPolicy
from apps.orders.selectors import approval_policy_of, flavor_and_image, image_runs_on
from tests.factories import FlavorFactory, FlavorFamilyFactory, ImageFactory, ParkFactory

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


# --- the flavor and the image an order names, read together -----------------------------------


def test_an_orders_flavor_and_image_are_one_statement_as_the_orm_loads_them(
    world, django_assert_num_queries
):
    with django_assert_num_queries(1):
        flavor, image = flavor_and_image(
            park=world.park,
            organization=world.organization,
            flavor_code="g1.2x",
            image_code="ubuntu-cuda",
        )
        # Loaded with its family and accelerator model, and whether the image runs on them.
        assert flavor.family.accelerator_model == world.model
        assert image_runs_on(image, world.model.pk)
    assert flavor == world.flavors[2] and image == world.image
    for loaded, stored in ((flavor, world.flavors[2]), (image, world.image)):
        stored.refresh_from_db()
        assert model_to_dict(loaded) == model_to_dict(stored)
    assert model_to_dict(flavor.family) == model_to_dict(world.family)
    assert model_to_dict(flavor.family.accelerator_model) == model_to_dict(world.model)


def test_an_image_for_other_cards_is_read_as_not_running_on_the_flavors(world):
    other = ImageFactory(park=world.park, code="euler-cann")
    _flavor, image = flavor_and_image(
        park=world.park,
        organization=world.organization,
        flavor_code="g1.1x",
        image_code="euler-cann",
    )
    assert image == other and not image_runs_on(image, world.model.pk)


@pytest.mark.parametrize(
    "flavor_code, image_code, found",
    [
        ("g1.1x", "nope", "flavor"),
        ("nope", "ubuntu-cuda", "image"),
        ("retired", "theirs", ""),  # inactive; another organization's own
        ("g1.1x", "ours", "flavor image"),  # the organization's own image
        ("elsewhere", "elsewhere", ""),  # another park's
    ],
)
def test_what_the_organization_may_not_order_is_none(
    world, other_organization, flavor_code, image_code, found
):
    FlavorFactory(family=world.family, code="retired", is_active=False, accelerator_count=3)
    ImageFactory(park=world.park, code="theirs", organization=other_organization)
    ImageFactory(park=world.park, code="ours", organization=world.organization)
    elsewhere = ParkFactory()
    FlavorFactory(family__park=elsewhere, code="elsewhere")
    ImageFactory(park=elsewhere, code="elsewhere")
    flavor, image = flavor_and_image(
        park=world.park,
        organization=world.organization,
        flavor_code=flavor_code,
        image_code=image_code,
    )
    assert (flavor is not None, image is not None) == ("flavor" in found, "image" in found)


def test_a_flavor_code_two_families_share_is_left_to_the_orms_lookup(world):
    other_family = FlavorFamilyFactory(park=world.park, accelerator_model=world.model, code="g2")
    FlavorFactory(family=other_family, code="g1.1x", accelerator_count=1)
    found = flavor_and_image(
        park=world.park,
        organization=world.organization,
        flavor_code="g1.1x",
        image_code="ubuntu-cuda",
    )
    assert found is None
