"""Hosts on the network: egress through the server's uplink, published ports, security groups.

Each host has its own point-to-point link (a veth `vh-<key>`, 10.213.N.1 on the server,
10.213.N.2 in the host) and a default route through it. Everything else is one nftables table,
`inet loam`, rendered from the state of every host on the server and replaced in one atomic
`nft -f` whenever any host's network changes, and when the agent starts (so a reboot or a crash
loses no mapping, and a released host leaves no rule behind):

- hosts reach the internet through the uplink, masqueraded as the server;
- each published port on the server's public address is DNAT-ed to its host's port, for packets
  arriving from outside and for those the server sends itself; a host given a public IP of its
  own (one the park routes to this server) gets every port of it, and goes out from it;
- traffic to a host passes only when it comes from a host of the same group (one organization's
  hosts on this server share a private network) or matches one of the host's ingress rules
  (its security group); anything else is rejected;
- a host reaches nothing through the server but the uplink and hosts of its own group, and
  nothing on the server itself.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from loam_agent.hosts.model import HostError, HostNetwork

HOST_NETWORKS = "10.213.0.0/16"
TABLE = "loam"
REJECT = "reject with icmpx type admin-prohibited"


@dataclass(frozen=True)
class ServerNetwork:
    """The server's side: where hosts go out, and the address tenants reach it on."""

    uplink: str
    public_address: str | None
    dns_servers: tuple[str, ...] = ()


@dataclass(frozen=True)
class AttachedHost:
    """One host as the ruleset sees it."""

    key: str
    veth: str
    address: str
    network: HostNetwork


def discover(
    uplink: str | None, public_address: str | None, dns_servers: tuple[str, ...] | None
) -> ServerNetwork:
    """Fill what the configuration leaves out: the default route's interface, its first IPv4
    address, and the server's own non-loopback name servers."""
    if not uplink:
        match = re.search(r"^default .*?\bdev (\S+)", _ip("route", "show", "default"), re.M)
        if match is None:
            raise HostError("no default route: set `uplink` in the agent's configuration")
        uplink = match.group(1)
    if not public_address:
        match = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", _ip("-4", "addr", "show", "dev", uplink))
        public_address = match.group(1) if match else None
    if dns_servers is None:
        dns_servers = tuple(_system_name_servers())
    return ServerNetwork(uplink=uplink, public_address=public_address, dns_servers=dns_servers)


def _system_name_servers(resolv_conf: Path = Path("/etc/resolv.conf")) -> list[str]:
    servers = []
    try:
        lines = resolv_conf.read_text().splitlines()
    except OSError:
        return servers
    for line in lines:
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            try:
                address = ipaddress.ip_address(fields[1])
            except ValueError:
                continue
            # A stub resolver on the server's loopback is not reachable from a host.
            if not address.is_loopback:
                servers.append(str(address))
    return servers


def _ip(*arguments: str) -> str:
    try:
        result = subprocess.run(["ip", *arguments], capture_output=True, text=True)
    except FileNotFoundError:
        raise HostError("`ip` is not installed (iproute2): hosts need it") from None
    return result.stdout


def _nft_string(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.:*-]+", value):
        raise HostError(f"{value!r} can't be used in a firewall rule")
    return f'"{value}"'


def render(server: ServerNetwork, hosts: list[AttachedHost]) -> str:
    """The whole `inet loam` table for these hosts (an `nft -f` script that replaces it)."""
    uplink = _nft_string(server.uplink)
    publish, own_addresses = [], []
    for host in hosts:
        if host.network.public_ip:
            publish.append(f"ip daddr {host.network.public_ip} dnat ip to {host.address}")
            own_addresses.append(
                f"ip saddr {host.address} oifname {uplink} snat ip to {host.network.public_ip}"
            )
        for port in host.network.ports:
            if server.public_address is None:
                break
            publish.append(
                f"ip daddr {server.public_address} {port.protocol} dport {port.server_port} "
                f"dnat ip to {host.address}:{port.host_port}"
            )
    groups: dict[str, list[str]] = {}
    for host in hosts:
        if host.network.group:
            groups.setdefault(host.network.group, []).append(host.veth)
    dispatch, host_chains = [], []
    for host in hosts:
        chain = f"to_{host.key}"
        dispatch.append(f"oifname {_nft_string(host.veth)} jump {chain}")
        rules = []
        peers = groups.get(host.network.group, []) if host.network.group else [host.veth]
        rules.append(f"iifname {{ {', '.join(_nft_string(peer) for peer in peers)} }} accept")
        rules.append(f'iifname "vh-*" {REJECT}')
        for rule in host.network.ingress:
            ports = (
                str(rule.from_port)
                if rule.from_port == rule.to_port
                else f"{rule.from_port}-{rule.to_port}"
            )
            # Hosts have IPv4 addresses only: an IPv6 source is kept, and matches nothing yet.
            family = "ip6" if ":" in rule.source else "ip"
            rules.append(
                f"{family} saddr {rule.source} meta l4proto {rule.protocol} th dport {ports} accept"
            )
        rules.append(REJECT)
        host_chains.append(_chain(chain, rules))
    chains = [
        _chain(
            "prerouting",
            ["type nat hook prerouting priority dstnat; policy accept;", *publish],
        ),
        # Connections the server makes to its own public address reach the hosts too.
        _chain("output", ["type nat hook output priority -100; policy accept;", *publish]),
        _chain(
            "postrouting",
            [
                "type nat hook postrouting priority srcnat; policy accept;",
                *own_addresses,
                f"ip saddr {HOST_NETWORKS} oifname {uplink} masquerade",
            ],
        ),
        _chain(
            "forward",
            [
                "type filter hook forward priority filter; policy accept;",
                'oifname "vh-*" ct state established,related accept',
                'iifname "vh-*" ct state established,related accept',
                'oifname "vh-*" ct state invalid drop',
                'oifname "vh-*" jump to_host',
                f'iifname "vh-*" oifname {uplink} accept',
                f'iifname "vh-*" {REJECT}',
            ],
        ),
        _chain("to_host", [*dispatch, REJECT]),
        *host_chains,
        _chain(
            "input",
            [
                "type filter hook input priority filter; policy accept;",
                'iifname "vh-*" ct state established,related accept',
                f'iifname "vh-*" {REJECT}',
            ],
        ),
    ]
    # `table` first, so that the delete finds one; the whole file is one transaction.
    head = [f"table inet {TABLE}", f"delete table inet {TABLE}", f"table inet {TABLE} {{"]
    return "\n".join([*head, *chains, "}"])


def _chain(name: str, rules: list[str]) -> str:
    body = "\n".join(f"    {rule}" for rule in rules)
    return f"  chain {name} {{\n{body}\n  }}"


class Firewall:
    """Applies the rendered table; one apply at a time (host workers run in parallel)."""

    def __init__(self, server: ServerNetwork) -> None:
        self.server = server
        self._lock = threading.Lock()

    def apply(self, hosts: list[AttachedHost]) -> None:
        script = render(self.server, hosts)
        with self._lock:
            Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
            result = subprocess.run(
                ["nft", "-f", "-"], input=script, capture_output=True, text=True
            )
        if result.returncode != 0:
            raise HostError(f"nft refused the host rules: {result.stderr.strip()[-1500:]}")

    @staticmethod
    def remove() -> None:
        subprocess.run(
            ["nft", "delete", "table", "inet", TABLE], capture_output=True, text=True, check=False
        )


def resolv_conf(server: ServerNetwork) -> str:
    lines = [f"nameserver {address}" for address in server.dns_servers]
    return "\n".join(["# written by loam-agent", *lines, ""])
