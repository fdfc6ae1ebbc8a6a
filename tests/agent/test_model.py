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
