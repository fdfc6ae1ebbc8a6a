"""A real Celery worker killed with SIGKILL mid-provision and mid-release, and its messages lost:
the rows it was working on stay provisioning / releasing until the reconciliation sweep sends
their jobs again; then every row is terminal and every count (cards, quota, wallet holds) is
what the hosts that remain hold.

Needs PostgreSQL (two processes share the test database) and a broker that a second process can
reach (RabbitMQ in CI, or the filesystem broker of README command 1).
"""

import dataclasses
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from apps.billing.models import Hold, Wallet
from apps.orchestration.models import Accelerator, Backend
from apps.orders import tasks as jobs
from apps.orders.models import Instance, InstanceState, Order, OrderState
from apps.orders.operations import request_operation
from apps.orders.services import submit_create
from apps.quotas.services import Usage, demand_for, organization_usage
from portal.celery import app
from tests.e2e.queues import empty_queue
from tests.worlds import sellable_world

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
QUEUE = "loam-test-killed-worker"


def database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def start_worker(log_path: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
        "CELERY_TASK_ALWAYS_EAGER": "false",
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "--pool=solo",
            "-Q",
            QUEUE,
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=REPO,
        env=env,
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
    )


def wait_until(condition, seconds: float, what: str):
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_a_killed_worker_leaves_nothing_stuck_after_the_sweep(tmp_path, monkeypatch, settings):
    world = sellable_world(accelerators=2, accelerator_quota=32)
    backend = Backend.objects.get(pools=world.pool)
    # Two running hosts to release, provisioned in this process.
    monkeypatch.setitem(app.conf, "task_always_eager", True)
    running = [
        submit_create(
            organization=world.organization,
            actor=world.owner,
            request=dataclasses.replace(world.request, name=f"old-{n}"),
        )[0].instance
        for n in range(2)
    ]
    assert {Instance.objects.get(pk=i.pk).state for i in running} == {InstanceState.RUNNING}

    # From now on jobs go through the broker to a real worker, whose backend calls take 4-5 s.
    monkeypatch.setitem(app.conf, "task_always_eager", False)
    monkeypatch.setitem(app.conf, "task_default_queue", QUEUE)
    Backend.objects.filter(pk=backend.pk).update(config={"latency_seconds": [4, 5]})
    empty_queue(QUEUE)
    new = [
        submit_create(
            organization=world.organization,
            actor=world.owner,
            request=dataclasses.replace(world.request, name=f"new-{n}"),
        )[0].instance
        for n in range(2)
    ]
    for instance in running:
        request_operation(instance=instance, actor=world.owner, kind="release")

    log = tmp_path / "worker.log"
    worker = start_worker(log)
    try:
        wait_until(lambda: "received" in log.read_text(), 60, "the worker to take a job")
        time.sleep(1)  # inside the backend call
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
    empty_queue(QUEUE)  # what a broker that lost its messages leaves: nothing of those jobs

    states = {i.pk: Instance.objects.get(pk=i.pk).state for i in new + running}
    assert set(states.values()) <= {InstanceState.PROVISIONING, InstanceState.RELEASING}
    stuck = Instance.objects.filter(state__in=(InstanceState.PROVISIONING, InstanceState.RELEASING))
    assert stuck.count() == 4  # the killed call never reported; the others never ran

    # The sweep, past the bound (this process runs the jobs it sends, as a worker would).
    monkeypatch.setitem(app.conf, "task_always_eager", True)
    Backend.objects.filter(pk=backend.pk).update(config={})
    assert jobs.reconcile_hosts() == 0  # not past the bound yet
    later = timezone.now() + timedelta(seconds=settings.LOAM_RECONCILE_AFTER_S + 1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert jobs.reconcile_hosts() == 4

    for instance in new:
        assert Instance.objects.get(pk=instance.pk).state == InstanceState.RUNNING
    for instance in running:
        assert Instance.objects.get(pk=instance.pk).state == InstanceState.RELEASED
    orders = Order.objects.filter(organization=world.organization)
    assert set(orders.values_list("state", flat=True)) == {OrderState.DONE}

    held = [Instance.objects.get(pk=i.pk) for i in new]
    cards = sum(i.flavor.accelerator_count for i in held)
    assert Accelerator.objects.filter(allocation__isnull=False).count() == cards
    assert Accelerator.objects.filter(node__pool=world.pool, allocation__isnull=True).count() == (
        8 - cards
    )
    expected = Usage()
    for instance in held:
        expected += demand_for(
            flavor=instance.flavor, system_disk_gb=instance.system_disk_gb, data_disk_gb=0
        )
    assert organization_usage(world.organization) == expected
    # The released hosts' first-hour holds are given back, once; the running ones keep theirs.
    wallet = Wallet.objects.get(organization=world.organization)
    assert Hold.objects.filter(workload__instance__in=running, amount_minor__gt=0).count() == 0
    assert wallet.held_minor == sum(
        Hold.objects.filter(wallet=wallet).values_list("amount_minor", flat=True)
    )
