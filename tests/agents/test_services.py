"""apps.agents.services: join tokens, enrolment, credentials, heartbeats, silent servers,
pruning."""

from datetime import timedelta

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.agents import services
from apps.agents.models import AgentCard, AgentServer, CardSample, JoinToken, TokenState
from apps.core.errors import InvalidTransition, PermissionDenied
from apps.core.models import AuditEvent
from apps.orchestration.models import Accelerator, Node, NodeHealth
from tests.agents.conftest import READERS, card, sample, server_facts
from tests.factories import (
    CardSampleFactory,
    JoinTokenFactory,
    ParkOperatorFactory,
    PoolFactory,
    UserFactory,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


def enrol_with(secret: str, hostname: str = "gpu-07", cards: int = 2, **server):
    return services.enrol_server(
        token=secret,
        server=server_facts(hostname, **server),
        readers=READERS,
        cards=[card(i) for i in range(cards)],
    )


def heartbeat(server, cards, samples=None, **changes):
    return services.record_heartbeat(
        server=server,
        agent_version=changes.pop("agent_version", "0.1.0"),
        taken_at=timezone.now(),
        readers=changes.pop("readers", READERS),
        cards=cards,
        samples=[sample(c["uuid"]) for c in cards] if samples is None else samples,
        **changes,
    )


def node_of(server) -> Node:
    return Node.objects.get(pk=server.node_id)


# --- join tokens -----------------------------------------------------------------------------


def test_a_join_token_is_shown_once_and_kept_as_its_hash(agent_world):
    token, secret = services.issue_join_token(
        pool=agent_world.pool, operator=agent_world.operator, note="rack 4"
    )

    assert secret.startswith("loamjt_") and len(secret) > 40
    stored = JoinToken.objects.get(pk=token.pk)
    assert stored.token_hash == services.secret_hash(secret)
    assert secret not in {stored.token_hash, stored.prefix, stored.note}
    assert secret.startswith(stored.prefix)
    assert stored.state == TokenState.UNUSED
    assert stored.note == "rack 4"
    hours = (stored.expires_at - stored.created_at).total_seconds() / 3600
    assert round(hours) == 24  # the default
    event = AuditEvent.objects.get(action="agent.join_token_issued")
    assert event.actor == agent_world.operator and event.park_id == agent_world.park.pk
    assert event.data["pool"] == "agent-pool"


def test_a_join_token_expires_after_the_hours_chosen(agent_world):
    token, _secret = services.issue_join_token(
        pool=agent_world.pool, operator=agent_world.operator, valid_hours=2
    )

    with time_machine.travel(timezone.now() + timedelta(hours=2, seconds=1)):
        assert JoinToken.objects.get(pk=token.pk).state == TokenState.EXPIRED


@pytest.mark.parametrize("hours", [0, 721, -5])
def test_a_join_token_validity_is_bounded(agent_world, hours):
    with pytest.raises(ValidationError) as excinfo:
        services.issue_join_token(
            pool=agent_world.pool, operator=agent_world.operator, valid_hours=hours
        )
    assert "valid_hours" in excinfo.value.message_dict


def test_only_pools_of_an_agent_backend_take_join_tokens(agent_world):
    simulator_pool = PoolFactory(backend__park=agent_world.park, backend__driver="simulator")

    with pytest.raises(ValidationError) as excinfo:
        services.issue_join_token(pool=simulator_pool, operator=agent_world.operator)

    assert "“agent”" in excinfo.value.message_dict["pool"][0]
    assert not JoinToken.objects.exists()


def test_only_the_parks_operators_issue_and_revoke_join_tokens(agent_world, owner):
    stranger = UserFactory()
    ParkOperatorFactory(user=stranger)  # operates another park
    for user in (owner, stranger):
        with pytest.raises(PermissionDenied):
            services.issue_join_token(pool=agent_world.pool, operator=user)
    token = JoinTokenFactory(pool=agent_world.pool)
    with pytest.raises(PermissionDenied):
        services.revoke_join_token(token=token, operator=stranger)


def test_a_join_token_works_once(agent_world):
    _token, secret = services.issue_join_token(pool=agent_world.pool, operator=agent_world.operator)
    enrol_with(secret)

    with pytest.raises(services.AgentRefused) as excinfo:
        enrol_with(secret, hostname="gpu-08")

    assert excinfo.value.status == 401
    assert "join token" in excinfo.value.message and "enrol" in excinfo.value.message
    assert AgentServer.objects.count() == 1


@pytest.mark.parametrize("trait", ["expired", "revoked", "used"])
def test_an_expired_revoked_or_used_join_token_is_refused(agent_world, trait):
    JoinTokenFactory(pool=agent_world.pool, secret="loamjt_the-secret", **{trait: True})

    with pytest.raises(services.AgentRefused):
        enrol_with("loamjt_the-secret")

    assert not AgentServer.objects.exists()
    assert not Node.objects.filter(pool=agent_world.pool).exists()


def test_an_unknown_join_token_is_refused(agent_world):
    with pytest.raises(services.AgentRefused):
        enrol_with("loamjt_never-issued")


def test_revoke_a_join_token(agent_world):
    token = JoinTokenFactory(pool=agent_world.pool, secret="loamjt_revoke-me")

    services.revoke_join_token(token=token, operator=agent_world.operator)

    token.refresh_from_db()
    assert token.state == TokenState.REVOKED
    assert token.revoked_by == agent_world.operator
    assert AuditEvent.objects.filter(action="agent.join_token_revoked").count() == 1
    with pytest.raises(InvalidTransition):
        services.revoke_join_token(token=token, operator=agent_world.operator)
    with pytest.raises(services.AgentRefused):
        enrol_with("loamjt_revoke-me")


def test_a_used_join_token_cannot_be_revoked(agent_world):
    token = JoinTokenFactory(pool=agent_world.pool, used=True)

    with pytest.raises(InvalidTransition):
        services.revoke_join_token(token=token, operator=agent_world.operator)


# --- enrolment -----------------------------------------------------------------------------


def test_enrolment_makes_the_server_a_node_of_the_pool_with_its_cards(agent_world):
    token, secret = services.issue_join_token(pool=agent_world.pool, operator=agent_world.operator)

    server, credential = enrol_with(secret, cards=3)

    node = node_of(server)
    assert node.pool == agent_world.pool
    assert node.hostname == "gpu-07"
    assert (node.vcpu_total, node.ram_gb_total) == (64, 503)  # 515896 MiB
    assert node.health == NodeHealth.HEALTHY
    accelerators = list(node.accelerators.order_by("index").values_list("index", "serial"))
    assert accelerators == [(i, card(i)["uuid"]) for i in range(3)]
    assert server.cards.count() == 3
    assert server.hostname == "gpu-07" and server.agent_version == "0.1.0"
    assert server.readers == READERS
    assert server.public_id.startswith("srv-")
    # Only the credential's hash is kept.
    assert credential.startswith("loamsc_")
    assert server.credential_hash == services.secret_hash(credential)
    assert services.authenticate_server(credential) == server
    token.refresh_from_db()
    assert token.state == TokenState.USED and token.server == server
    event = AuditEvent.objects.get(action="agent.server_enrolled")
    assert event.actor_label == "agent:gpu-07"
    assert event.data["server"] == server.public_id


def test_a_hostname_taken_in_the_backend_gets_a_suffix(agent_world):
    first, _ = agent_world.enrol("gpu-07")
    second, _ = agent_world.enrol("gpu-07")
    third, _ = agent_world.enrol("gpu-07")

    names = [node_of(s).hostname for s in (first, second, third)]
    assert names == ["gpu-07", "gpu-07-2", "gpu-07-3"]


def test_a_server_that_does_not_say_its_cpus_and_memory_still_enrols(agent_world):
    server, _ = agent_world.enrol("mystery", cards=0, cpu_count=None, memory_total_mib=None)

    node = node_of(server)
    assert (node.vcpu_total, node.ram_gb_total) == (1, 1)
    assert node.accelerators.count() == 0


def test_a_revoked_credential_no_longer_authenticates(agent_world):
    server, credential = agent_world.enrol()

    services.revoke_server(server=server, operator=agent_world.operator)

    assert services.authenticate_server(credential) is None
    assert services.authenticate_server("loamsc_wrong") is None
    assert services.authenticate_server("") is None
    assert services.authenticate_server("nul\x00") is None
    assert node_of(server).health == NodeHealth.DOWN
    assert AuditEvent.objects.filter(action="agent.credential_revoked").count() == 1
    with pytest.raises(InvalidTransition):
        services.revoke_server(server=server, operator=agent_world.operator)
    with pytest.raises(services.AgentRefused):
        heartbeat(server, [card(0)])


def test_only_the_parks_operators_revoke_a_server(agent_world, owner):
    server, credential = agent_world.enrol()

    with pytest.raises(PermissionDenied):
        services.revoke_server(server=server, operator=owner)

    assert services.authenticate_server(credential) == server


# --- heartbeats --------------------------------------------------------------------------------


def test_a_heartbeat_keeps_each_cards_figures_and_a_sample(agent_world):
    server, _ = agent_world.enrol(cards=2)
    cards = [card(0), card(1)]
    samples = [
        sample(cards[0]["uuid"], utilization_pct=91, power_w=650.0),
        sample(cards[1]["uuid"], utilization_pct=None, power_w=None, temperature_c=None),
    ]

    heartbeat(server, cards, samples, agent_version="0.2.0")

    server.refresh_from_db()
    assert server.agent_version == "0.2.0"
    assert server.last_heartbeat_at is not None and server.last_taken_at is not None
    first, second = AgentCard.objects.filter(server=server).order_by("accelerator__index")
    assert (first.utilization_pct, first.power_w, first.temperature_c) == (91, 650.0, 54)
    # A figure the card cannot report stays null, never 0.
    assert (second.utilization_pct, second.power_w, second.temperature_c) == (None, None, None)
    assert CardSample.objects.filter(card=first).values_list("utilization_pct", flat=True)[0] == 91
    assert CardSample.objects.filter(card=second).get().utilization_pct is None
    heartbeat(server, cards)
    assert CardSample.objects.count() == 4


def test_a_new_card_joins_the_node(agent_world):
    server, _ = agent_world.enrol(cards=2)

    heartbeat(server, [card(0), card(1), card(2)])

    node = node_of(server)
    assert list(node.accelerators.order_by("index").values_list("index", "serial")) == [
        (i, card(i)["uuid"]) for i in range(3)
    ]
    assert node.health == NodeHealth.HEALTHY


def test_a_vanished_card_is_marked_out_of_service_and_the_node_degraded(agent_world):
    server, _ = agent_world.enrol(cards=2)

    heartbeat(server, [card(0)])

    gone = AgentCard.objects.get(server=server, uuid=card(1)["uuid"])
    assert gone.vanished_at is not None
    assert gone.accelerator.out_of_service
    assert not Accelerator.objects.get(serial=card(0)["uuid"]).out_of_service
    assert node_of(server).health == NodeHealth.DEGRADED
    assert node_of(server).accelerators.count() == 2  # its index stays taken

    heartbeat(server, [card(0), card(1)])  # it came back

    gone.refresh_from_db()
    assert gone.vanished_at is None and not gone.accelerator.out_of_service
    assert node_of(server).health == NodeHealth.HEALTHY


@pytest.mark.parametrize("health", ["ecc_errors", "unreachable"])
def test_a_faulty_card_takes_no_new_work_and_degrades_its_node(agent_world, health):
    server, _ = agent_world.enrol(cards=2)
    cards = [card(0), card(1)]

    heartbeat(
        server,
        cards,
        [sample(cards[0]["uuid"]), sample(cards[1]["uuid"], health=health, health_message="lost")],
    )

    faulty = AgentCard.objects.get(uuid=cards[1]["uuid"])
    assert faulty.health == health and faulty.health_message == "lost"
    assert faulty.accelerator.out_of_service
    assert node_of(server).health == NodeHealth.DEGRADED
    event = AuditEvent.objects.filter(action="node.health_changed").latest("id")
    assert event.data == {"from": "healthy", "to": "degraded"}

    heartbeat(server, cards)  # healthy again

    assert not Accelerator.objects.get(pk=faulty.accelerator_id).out_of_service
    assert node_of(server).health == NodeHealth.HEALTHY


# --- silent servers ----------------------------------------------------------------------------


def test_a_silent_server_is_marked_down_and_comes_back_with_its_next_heartbeat(
    agent_world, settings
):
    settings.LOAM_AGENT_SILENT_AFTER_S = 20
    server, _ = agent_world.enrol(cards=1)
    assert services.mark_silent_servers() == []  # heard from just now

    with time_machine.travel(timezone.now() + timedelta(seconds=21)):
        assert services.mark_silent_servers() == [server.pk]
        assert services.mark_silent_servers() == []  # once
        assert node_of(server).health == NodeHealth.DOWN
        assert AgentServer.objects.get(pk=server.pk).condition() == "silent"
        event = AuditEvent.objects.filter(action="node.health_changed").latest("id")
        assert event.data == {"from": "healthy", "to": "down", "reason": "silent"}

        heartbeat(server, [card(0)])

        assert node_of(server).health == NodeHealth.HEALTHY
        assert AgentServer.objects.get(pk=server.pk).condition() == "healthy"


def test_a_revoked_server_stays_down(agent_world):
    server, _ = agent_world.enrol(cards=1)
    services.revoke_server(server=server, operator=agent_world.operator)
    Node.objects.filter(pk=server.node_id).update(health=NodeHealth.HEALTHY)  # e.g. by hand

    assert services.mark_silent_servers() == [server.pk]
    assert node_of(server).health == NodeHealth.DOWN


# --- pruning ------------------------------------------------------------------------------------


def test_samples_older_than_an_hour_are_pruned(agent_world, settings):
    settings.LOAM_AGENT_SAMPLES_KEPT_S = 3600
    now = timezone.now()
    old = CardSampleFactory(at=now - timedelta(seconds=3601))
    recent = CardSampleFactory(card=old.card, at=now - timedelta(seconds=3599))

    assert services.prune_samples(now=now) == 1

    assert list(CardSample.objects.values_list("pk", flat=True)) == [recent.pk]
