from io import StringIO

import pytest
import time_machine
from django.apps import apps
from django.core.management import call_command
from django.utils import timezone

from apps.catalog.models import AcceleratorModel, Flavor, Image, Price, Region
from apps.operations import demo
from apps.orchestration.models import Accelerator, Node, Pool
from apps.tenants.models import Membership, Organization, ParkOperator

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _quick_and_tidy(settings, tmp_path):
    """A fast hasher for the demo's passwords; the licences its tenants send in a scratch
    folder."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.MEDIA_ROOT = tmp_path


PROJECT_APPS = ("tenants", "catalog", "quotas", "orchestration", "orders", "billing")


def seed():
    out = StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def row_counts():
    return {
        model._meta.label: model.objects.count()
        for app in PROJECT_APPS
        for model in apps.get_app_config(app).get_models()
    }


def test_seed_demo_twice_creates_nothing_new():
    # At one moment: a run minutes later adds what those minutes brought (capacity samples).
    with time_machine.travel(timezone.now(), tick=False):
        seed()
        first = row_counts()
        seed()
    assert row_counts() == first


def test_seed_demo_builds_the_demo_park():
    output = seed()
    levels = set(Region.objects.values_list("level", flat=True))
    assert levels == {"center", "province", "edge"}
    assert Region.objects.filter(level="province").count() == 2
    seeded_models = set(Pool.objects.values_list("accelerator_model__name", flat=True))
    assert seeded_models == {
        "H200 SXM",
        "A100 SXM 80GB",
        "L40S",
        "Ascend 910B",
        "DCU K100-AI",
        "MLU370-X8",
    }
    h200 = AcceleratorModel.objects.get(name="H200 SXM")
    assert (h200.fp16_tflops, h200.memory_gb, h200.tdp_w) == (989, 141, 700)
    assert AcceleratorModel.objects.get(name="Ascend 910B").domestic is True
    # Flavor families of 1/2/4/8 accelerators for each model with a pool.
    for name in seeded_models:
        counts = Flavor.objects.filter(family__accelerator_model__name=name).values_list(
            "accelerator_count", flat=True
        )
        assert sorted(counts) == [1, 2, 4, 8]
    assert set(Image.objects.values_list("software_stack", flat=True)) == {
        "cuda",
        "cann",
        "dtk",
        "neuware",
    }
    expected_cards = sum(nodes * cards for _r, _m, nodes, cards in demo.POOLS)
    assert Accelerator.objects.count() == expected_cards
    assert Node.objects.count() == sum(nodes for _r, _m, nodes, _c in demo.POOLS)
    # Every flavor is priced in every region that has a pool of its model.
    for pool in Pool.objects.all():
        flavors = Flavor.objects.filter(family__accelerator_model=pool.accelerator_model)
        priced = Price.objects.filter(region=pool.region, flavor__in=flavors).count()
        assert priced == flavors.count()
    assert ParkOperator.objects.filter(user__email=demo.OPERATOR["email"]).exists()
    owner = Membership.objects.get(user__email=demo.OWNER["email"])
    assert owner.role == "owner"
    assert Organization.objects.get(slug=demo.ENTERPRISE["slug"]).is_verified
    assert "http://127.0.0.1:8000/" in output
    assert demo.OPERATOR["password"] in output and demo.OWNER["password"] in output


def test_seed_demo_keeps_an_operators_compute_units():
    seed()
    AcceleratorModel.objects.filter(name="L40S").update(compute_units="3.100")
    seed()
    assert str(AcceleratorModel.objects.get(name="L40S").compute_units) == "3.100"


def test_seed_demo_logins_work(client):
    seed()
    for spec in (demo.OPERATOR, demo.OWNER, demo.PLATFORM_ADMIN):
        assert client.login(username=spec["email"], password=spec["password"])
        client.logout()
