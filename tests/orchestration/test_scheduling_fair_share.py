"""Fair share from the park's policy: an operator gives an organization shares, and the queue
orders waiting tasks by recent usage over shares."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.core.errors import PermissionDenied
from apps.core.models import AuditEvent
from apps.orchestration import selectors
from apps.orchestration.models import FairShare, Task
from apps.orchestration.scheduling import cancel_task, set_fair_share
from tests.orchestration.test_scheduling import hold_cards, verified_org

pytestmark = pytest.mark.django_db


def test_shares_bring_a_heavier_user_first(task_world, operator):
    other, other_owner = verified_org(task_world)
    used = task_world.submit(accelerator_milli=8000)  # 8 card-hours
    their_use = task_world.submit(organization=other, actor=other_owner)  # 1 card-hour
    task_world.schedule()
    for task in (used, their_use):
        cancel_task(task=task, actor=task_world.owner if task == used else other_owner)
        Task.objects.filter(pk=task.pk).update(started_at=timezone.now() - timedelta(hours=1))
    hold_cards(task_world.nodes["h1"], 8)
    mine = task_world.submit()
    theirs = task_world.submit(organization=other, actor=other_owner)
    assert selectors.queue_positions_in(task_world.park) == {theirs.pk: 1, mine.pk: 2}

    # 8 card-hours over 10 shares is less than 1 card-hour over 1.
    set_fair_share(organization=task_world.organization, operator=operator, shares=10)

    assert selectors.queue_positions_in(task_world.park) == {mine.pk: 1, theirs.pk: 2}
    assert selectors.fair_share_of(task_world.organization.pk) == 10
    event = AuditEvent.objects.get(action="fair_share.changed")
    assert event.data == {"from": 1, "to": 10}


def test_only_the_parks_operators_set_shares(task_world):
    with pytest.raises(PermissionDenied):
        set_fair_share(organization=task_world.organization, operator=task_world.owner, shares=2)
    assert not FairShare.objects.exists()


@pytest.mark.parametrize("shares", [0, 1001, "2", 1.5, True])
def test_a_share_is_a_whole_number_from_1_to_1000(task_world, operator, shares):
    with pytest.raises(ValidationError) as error:
        set_fair_share(organization=task_world.organization, operator=operator, shares=shares)
    assert "shares" in error.value.message_dict


def test_a_changed_share_is_sent_to_the_backends_after_commit(
    task_world, operator, django_capture_on_commit_callbacks
):
    from apps.orchestration.tasks import sync_tenant_fair_share

    with django_capture_on_commit_callbacks() as callbacks:
        set_fair_share(organization=task_world.organization, operator=operator, shares=3)

    sent = []
    original = sync_tenant_fair_share.delay
    sync_tenant_fair_share.delay = lambda *args: sent.append(args)
    try:
        for callback in callbacks:
            callback()
    finally:
        sync_tenant_fair_share.delay = original
    assert sent == [(task_world.organization.pk,)]
