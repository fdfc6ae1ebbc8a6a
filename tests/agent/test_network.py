"""The host network's rules as data: what the portal may send, and the nftables table rendered
from it (tests/agent/test_runtime_network.py tries the rules on real hosts)."""

import pytest
from loam_agent.hosts.model import DesiredHost, HostError, HostNetwork
from loam_agent.hosts.network import AttachedHost, ServerNetwork, check, render, resolv_conf

SERVER = ServerNetwork(uplink="eth0", public_address="198.51.100.2", dns_servers=("192.0.2.53",))


def attached(key: str, index: int, group: str, ports=(), ingress=(), public_ip="") -> AttachedHost:
    network = HostNetwork.from_json(
        {"group": group, "ports": list(ports), "ingress": list(ingress), "public_ip": public_ip}
    )
    return AttachedHost(key=key, veth=f"vh-{key}", address=f"10.213.{index}.2", network=network)


def test_a_host_reached_on_its_ports_by_its_group_and_its_security_group():
    ssh = {"purpose": "ssh", "protocol": "tcp", "server_port": 20000, "host_port": 22}
    web = {"protocol": "tcp", "from_port": 8000, "to_port": 8100, "source": "203.0.113.7/24"}
    dns = {"protocol": "udp", "from_port": 53, "to_port": 53, "source": "2001:db8::1/32"}
    table = render(
        SERVER,
        [
            attached("aaaa0001", 1, "o-1", ports=[ssh], ingress=[web, dns]),
            attached("aaaa0002", 2, "o-1"),
            attached("bbbb0001", 3, "o-2"),
        ],
    )

    dnat = "ip daddr 198.51.100.2 tcp dport 20000 dnat ip to 10.213.1.2:22"
    assert table.count(dnat) == 2  # from outside, and from the server itself
    assert 'ip saddr 10.213.0.0/16 oifname "eth0" masquerade' in table
    # One organization's hosts let each other in; the other organization's host only itself.
    assert 'iifname { "vh-aaaa0001", "vh-aaaa0002" } accept' in table
    assert 'iifname { "vh-bbbb0001" } accept' in table
    # The source network is normalized; the rule counts ports on the host's side.
    assert "ip saddr 203.0.113.0/24 meta l4proto tcp th dport 8000-8100 accept" in table
    assert "ip6 saddr 2001:db8::/32 meta l4proto udp th dport 53 accept" in table
    # The table replaces the previous one in one transaction.
    assert table.splitlines()[:2] == ["table inet loam", "delete table inet loam"]


def test_a_host_with_a_public_ip_of_its_own_gets_all_of_it():
    host = attached("aaaa0001", 1, "o-1", public_ip="198.51.100.130")
    table = render(SERVER, [host])
    assert table.count("ip daddr 198.51.100.130 dnat ip to 10.213.1.2") == 2
    snat = 'ip saddr 10.213.1.2 oifname "eth0" snat ip to 198.51.100.130'
    assert table.index(snat) < table.index("masquerade")


def test_without_a_public_address_nothing_is_published():
    server = ServerNetwork(uplink="eth0", public_address=None)
    ports = [{"protocol": "tcp", "server_port": 20000, "host_port": 22}]
    assert "dnat" not in render(server, [attached("aaaa0001", 1, "o-1", ports=ports)])


def test_an_interface_name_that_would_inject_rules_is_refused():
    with pytest.raises(HostError, match="can't be used in a firewall rule"):
        render(ServerNetwork(uplink='eth0" accept; #', public_address=None), [])


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ({"group": "o 1; drop"}, "not a plain name"),
        ({"public_ip": "2001:db8::7"}, "public_ip must be an IPv4 address"),
        ({"public_ip": "198.51.100.300"}, "198.51.100.300"),
        ({"ports": [{"protocol": "icmp", "server_port": 1, "host_port": 1}]}, "protocol"),
        ({"ports": [{"protocol": "tcp", "server_port": 0, "host_port": 22}]}, "server_port"),
        ({"ports": [{"protocol": "tcp", "server_port": 20000, "host_port": True}]}, "host_port"),
        (
            {"ports": [{"protocol": "tcp", "server_port": 20000, "host_port": 22}] * 2},
            "forwarded twice",
        ),
        (
            {"ingress": [{"protocol": "tcp", "from_port": 9, "to_port": 8, "source": "0/0"}]},
            "above to_port",
        ),
        (
            {
                "ingress": [
                    {"protocol": "tcp", "from_port": 1, "to_port": 8, "source": "10.0.0.0/33"}
                ]
            },
            "10.0.0.0/33",
        ),  # fmt: skip
    ],
)
def test_a_network_the_agent_cannot_apply_fails_the_host_with_the_reason(network, message):
    value = {"id": "h-1", "generation": 1, "state": "running", "network": network}
    with pytest.raises(HostError, match=message):
        DesiredHost.from_json(value)


def test_an_older_portal_without_networks_gives_a_host_of_its_own():
    host = DesiredHost.from_json({"id": "h-1", "generation": 1, "state": "running"})
    assert host.network == HostNetwork()


def test_hosts_are_given_the_servers_name_servers():
    assert resolv_conf(SERVER).splitlines()[1:] == ["nameserver 192.0.2.53"]


def ssh_on(server_port: int) -> dict:
    return {"purpose": "ssh", "protocol": "tcp", "server_port": server_port, "host_port": 22}


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ([attached("a0000001", 1, "o-1", ports=[ssh_on(22)])], "outside this server's public"),
        (
            [
                attached("a0000001", 1, "o-1", ports=[ssh_on(20000)]),
                attached("b0000001", 2, "o-2", ports=[ssh_on(20000)]),
            ],
            "tcp port 20000 is another host's",
        ),
        ([attached("a0000001", 1, "o-1", public_ip="198.51.100.2")], "can't be a host's public"),
        ([attached("a0000001", 1, "o-1", public_ip="10.213.9.2")], "can't be a host's public"),
        ([attached("a0000001", 1, "o-1", public_ip="127.0.0.9")], "can't be a host's public"),
        (
            [
                attached("a0000001", 1, "o-1", public_ip="198.51.100.130"),
                attached("b0000001", 2, "o-2", public_ip="198.51.100.130"),
            ],
            "public IP 198.51.100.130 is another host's",
        ),
    ],
)
def test_a_forward_that_would_take_others_traffic_is_refused(hosts, message):
    """The agent doesn't trust the portal with the server's own ports and addresses."""
    with pytest.raises(HostError, match=message):
        check(SERVER, hosts)


def test_only_forwarded_traffic_meets_a_security_group_and_replies_alone_skip_it():
    table = render(SERVER, [attached("aaaa0001", 1, "o-1", ingress=[OPEN_TCP])])
    assert "ct status dnat ip saddr 0.0.0.0/0 meta l4proto tcp th dport 1-65535 accept" in table
    # Established original-direction packets meet the rules again (a closed port closes).
    assert 'oifname "vh-*" ct direction reply ct state established accept' in table
    assert "established,related accept" not in table.split("chain forward")[1].split("chain")[0]


OPEN_TCP = {"protocol": "tcp", "from_port": 1, "to_port": 65535, "source": "0.0.0.0/0"}
