"""The portal client against a real HTTP server on 127.0.0.1 (tests/agent/fake_portal.py)."""

import socket
import time

import pytest
from loam_agent.client import (
    ENROL_PATH,
    HEARTBEAT_PATH,
    PortalClient,
    PortalUnavailable,
    ProtocolError,
    Rejected,
)
from loam_agent.credential import Credential


def client_for(portal, **options) -> PortalClient:
    credential = Credential(portal_url=portal.url, server_id="srv-1", secret="s3cret-credential")
    return PortalClient(portal.url, credential=credential, backoff_s=0.01, **options)


def test_enrol_sends_the_token_and_facts_and_returns_the_credential(portal):
    with PortalClient(portal.url) as client:
        credential = client.enrol(join_token="join-123", facts={"server": {"hostname": "gpu-01"}})

    assert credential == Credential(
        portal_url=portal.url, server_id="srv-1", secret="s3cret-credential"
    )
    [request] = portal.requests(ENROL_PATH)
    assert request.body == {"join_token": "join-123", "server": {"hostname": "gpu-01"}}
    assert "authorization" not in request.headers


def test_enrol_with_a_refused_token_is_rejected_at_once(portal):
    portal.answer(ENROL_PATH, (401, {"detail": "join token expired"}))

    with PortalClient(portal.url) as client, pytest.raises(Rejected, match="join token expired"):
        client.enrol(join_token="old", facts={})
    assert len(portal.requests(ENROL_PATH)) == 1


def test_enrol_answer_without_a_credential_is_a_protocol_error(portal):
    portal.answer(ENROL_PATH, (201, {"server_id": "srv-1"}))

    with PortalClient(portal.url) as client, pytest.raises(ProtocolError, match="credential"):
        client.enrol(join_token="join-123", facts={})


def test_heartbeat_carries_the_bearer_credential_and_the_payload(portal):
    with client_for(portal) as client:
        client.heartbeat({"cards": [], "samples": []})

    [request] = portal.requests(HEARTBEAT_PATH)
    assert request.headers["authorization"] == "Bearer s3cret-credential"
    assert request.body == {"cards": [], "samples": []}


@pytest.mark.parametrize("status", [401, 403])
def test_a_revoked_credential_stops_without_retrying(portal, status):
    portal.answer(HEARTBEAT_PATH, (status, {"detail": "credential revoked"}))

    with client_for(portal) as client, pytest.raises(Rejected, match="enrol again"):
        client.heartbeat({})
    assert len(portal.requests(HEARTBEAT_PATH)) == 1


def test_503_is_retried_until_the_portal_answers(portal):
    portal.answer(HEARTBEAT_PATH, (503, None), (503, {"detail": "restarting"}))

    with client_for(portal) as client:
        client.heartbeat({"n": 1})

    assert [r.body for r in portal.requests(HEARTBEAT_PATH)] == [{"n": 1}] * 3


def test_retries_end_after_the_last_attempt(portal):
    portal.answer(HEARTBEAT_PATH, *[(503, None)] * 5)

    with client_for(portal, attempts=3) as client, pytest.raises(PortalUnavailable, match="503"):
        client.heartbeat({})
    assert len(portal.requests(HEARTBEAT_PATH)) == 3


def test_retry_after_sets_the_wait(portal):
    portal.answer(HEARTBEAT_PATH, (429, None, {"Retry-After": "1"}))

    with client_for(portal) as client:
        started = time.monotonic()
        client.heartbeat({})

    # The backoff alone would wait 0.01 s.
    assert time.monotonic() - started >= 1
    assert len(portal.requests(HEARTBEAT_PATH)) == 2


def test_a_client_error_is_not_retried(portal):
    portal.answer(HEARTBEAT_PATH, (400, {"detail": "samples[0].power_w: not a number"}))

    with client_for(portal) as client, pytest.raises(ProtocolError, match="power_w"):
        client.heartbeat({})
    assert len(portal.requests(HEARTBEAT_PATH)) == 1


def test_an_unreachable_portal_is_retried_then_given_up():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
    credential = Credential(portal_url=url, server_id="srv-1", secret="x")

    with (
        PortalClient(url, credential=credential, attempts=2, backoff_s=0.01) as client,
        pytest.raises(PortalUnavailable, match="gave up after 2 attempts; last: ConnectError"),
    ):
        client.heartbeat({})


def test_desired_hosts_polls_with_the_etag_and_gets_none_while_unchanged(portal):
    from loam_agent.client import HOSTS_PATH

    portal.hosts = [{"id": "h-1", "generation": 1, "state": "running"}]
    with client_for(portal) as client:
        etag, hosts, volumes = client.desired_hosts(None)
        assert hosts == portal.hosts and etag
        assert client.desired_hosts(etag) == (etag, None, None)
        portal.hosts = []
        new_etag, hosts, _volumes = client.desired_hosts(etag)

    assert hosts == [] and new_etag != etag
    first, second, _ = portal.requests(HOSTS_PATH)
    assert first.headers["authorization"] == "Bearer s3cret-credential"
    assert "if-none-match" not in first.headers
    assert second.headers["if-none-match"] == etag


def test_an_old_portal_without_hosts_says_so(portal):
    from loam_agent.client import HostsNotSupported

    with client_for(portal) as client, pytest.raises(HostsNotSupported, match="no hosts API"):
        client.desired_hosts(None)


def test_report_hosts_posts_the_list(portal):
    from loam_agent.client import HOSTS_REPORT_PATH

    portal.hosts = []
    report = [
        {
            "id": "h-1",
            "generation": 2,
            "state": "stopped",
            "address": "",
            "ssh_port": 22,
            "message": "",
        }
    ]
    with client_for(portal) as client:
        client.report_hosts(1_000_017, report)
    [request] = portal.requests(HOSTS_REPORT_PATH)
    assert request.body == {"sequence": 1_000_017, "hosts": report}


def test_a_retried_report_keeps_its_sequence(portal):
    """The portal may have applied the first attempt: the retry must not pass for a newer one."""
    from loam_agent.client import HOSTS_REPORT_PATH

    portal.hosts = []
    portal.answer(HOSTS_REPORT_PATH, (503, {"detail": "busy"}))
    with client_for(portal) as client:
        client.report_hosts(41, [])
    assert [r.body["sequence"] for r in portal.requests(HOSTS_REPORT_PATH)] == [41, 41]
