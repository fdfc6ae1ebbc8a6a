"""What a queue pass keeps and sends for the tasks it places: rejected nodes recorded with what
the decision page shows of them and why (older, fuller records still read), and one broker
message for the whole pass that hands each task its own `run_task`, or leaves them to the
reconciliation sweep when the broker is down."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from kombu.exceptions import OperationalError

from apps.orchestration import tasks
from apps.orchestration.models import Placement, Task, TaskState
from tests.orchestration.test_scheduling import hold_cards

pytestmark = pytest.mark.django_db


@pytest.fixture
def one_full_node(task_world):
    """h1 (east-h100) has no card free; h2 next to it has all eight."""
    hold_cards(task_world.nodes["h1"], 8)
    task_world.node("h2", pool="east-h100")
    return task_world


def test_a_rejected_node_keeps_what_shows_it_and_why(one_full_node):
    task = one_full_node.submit()
    one_full_node.schedule()

    placement = Placement.objects.get(workload__task=task)
    by_node = {c["node"]: c for c in placement.candidates}
    h1 = one_full_node.nodes["h1"]
    assert by_node["h1"] == {
        "node": "h1",
        "node_id": h1.pk,
        "pool": "east-h100",
        "region": h1.pool.region.code,
        "region_name": h1.pool.region.name,
        "fits": False,
        "total": None,
        "rejected": "gpu_count",
    }
    assert by_node["h2"]["fits"] and by_node["h2"]["parts"] and by_node["h2"]["raw"]
    assert [c["node"] for c in placement.rejected_candidates()] == ["h1"]


def test_a_decision_recorded_the_old_way_still_shows(client, operator, one_full_node):
    task = one_full_node.submit()
    one_full_node.schedule()
    placement = Placement.objects.get(workload__task=task)
    old = {"pool_id": 1, "free_accelerators": 0, "free_vcpu": 120, "free_ram_gb": 1000}
    placement.candidates = [
        {**c, **old, "parts": {}, "raw": {}} if c["rejected"] else c for c in placement.candidates
    ]
    placement.save()
    client.force_login(operator)

    response = client.get(f"/ops/tasks/decisions/{placement.pk}/", HTTP_ACCEPT_LANGUAGE="en")

    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-chosen="yes" data-node="h2"' in html
    assert 'data-node="h1" data-reason="gpu_count"' in html


def test_a_pass_sends_its_placed_tasks_in_one_message(
    one_full_node, django_capture_on_commit_callbacks, monkeypatch
):
    placed = [one_full_node.submit(name=f"t{n}") for n in range(3)]
    sent = []
    monkeypatch.setattr(tasks.run_placed_tasks, "delay", lambda ids: sent.append(ids))

    with django_capture_on_commit_callbacks(execute=True):
        one_full_node.schedule()

    assert sent == [[task.pk for task in placed]]


def test_the_message_gives_each_task_its_own_job(monkeypatch):
    sent = []
    monkeypatch.setattr(tasks.run_task, "delay", lambda task_id: sent.append(task_id))

    tasks.run_placed_tasks([7, 3, 9])

    assert sent == [7, 3, 9]


def test_with_the_broker_down_the_sweep_sends_them_later(
    one_full_node, django_capture_on_commit_callbacks, monkeypatch, settings
):
    placed = [one_full_node.submit(name=f"t{n}") for n in range(2)]

    def broker_down(ids):
        raise OperationalError("connection refused")

    monkeypatch.setattr(tasks.run_placed_tasks, "delay", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        one_full_node.schedule()  # the pass commits all the same

    assert set(
        Task.objects.filter(pk__in=[t.pk for t in placed]).values_list("state", flat=True)
    ) == {TaskState.PLACED}
    resent = []
    monkeypatch.setattr(tasks.run_task, "delay", lambda task_id: resent.append(task_id))
    later = timezone.now() + timedelta(seconds=settings.LOAM_RECONCILE_AFTER_S + 1)
    with time_machine.travel(later, tick=False):
        assert tasks.reconcile_tasks() == 2
    assert sorted(resent) == sorted(task.pk for task in placed)
