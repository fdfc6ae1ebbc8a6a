"""The orders tables refuse bad rows themselves: no form or full_clean() runs here. The
disks-only-grow rule is a trigger (migration orders 0002) and is tested through UPDATEs."""

import subprocess

import pytest
from django.db.models import F
from django.utils import timezone

from apps.orchestration.models import Task
from apps.orders.models import Instance, InstanceState, Order, OrderKind, fingerprint
from tests.factories import (
    InstanceFactory,
    OrderFactory,
    OrganizationFactory,
    TaskFactory,
    refused,
)

pytestmark = pytest.mark.django_db

DISK_TRIGGER = "instance_disk_only_grows"


class TestInstance:
    def test_valid_row_saves_in_its_organization_park(self):
        instance = InstanceFactory()
        saved = Instance.objects.get(pk=instance.pk)
        park = saved.organization.park
        assert saved.state == InstanceState.PENDING
        assert saved.flavor.family.park == park
        assert saved.image.park == park
        assert saved.region.park == park
        assert saved.flavor.family.accelerator_model in saved.image.compatible_accelerators.all()

    def test_limits_at_their_bounds_accepted(self):
        instance = InstanceFactory(system_disk_gb=20, data_disk_gb=32768, bandwidth_mbps=10000)
        saved = Instance.objects.get(pk=instance.pk)
        assert (saved.system_disk_gb, saved.data_disk_gb, saved.bandwidth_mbps) == (
            20,
            32768,
            10000,
        )

    def test_unknown_state_refused(self):
        with refused("instance_state_known"):
            InstanceFactory(state="hibernating")

    def test_system_disk_below_minimum_refused(self):
        with refused("instance_system_disk_min"):
            InstanceFactory(system_disk_gb=19)

    def test_data_disk_above_maximum_refused(self):
        with refused("instance_data_disk_max"):
            InstanceFactory(data_disk_gb=32769)

    def test_data_disk_grown_past_maximum_refused(self):
        instance = InstanceFactory(data_disk_gb=32768)
        with refused("instance_data_disk_max"):
            Instance.objects.filter(pk=instance.pk).update(data_disk_gb=F("data_disk_gb") + 1)

    def test_bandwidth_above_maximum_refused(self):
        with refused("instance_bandwidth_max"):
            InstanceFactory(bandwidth_mbps=10001)

    def test_released_without_time_refused(self):
        with refused("instance_released_has_time"):
            InstanceFactory(state=InstanceState.RELEASED, released_at=None)

    def test_released_by_update_without_time_refused(self):
        instance = InstanceFactory(running=True)
        with refused("instance_released_has_time"):
            Instance.objects.filter(pk=instance.pk).update(state=InstanceState.RELEASED)
        instance.refresh_from_db()
        assert instance.state == InstanceState.RUNNING

    def test_released_with_time_accepted(self):
        instance = InstanceFactory(released=True)
        assert Instance.objects.get(pk=instance.pk).released_at is not None


class TestDiskOnlyGrows:
    @pytest.mark.parametrize("field", ["system_disk_gb", "data_disk_gb"])
    def test_shrink_by_queryset_update_refused(self, field):
        instance = InstanceFactory(system_disk_gb=200, data_disk_gb=500)
        with refused(DISK_TRIGGER):
            Instance.objects.filter(pk=instance.pk).update(**{field: 100})
        instance.refresh_from_db()
        assert (instance.system_disk_gb, instance.data_disk_gb) == (200, 500)

    @pytest.mark.parametrize("field", ["system_disk_gb", "data_disk_gb"])
    def test_shrink_by_save_refused(self, field):
        instance = InstanceFactory(system_disk_gb=200, data_disk_gb=500)
        setattr(instance, field, 100)
        with refused(DISK_TRIGGER):
            instance.save()
        fresh = Instance.objects.get(pk=instance.pk)
        assert (fresh.system_disk_gb, fresh.data_disk_gb) == (200, 500)

    def test_shrink_of_one_disk_while_growing_the_other_refused(self):
        instance = InstanceFactory(system_disk_gb=200, data_disk_gb=500)
        with refused(DISK_TRIGGER):
            Instance.objects.filter(pk=instance.pk).update(system_disk_gb=300, data_disk_gb=499)

    def test_growing_both_disks_accepted(self):
        instance = InstanceFactory(system_disk_gb=200, data_disk_gb=500)
        Instance.objects.filter(pk=instance.pk).update(system_disk_gb=201, data_disk_gb=1000)
        instance.refresh_from_db()
        assert (instance.system_disk_gb, instance.data_disk_gb) == (201, 1000)

    def test_growing_by_save_accepted(self):
        instance = InstanceFactory(data_disk_gb=0)
        instance.data_disk_gb = 100
        instance.save(update_fields=["data_disk_gb"])
        assert Instance.objects.get(pk=instance.pk).data_disk_gb == 100

    def test_unchanged_disks_accept_other_updates(self):
        instance = InstanceFactory(system_disk_gb=200, data_disk_gb=500)
        instance.name = "renamed"
        instance.save()
        Instance.objects.filter(pk=instance.pk).update(system_disk_gb=200, bandwidth_mbps=50)
        fresh = Instance.objects.get(pk=instance.pk)
        assert (fresh.name, fresh.bandwidth_mbps, fresh.system_disk_gb) == ("renamed", 50, 200)


