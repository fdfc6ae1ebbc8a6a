"""Saved images copied on demand to the other servers of their region: two enrolled servers in
one region, gpu-07 saving host "a" as "my env", a host of it placed on gpu-08 waiting (out of
gpu-08's hosts list, its progress on the host's page) while gpu-07's agent sends the archive
to the portal and gpu-08's fetches it, then starting there; placement preferring the server
that holds it; a failed copy failing the host with the reason; a deletion reaching every copy;
and a deletion racing an order of the image (PostgreSQL: two connections)."""

import hashlib
import threading

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone, translation

from apps.agents import image_copies
from apps.agents.models import (
    AgentServer,
    SavedImageCopy,
    SavedImageCopyState,
    SavedImageState,
)
from apps.agents.saved_images import delete_saved_image, save_host_image
from apps.agents.selectors import kept_saved_images
from apps.core.errors import DomainError
from apps.orchestration.models import Allocation
from apps.orders import services as order_services
from apps.orders.models import Instance, InstanceState
from apps.orders.operations import request_operation
from apps.orders.services import HostRequest, submit_create
from tests.agents.conftest import SSH_KEY
from tests.agents.conftest import agent_world as agent_world  # the fixtures, shared
from tests.agents.conftest import english_messages as english_messages
from tests.agents.conftest import fake_agent as fake_agent
from tests.agents.test_saved_images_api import bearer
from tests.locks import wait_for_a_blocked_lock

DEBIAN = [{"name": "debian-12", "digest": "sha256:" + "0" * 64}]
ARCHIVE = b"the saved image's tar archive\n" * 40_000  # 1.2 MB
ARCHIVE_SHA256 = hashlib.sha256(ARCHIVE).hexdigest()


def hosts_body(agent) -> dict:
    # A request through the test client activates the language it negotiates, for good: the
    # test's own is kept (as FakeAgent does).
    with translation.override(translation.get_language()):
        response = agent.client.get("/api/v1/agent/hosts", **agent.headers())
    assert response.status_code == 200, response.content
    return response.json()


def move_images(agent, *, archive: bytes = ARCHIVE) -> list[dict]:
    """What a real agent's ImageCopier does with the transfers its hosts list names."""
    transfers = hosts_body(agent)["image_transfers"]
    with translation.override(translation.get_language()):
        _move(agent, transfers, archive)
    return transfers


def _move(agent, transfers, archive):
    for transfer in transfers:
        if transfer["direction"] == "send":
            response = agent.client.put(
                transfer["url"],
                archive,
                content_type="application/x-tar",
                HTTP_X_LOAM_SHA256=hashlib.sha256(archive).hexdigest(),
                **agent.headers(),
            )
            assert response.status_code == 204, response.content
        else:
            response = agent.client.get(transfer["url"], **agent.headers())
            arrived = b"".join(response.streaming_content)
            assert hashlib.sha256(arrived).hexdigest() == transfer["sha256"]
            copied = agent.post(
                f"saved-images/{transfer['name']}/copied", {"sha256": transfer["sha256"]}
            )
            assert copied.status_code == 204, copied.content


@pytest.fixture
def looks(monkeypatch):
    """looks(*agents, before=callable): each follow-up look of a host job first runs
    `before`, then lets every agent move its images and converge, as real ones would."""

    def install(*agents, before=None):
        def send_later(job, follow_job, args, *, countdown):
            if before is not None:
                before()
            for agent in agents:
                move_images(agent)
            for agent in agents:
                agent.converge()
            follow_job.apply(args)

        monkeypatch.setattr("apps.orders.tasks._send_later", send_later)

    return install


@pytest.fixture
def order(agent_world, owner, django_capture_on_commit_callbacks):
    def submit(name, image, cards=1) -> Instance:
        request = HostRequest(
            flavor=agent_world.flavors[cards], image=image, region=agent_world.region,
            system_disk_gb=50, name=name, ssh_public_key=SSH_KEY,
        )  # fmt: skip
        with django_capture_on_commit_callbacks(execute=True):
            (placed,) = submit_create(
                organization=agent_world.organization, actor=owner, request=request
            )
        return Instance.objects.select_related("node").get(pk=placed.instance_id)

    return submit


