"""The quota table refuses bad rows itself: no form or full_clean() runs here."""

import pytest

from apps.quotas.models import QuotaLimit, QuotaResource
from tests.factories import (
    AcceleratorModelFactory,
    OrganizationFactory,
    ParkFactory,
    QuotaLimitFactory,
    refused,
)

pytestmark = pytest.mark.django_db


def test_organization_limit_saves():
    quota = QuotaLimitFactory()
    saved = QuotaLimit.objects.get(pk=quota.pk)
    assert saved.organization.park == saved.park
    assert (saved.resource, saved.limit) == (QuotaResource.ACCELERATORS, 8)


def test_park_wide_limit_saves():
    quota = QuotaLimitFactory(organization=None)
    assert QuotaLimit.objects.get(pk=quota.pk).organization is None


def test_per_model_limit_saves():
    quota = QuotaLimitFactory(per_model=True)
    assert QuotaLimit.objects.get(pk=quota.pk).accelerator_model is not None


def test_zero_limit_accepted():
    quota = QuotaLimitFactory(limit=0)
    assert QuotaLimit.objects.get(pk=quota.pk).limit == 0


def test_negative_limit_refused():
    with refused("quota_limit_not_negative"):
        QuotaLimitFactory(limit=-1)


def test_limit_made_negative_by_update_refused():
    quota = QuotaLimitFactory()
    with refused("quota_limit_not_negative"):
        QuotaLimit.objects.filter(pk=quota.pk).update(limit=-5)
    quota.refresh_from_db()
    assert quota.limit == 8


def test_unknown_resource_refused():
    with refused("quota_resource_known"):
        QuotaLimitFactory(resource="gpus")


def test_model_resource_without_model_refused():
    with refused("quota_model_iff_model_resource"):
        QuotaLimitFactory(resource=QuotaResource.MODEL_ACCELERATORS, accelerator_model=None)


@pytest.mark.parametrize(
    "resource", sorted(set(QuotaResource.values) - {QuotaResource.MODEL_ACCELERATORS})
)
def test_other_resource_with_model_refused(resource):
    with refused("quota_model_iff_model_resource"):
        QuotaLimitFactory(resource=resource, accelerator_model=AcceleratorModelFactory())


def test_duplicate_organization_resource_refused():
    quota = QuotaLimitFactory(resource=QuotaResource.VCPU)
    with refused("quota_org_resource_unique"):
        QuotaLimitFactory(
            park=quota.park, organization=quota.organization, resource=QuotaResource.VCPU
        )


def test_organization_resources_of_different_kinds_accepted():
    organization = OrganizationFactory()
    for resource in (QuotaResource.VCPU, QuotaResource.RAM_GB, QuotaResource.INSTANCES):
        QuotaLimitFactory(park=organization.park, organization=organization, resource=resource)
    assert QuotaLimit.objects.filter(organization=organization).count() == 3


def test_duplicate_organization_model_refused():
    quota = QuotaLimitFactory(per_model=True)
    with refused("quota_org_model_unique"):
        QuotaLimitFactory(
            park=quota.park,
            organization=quota.organization,
            per_model=True,
            accelerator_model=quota.accelerator_model,
        )


def test_organization_limits_for_two_models_accepted():
    quota = QuotaLimitFactory(per_model=True)
    QuotaLimitFactory(park=quota.park, organization=quota.organization, per_model=True)
    assert QuotaLimit.objects.filter(organization=quota.organization).count() == 2


def test_duplicate_park_resource_refused():
    park = ParkFactory()
    QuotaLimitFactory(park=park, organization=None, resource=QuotaResource.COMPUTE_UNITS)
    with refused("quota_park_resource_unique"):
        QuotaLimitFactory(park=park, organization=None, resource=QuotaResource.COMPUTE_UNITS)


def test_duplicate_park_model_refused():
    quota = QuotaLimitFactory(organization=None, per_model=True)
    with refused("quota_park_model_unique"):
        QuotaLimitFactory(
            park=quota.park,
            organization=None,
            per_model=True,
            accelerator_model=quota.accelerator_model,
        )


def test_park_and_organization_limits_on_same_resource_coexist():
    quota = QuotaLimitFactory(resource=QuotaResource.DISK_GB)
    QuotaLimitFactory(park=quota.park, organization=None, resource=QuotaResource.DISK_GB)
    model_quota = QuotaLimitFactory(
        park=quota.park, organization=quota.organization, per_model=True
    )
    QuotaLimitFactory(
        park=quota.park,
        organization=None,
        per_model=True,
        accelerator_model=model_quota.accelerator_model,
    )
    assert QuotaLimit.objects.filter(park=quota.park).count() == 4