class TestOrder:
    def test_create_order_without_instance_saves(self):
        order = OrderFactory()
        saved = Order.objects.get(pk=order.pk)
        assert (saved.kind, saved.instance) == (OrderKind.CREATE, None)

    def test_operation_on_instance_saves(self):
        order = OrderFactory(for_instance=True)
        saved = Order.objects.get(pk=order.pk)
        assert saved.instance.organization == saved.organization

    def test_unknown_kind_refused(self):
        with refused("order_kind_known"):
            OrderFactory(kind="migrate", for_instance=True)

    def test_unknown_state_refused(self):
        with refused("order_state_known"):
            OrderFactory(state="pondering")

    def test_unknown_currency_refused(self):
        with refused("order_currency_known"):
            OrderFactory(currency="GBP")

    def test_negative_price_refused(self):
        with refused("order_price_not_negative"):
            OrderFactory(hourly_minor=-1)

    @pytest.mark.parametrize("kind", sorted(set(OrderKind.values) - {OrderKind.CREATE}))
    def test_non_create_order_without_instance_refused(self, kind):
        with refused("order_operation_has_instance"):
            OrderFactory(kind=kind, instance=None)

    def test_instance_removed_from_resize_by_update_refused(self):
        order = OrderFactory(for_instance=True)
        with refused("order_operation_has_instance"):
            Order.objects.filter(pk=order.pk).update(instance=None)

    def test_duplicate_idempotency_key_in_organization_refused(self):
        order = OrderFactory(idempotency_key="req-1")
        with refused("order_idempotency_key_unique"):
            OrderFactory(organization=order.organization, idempotency_key="req-1")
        assert Order.objects.filter(idempotency_key="req-1").count() == 1

    def test_same_idempotency_key_in_another_organization_accepted(self):
        OrderFactory(idempotency_key="req-1")
        OrderFactory(idempotency_key="req-1")
        assert Order.objects.filter(idempotency_key="req-1").count() == 2

    def test_empty_idempotency_keys_accepted_twice(self):
        organization = OrganizationFactory()
        OrderFactory(organization=organization, idempotency_key="")
        OrderFactory(organization=organization, idempotency_key="")
        assert Order.objects.filter(organization=organization, idempotency_key="").count() == 2


class TestTask:
    @pytest.mark.parametrize("milli", [1, 250, 500, 999, 1000, 2000, 8000])
    def test_share_or_whole_cards_accepted(self, milli):
        task = TaskFactory(accelerator_milli=milli)
        assert Task.objects.get(pk=task.pk).accelerator_milli == milli

    @pytest.mark.parametrize("milli", [0, 1001, 1500, 2500])
    def test_more_than_one_card_not_whole_refused(self, milli):
        with refused("task_accelerators_share_or_whole"):
            TaskFactory(accelerator_milli=milli)

    def test_share_changed_by_update_refused(self):
        task = TaskFactory(accelerator_milli=2000)
        with refused("task_accelerators_share_or_whole"):
            Task.objects.filter(pk=task.pk).update(accelerator_milli=1500)
        task.refresh_from_db()
        assert task.accelerator_milli == 2000

    def test_unknown_state_refused(self):
        with refused("task_state_known"):
            TaskFactory(state="paused")

    def test_unknown_preference_refused(self):
        with refused("task_preference_known"):
            TaskFactory(preference="random")

    def test_zero_max_price_accepted(self):
        task = TaskFactory(max_hourly_minor=0)
        assert Task.objects.get(pk=task.pk).max_hourly_minor == 0

    def test_negative_max_price_refused(self):
        with refused("task_max_price_not_negative"):
            TaskFactory(max_hourly_minor=-1)

    def test_finished_without_start_refused(self):
        with refused("task_finished_after_started"):
            TaskFactory(state="failed", finished_at=timezone.now(), started_at=None)

    def test_finished_after_start_accepted(self):
        now = timezone.now()
        task = TaskFactory(state="succeeded", started_at=now, finished_at=now)
        assert Task.objects.get(pk=task.pk).finished_at == now


@pytest.mark.parametrize("key_type", ["ed25519", "ecdsa", "rsa"])
def test_a_host_key_is_fingerprinted_as_ssh_shows_it(tmp_path, key_type):
    """What the host's page shows is what `ssh` prints at a first login (ssh-keygen -l)."""
    key = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", key_type, "-N", "", "-f", key], check=True)
    public = key.with_suffix(".pub").read_text()
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", key.with_suffix(".pub")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()  # bits, fingerprint, comment, (TYPE)
    assert fingerprint(public) == f"{listed[-1].strip('()')} {listed[1]}"
    instance = InstanceFactory.build(access={"ssh_host_keys": [" ".join(public.split()[:2])]})
    assert instance.ssh_host_key_fingerprints == [fingerprint(public)]