def stop(instance, owner, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        request_operation(instance=instance, actor=owner, kind="stop")
    instance.refresh_from_db()
    return instance


def world_with_saved_image(agent_world, fake_agent, looks, order, owner, capture, *, cards):
    """gpu-07 (`cards[0]` cards) runs host "a", saved as "my env" once stopped; gpu-08
    (`cards[1]` cards) joins the region after. Returns (saved, agent 07, agent 08)."""
    _server, credential = agent_world.enrol("gpu-07", cards=cards[0])
    holder = fake_agent(credential, cards=cards[0])
    AgentServer.objects.update(images=DEBIAN, images_reported_at=timezone.now())
    looks(holder)
    host_a = order("a", agent_world.image)
    assert host_a.state == InstanceState.RUNNING
    host_a = stop(host_a, owner, capture)
    saved = save_host_image(
        organization=agent_world.organization, actor=owner, instance_id=host_a.pk, name="my env"
    )
    holder.converge()
    saved.refresh_from_db()
    assert saved.state == SavedImageState.READY
    _server, credential = agent_world.enrol("gpu-08", cards=cards[1])
    AgentServer.objects.filter(node__hostname="gpu-08").update(
        images=DEBIAN, images_reported_at=timezone.now()
    )
    return saved, holder, fake_agent(credential, cards=cards[1])


@pytest.fixture
def copy_world(agent_world, fake_agent, looks, order, owner, django_capture_on_commit_callbacks):
    """gpu-07 has one card (host "a", stopped and saved); gpu-08 four."""
    return world_with_saved_image(
        agent_world, fake_agent, looks, order, owner, django_capture_on_commit_callbacks,
        cards=(1, 4),
    )  # fmt: skip


@pytest.mark.django_db
def test_a_host_on_a_server_without_the_image_waits_for_its_copy_then_starts_there(
    copy_world, looks, order, client, owner
):
    saved, holder, target = copy_world
    code = saved.image.code
    client.force_login(owner)
    seen = {}

    def before():
        if seen:
            return
        instance = Instance.objects.get(name="b")
        seen["state"] = instance.state
        seen["listed"] = [host["image"] for host in hosts_body(target)["hosts"]]
        seen["sends"] = hosts_body(holder)["image_transfers"]
        seen["page"] = client.get(reverse("orders:instance_detail", args=[instance.pk]))
        seen["images page"] = client.get(reverse("saved_images:image_list"))

    looks(holder, target, before=before)
    host_b = order("b", saved.image, cards=2)  # only gpu-08 has two cards free

    assert seen["state"] == InstanceState.PROVISIONING
    assert seen["listed"] == []  # not listed to gpu-08 while its image isn't there
    assert seen["sends"] == [
        {"name": code, "direction": "send", "url": f"/api/v1/agent/saved-images/{code}/archive"}
    ]
    assert "正在将镜像 my env 复制到服务器 gpu-08：0 %。" in seen["page"].content.decode()
    assert "正在复制到 gpu-08：0 %" in seen["images page"].content.decode()

    assert host_b.state == InstanceState.RUNNING, host_b.error_message
    assert host_b.node.hostname == "gpu-08"
    copy = SavedImageCopy.objects.get()
    assert (copy.state, copy.archive_sha256, copy.progress_pct) == (
        SavedImageCopyState.READY,
        ARCHIVE_SHA256,
        100,
    )
    assert (copy.sent_bytes, copy.received_bytes) == (len(ARCHIVE), len(ARCHIVE))
    target_server = AgentServer.objects.get(node__hostname="gpu-08")
    assert code in target_server.image_names and kept_saved_images(target_server) == [code]
    assert [host["image"] for host in hosts_body(target)["hosts"]] == [code]
    assert hosts_body(holder)["image_transfers"] == hosts_body(target)["image_transfers"] == []
    assert not image_copies.archive_path(code).exists()  # no copy waits for it any more
    page = client.get(reverse("orders:instance_detail", args=[host_b.pk])).content.decode()
    assert "image-copy-progress" not in page
    assert "已复制到 gpu-08" in client.get(reverse("saved_images:image_list")).content.decode()
    (listed,) = client.get("/api/v1/saved-images/", **bearer(saved.organization, owner)).json()[
        "results"
    ]
    assert listed["copies"] == [
        {"server": "gpu-08", "state": "ready", "progress_pct": 100, "message": ""}
    ]


@pytest.mark.django_db
def test_the_progress_counts_both_halves_of_the_copy(copy_world):
    saved, _holder, target = copy_world
    target_server = AgentServer.objects.get(node__hostname="gpu-08")
    copy = SavedImageCopy(saved_image=saved, server=target_server, archive_bytes=1000)
    copy.sent_bytes = 1000
    assert copy.progress_pct == 50
    copy.received_bytes = 999
    assert copy.progress_pct == 99  # 100 only once unpacked


@pytest.fixture
def preference_world(
    agent_world, fake_agent, looks, order, owner, django_capture_on_commit_callbacks
):
    """gpu-07 has eight cards (host "a" on one, stopped and saved); gpu-08 two: best fit alone
    would put a one-card host on gpu-08."""
    return world_with_saved_image(
        agent_world, fake_agent, looks, order, owner, django_capture_on_commit_callbacks,
        cards=(8, 2),
    )  # fmt: skip


@pytest.mark.django_db
def test_placement_prefers_the_server_holding_the_image(
    preference_world, looks, order, agent_world
):
    saved, holder, target = preference_world
    looks(holder, target)
    # Best fit, for an image both hold.
    assert order("from-debian", agent_world.image).node.hostname == "gpu-08"
    host = order("from-saved", saved.image)
    assert host.state == InstanceState.RUNNING and host.node.hostname == "gpu-07"
    assert not SavedImageCopy.objects.exists()


@pytest.mark.django_db
def test_a_copy_that_fails_fails_its_host_with_the_reason_and_the_next_host_asks_again(
    copy_world, looks, order, monkeypatch, english_messages
):
    saved, holder, target = copy_world
    code = saved.image.code

    def send_later(job, follow_job, args, *, countdown):
        move_images(holder)
        reported = target.post(f"saved-images/{code}/copied", {"error": "receive: disk full"})
        assert reported.status_code == 204
        follow_job.apply(args)

    monkeypatch.setattr("apps.orders.tasks._send_later", send_later)
    host_b = order("b", saved.image, cards=2)
    assert host_b.state == InstanceState.ERROR
    assert "Copying image my env to gpu-08 failed: receive: disk full" in host_b.error_message
    assert not Allocation.objects.filter(workload_id=host_b.workload_id, released_at=None).exists()
    copy = SavedImageCopy.objects.get()
    assert copy.state == SavedImageCopyState.FAILED and copy.message == "receive: disk full"
    assert not image_copies.archive_path(code).exists()

    looks(holder, target)
    host_c = order("c", saved.image, cards=2)
    assert host_c.state == InstanceState.RUNNING and host_c.node.hostname == "gpu-08"
    copy.refresh_from_db()
    assert copy.state == SavedImageCopyState.READY


@pytest.mark.django_db
def test_a_damaged_archive_is_refused_and_the_holder_sends_it_again(copy_world, monkeypatch):
    saved, holder, target = copy_world
    target_server = AgentServer.objects.get(node__hostname="gpu-08")
    image_copies.ask_for_copy(server=target_server, image_code=saved.image.code)
    (transfer,) = hosts_body(holder)["image_transfers"]
    response = holder.client.put(
        transfer["url"],
        ARCHIVE[:-1],
        content_type="application/x-tar",
        HTTP_X_LOAM_SHA256=ARCHIVE_SHA256,
        **holder.headers(),
    )
    assert response.status_code == 400 and response.json()["type"].endswith("damaged")
    assert SavedImageCopy.objects.get().state == SavedImageCopyState.SENDING
    assert hosts_body(holder)["image_transfers"] == [transfer]  # sent again at its next poll
    # Only the holder sends it, and only the server a copy waits on fetches it.
    assert target.client.put(
        transfer["url"], ARCHIVE, content_type="application/x-tar",
        HTTP_X_LOAM_SHA256=ARCHIVE_SHA256, **target.headers(),
    ).status_code == 409  # fmt: skip
    assert holder.client.get(transfer["url"], **holder.headers()).status_code == 409
    assert holder.client.get(transfer["url"]).status_code == 401


@pytest.mark.django_db
def test_deleting_the_image_reaches_every_server_holding_it(
    copy_world, looks, order, owner, agent_world, django_capture_on_commit_callbacks
):
    saved, holder, target = copy_world
    looks(holder, target)
    host_b = order("b", saved.image, cards=2)
    with django_capture_on_commit_callbacks(execute=True):
        request_operation(instance=host_b, actor=owner, kind="release")
        request_operation(instance=Instance.objects.get(name="a"), actor=owner, kind="release")
    delete_saved_image(organization=agent_world.organization, actor=owner, saved_image_id=saved.pk)
    for agent in (holder, target):
        body = hosts_body(agent)
        assert body["saved_images"] == [] and body["image_transfers"] == []
    assert not any(saved.image.code in server.image_names for server in AgentServer.objects.all())


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_deletion_racing_an_order_of_the_image_waits_for_it_and_is_refused(
    agent_world, fake_agent, owner, monkeypatch
):
    _server, credential = agent_world.enrol("gpu-07", cards=2)
    holder = fake_agent(credential, cards=2)
    AgentServer.objects.update(images=DEBIAN, images_reported_at=timezone.now())

    def converge_now(job, follow_job, args, *, countdown):
        holder.converge()
        follow_job.apply(args)

    monkeypatch.setattr("apps.orders.tasks._send_later", converge_now)
    request = HostRequest(
        flavor=agent_world.flavors[1], image=agent_world.image, region=agent_world.region,
        system_disk_gb=50, name="a", ssh_public_key=SSH_KEY,
    )  # fmt: skip
    (placed,) = submit_create(organization=agent_world.organization, actor=owner, request=request)
    host_a = Instance.objects.get(pk=placed.instance_id)
    request_operation(instance=host_a, actor=owner, kind="stop")
    saved = save_host_image(
        organization=agent_world.organization, actor=owner, instance_id=host_a.pk, name="my env"
    )
    holder.converge()

    # The order of host "b" stops just before it places the host, its transaction open.
    placing, go_on = threading.Event(), threading.Event()
    start_provisioning = order_services._start_provisioning

    def paused(*args, **kwargs):
        placing.set()
        assert go_on.wait(10)
        return start_provisioning(*args, **kwargs)

    monkeypatch.setattr(order_services, "_start_provisioning", paused)
    outcomes = {}

    def order_b():
        try:
            submit_create(
                organization=agent_world.organization,
                actor=owner,
                request=HostRequest(**{**request.__dict__, "image": saved.image, "name": "b"}),
            )
            outcomes["order"] = "ordered"
        finally:
            connection.close()

    def delete():
        try:
            delete_saved_image(
                organization=agent_world.organization, actor=owner, saved_image_id=saved.pk
            )
            outcomes["delete"] = "deleted"
        except DomainError as refusal:
            outcomes["delete"] = refusal.code
        finally:
            connection.close()

    ordering = threading.Thread(target=order_b)
    ordering.start()
    assert placing.wait(10)
    deleting = threading.Thread(target=delete)
    deleting.start()
    try:
        wait_for_a_blocked_lock()  # the deletion waits for the order's lock on the image
    finally:
        go_on.set()
        ordering.join(30)
        deleting.join(30)
    assert outcomes == {"order": "ordered", "delete": "image_in_use"}
    saved.refresh_from_db()
    assert saved.state == SavedImageState.READY and saved.image.is_active
