"""The host spec's web-terminal CAs and services, as the agent reads them from the portal."""

import pytest
from loam_agent.hosts.model import DesiredHost, HostError, HostService

HOST = {"id": "h-1", "generation": 1, "state": "running"}
JUPYTER = {"name": "jupyter", "port": 8888, "base_url": "/instances/42/jupyter/", "token": "t0k"}


def test_an_older_portal_sends_no_user_cas_and_no_services():
    host = DesiredHost.from_json(HOST)
    assert (host.ssh_user_ca_keys, host.services) == ((), ())
    host = DesiredHost.from_json({**HOST, "ssh_user_ca_keys": None, "services": None})
    assert (host.ssh_user_ca_keys, host.services) == ((), ())


def test_user_cas_and_services_are_read():
    host = DesiredHost.from_json(
        {**HOST, "ssh_user_ca_keys": ["ssh-ed25519 AAAA ca"], "services": [JUPYTER]}
    )
    assert host.ssh_user_ca_keys == ("ssh-ed25519 AAAA ca",)
    assert host.services == (HostService("jupyter", 8888, "/instances/42/jupyter/", "t0k"),)


@pytest.mark.parametrize(
    ("services", "message"),
    [
        ([{**JUPYTER, "name": "../etc/passwd"}], "not a plain lower-case name"),
        ([{**JUPYTER, "port": 0}], "service port must be a port number"),
        ([{**JUPYTER, "base_url": "/instances/42/jupyter"}], "must start and end with '/'"),
        ([JUPYTER, {**JUPYTER, "port": 8889}], "a service is listed twice"),
        ([{"name": "jupyter"}], "port"),
    ],
)
def test_a_service_the_agent_cannot_write_fails_the_host_with_the_reason(services, message):
    with pytest.raises(HostError, match=message):
        DesiredHost.from_json({**HOST, "services": services})


SHARED = {
    "name": "loam-o7-r2",
    "meta_url": "postgres://loam-o7-r2:secret@storage:5432/loam_o7_r2",
    "storage": "postgres",
    "bucket": "postgres://loam-o7-r2:secret@storage:5432/loam_o7_r2",
    "capacity_gb": 100,
}


def test_the_shared_file_system_is_read_and_absent_is_none():
    assert DesiredHost.from_json(HOST).shared_fs is None
    assert DesiredHost.from_json({**HOST, "shared_fs": None}).shared_fs is None
    shared = DesiredHost.from_json({**HOST, "shared_fs": SHARED}).shared_fs
    assert (shared.name, shared.storage, shared.capacity_gb) == ("loam-o7-r2", "postgres", 100)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "../../etc"}, "is not a JuiceFS name"),
        ({"name": "Loam"}, "is not a JuiceFS name"),
        ({"capacity_gb": 0}, "capacity must be >= 1 GB"),
    ],
)
def test_a_shared_file_system_the_agent_cannot_mount_fails_the_host(changes, message):
    with pytest.raises(HostError, match=message) as failed:
        DesiredHost.from_json({**HOST, "shared_fs": {**SHARED, **changes}})
    assert "secret" not in str(failed.value)
