"""Host reports in order (docs/agent-protocol.md, `sequence`): a report the portal applied
already, or one numbered before it, changes nothing, whenever it arrives; a newer one applies;
the agent of a re-enrolled server starts its own count. Hosts are ordered through the real
order flow (tests/orders/agent_hosts.py) on an agent that reports `creating` first, as
loam-agent does."""

import pytest

from apps.agents.models import AgentHost
from apps.orchestration.backends.registry import driver_of
from apps.orders.models import InstanceState
from tests.agents.conftest import HOST_KEY, FakeAgent, card, next_report_sequence
from tests.agents.test_hosts import spec
from tests.orders.agent_hosts import PUBLIC
from tests.orders.agent_hosts import agent_world as agent_world  # the fixtures, shared
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import order_host as order_host

REACHED = {"address": PUBLIC, "ssh_port": 20000, "ssh_user": "root"}

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


class AgentReportingCreatingFirst(FakeAgent):
    """Reports a host it has not seen before `creating`, then what it is, and keeps every
    report it sent, for a test to send again."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sent: list[dict] = []

    def post(self, path: str, body: dict):
        if path == "hosts/report":
            self.sent.append(body)
        return super().post(path, body)

    def converge(self) -> list[dict]:
        new = [host for host in self.hosts() if host["id"] not in self.known]
        if new:
            send(self, next_report_sequence(), *(report(host, "creating") for host in new))
        return super().converge()


def report(host: dict, state: str, **fields) -> dict:
    return {
        "id": host["id"],
        "generation": host["generation"],
        "state": state,
        "address": None,
        "ssh_port": None,
        "message": "",
        **fields,
    }


def send(agent: FakeAgent, sequence: int, *hosts: dict) -> None:
    response = agent.post("hosts/report", {"sequence": sequence, "hosts": list(hosts)})
    assert response.status_code == 204, response.content


@pytest.fixture
def agent(agent_world, client, converging):
    """gpu-07 and its agent; `order_host` orders on it (this replaces its `agent`)."""
    _server, credential = agent_world.enrol(
        "gpu-07", cards=4, public_address=PUBLIC, public_ports=[20000, 20003]
    )
    cards = [card(index) for index in range(4)]
    return converging(AgentReportingCreatingFirst(client, credential, cards))


def as_reported(host: AgentHost) -> tuple:
    host.refresh_from_db()
    return (
        host.reported_sequence,
        host.reported_generation,
        host.reported_state,
        host.reported_message,
        host.address,
        host.ssh_port,
        host.reported_at,
    )


@pytest.mark.parametrize("late", ["the creating report again", "an older report"])
def test_a_late_report_changes_nothing(agent_world, agent, order_host, late):
    instance = order_host()
    host = AgentHost.objects.get(handle=instance.backend_handle)
    creating, running = agent.sent[0], agent.sent[-1]
    assert [body["hosts"][0]["state"] for body in (creating, running)] == ["creating", "running"]
    before = as_reported(host)
    assert before[1:3] == (1, "running")

    if late == "an older report":
        (listed,) = running["hosts"]
        send(agent, running["sequence"] - 1, report(listed, "failed", message="late"))
    else:  # a retry whose first attempt got through, arriving after the newer report
        send(agent, creating["sequence"], *creating["hosts"])

    assert as_reported(host) == before
    status = driver_of(agent_world.backend).host_request_status(host.request())
    instance.refresh_from_db()
    assert status.done and instance.state == InstanceState.RUNNING
    assert instance.access == {**REACHED, "ssh_host_keys": [HOST_KEY]}
    assert (status.access.address, status.access.ssh_port) == (PUBLIC, 20000)


def test_a_newer_report_applies_after_a_late_one(agent_world, agent, order_host):
    instance = order_host()
    host = AgentHost.objects.get(handle=instance.backend_handle)
    send(agent, agent.sent[0]["sequence"], *agent.sent[0]["hosts"])  # late
    driver = driver_of(agent_world.backend)

    request = driver.stop(host.handle)
    agent.converge()

    assert driver.host_request_status(request).done
    assert as_reported(host)[:3] == (agent.sent[-1]["sequence"], 2, "stopped")


def test_the_agent_of_a_re_enrolled_server_counts_afresh(agent_world, client):
    """`enrol --force` after the agent lost its count: the new server's hosts take its
    reports from 1, however far the old server's count had gone."""
    old_server, old_credential = agent_world.enrol("gpu-07", cards=4)
    old_agent = FakeAgent(client, old_credential, [card(index) for index in range(4)])
    driver = driver_of(agent_world.backend)
    old_host = AgentHost.objects.get(handle=driver.provision(spec()).split("@")[0])
    send(old_agent, 10**15, report({"id": old_host.handle, "generation": 1}, "stopped"))

    server, credential = agent_world.enrol("gpu-07", cards=4)  # the same machine, again
    agent = FakeAgent(client, credential, [card(index) for index in range(4)])
    request = driver.provision(spec(node=server.node.hostname))
    (listed,) = agent.hosts()
    send(agent, 1, report(listed, "running", address="10.213.7.2", ssh_port=22))

    status = driver.host_request_status(request)
    assert status.done and status.access.address == "10.213.7.2"
    assert as_reported(AgentHost.objects.get(handle=listed["id"]))[:3] == (1, 1, "running")
    assert as_reported(old_host)[:3] == (10**15, 1, "stopped")


def test_a_removal_reported_by_a_restarted_agent_completes_the_release(
    agent_world, agent, order_host
):
    """An agent restarted since it last saw the host keeps no status for it, and reports its
    removal with generation 0: the release is done all the same."""
    instance = order_host()
    host = AgentHost.objects.get(handle=instance.backend_handle)
    driver = driver_of(agent_world.backend)
    request = driver.release(host.handle)

    send(
        agent,
        agent.sent[-1]["sequence"] + 1,
        report({"id": host.handle, "generation": 0}, "removed"),
    )

    assert driver.host_request_status(request).done


def test_the_keys_a_running_host_presents_are_kept_and_reach_its_access(agent, order_host):
    instance = order_host()
    host = AgentHost.objects.get(handle=instance.backend_handle)
    assert host.ssh_host_keys == [HOST_KEY]
    assert instance.access["ssh_host_keys"] == [HOST_KEY]
    # Stopped, it presents nothing: what it presented is kept for its next start.
    send(agent, next_report_sequence(), report(agent.hosts()[0], "stopped"))
    host.refresh_from_db()
    assert host.ssh_host_keys == [HOST_KEY]


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        (["ssh-ed25519 AAAA"], "ssh-ed25519 AAAA…: "),
        (["not a key"], "not a key…: "),
        ([HOST_KEY] * 9, " 8 "),
        ("ssh-ed25519 AAAA", "str"),
    ],
)
def test_a_report_with_a_broken_host_key_is_refused_naming_it(agent, order_host, keys, says):
    instance = order_host()
    host = agent.hosts()[0]
    bad = report(host, "running", address="10.213.7.2", ssh_port=22, ssh_host_keys=keys)
    response = agent.post("hosts/report", {"sequence": next_report_sequence(), "hosts": [bad]})
    assert response.status_code == 400
    assert "ssh_host_keys" in response.content.decode() and says in response.content.decode()
    assert AgentHost.objects.get(handle=instance.backend_handle).ssh_host_keys == [HOST_KEY]
