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
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from loam_agent.hosts.model import HostError, HostNetwork

HOST_NETWORKS = "10.213.0.0/16"
TABLE = "loam"
RESOLVED_UPSTREAMS = Path("/run/systemd/resolve/resolv.conf")
REJECT = "reject with icmpx type admin-prohibited"


@dataclass(frozen=True)
class ServerNetwork:
    """The server's side: where hosts go out, and the address tenants reach it on."""

    uplink: str
    public_address: str | None
    dns_servers: tuple[str, ...] = ()
    public_ports: tuple[int, int] = (20000, 29999)


@dataclass(frozen=True)
class AttachedHost:
    """One host as the ruleset sees it."""

    key: str
    veth: str
    address: str
    network: HostNetwork


def discover(
    uplink: str | None,
    public_address: str | None,
    dns_servers: tuple[str, ...] | None,
    public_ports: tuple[int, int] = (20000, 29999),
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
        # systemd-resolved's stub (127.0.0.53) is unreachable from a host: its upstream list.
        dns_servers = tuple(_system_name_servers() or _system_name_servers(RESOLVED_UPSTREAMS))
    return ServerNetwork(
        uplink=uplink,
        public_address=public_address,
        dns_servers=dns_servers,
        public_ports=public_ports,
    )


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
            # A stub resolver on the server's loopback is not reachable from a host, nor an
            # IPv6 server from its IPv4-only network.
            if not address.is_loopback and address.version == 4:
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


def check(server: ServerNetwork, hosts: list[AttachedHost]) -> None:
    """Refuse what the portal must never ask: a server port outside the range it was given or
    forwarded to two hosts, a public IP that is the server's own, a host network's, or two
    hosts'. A rule that would take another tenant's traffic fails the change instead."""
    first, last = server.public_ports
    seen: dict[tuple, str] = {}
    for host in hosts:
        for port in host.network.ports:
            if not first <= port.server_port <= last:
                raise HostError(
                    f"server port {port.server_port} is outside this server's public ports "
                    f"{first}-{last}"
                )
            key = (port.protocol, port.server_port)
            if seen.setdefault(key, host.key) != host.key:
                raise HostError(f"{port.protocol} port {port.server_port} is another host's")
        if host.network.public_ip:
            address = ipaddress.ip_address(host.network.public_ip)
            if (
                host.network.public_ip == server.public_address
                or address in ipaddress.ip_network(HOST_NETWORKS)
                or not address.version == 4
                or address.is_loopback
                or address.is_multicast
                or address.is_unspecified
                or address.is_link_local
            ):
                raise HostError(f"{address} can't be a host's public IP on this server")
            if seen.setdefault(("ip", str(address)), host.key) != host.key:
                raise HostError(f"public IP {address} is another host's")


def render(server: ServerNetwork, hosts: list[AttachedHost]) -> str:
    """The whole `inet loam` table for these hosts (an `nft -f` script that replaces it)."""
    uplink = _nft_string(server.uplink)
    publish, own_addresses = _published(server, hosts)
    dispatch, host_chains = [], []
    for host in hosts:
        chain = f"to_{host.key}"
        dispatch.append(f"oifname {_nft_string(host.veth)} jump {chain}")
        host_chains.append(_chain(chain, _to_host(host, hosts)))
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
                # Replies only: every packet a host is sent in an original direction meets its
                # rules, so a rule removed cuts connections already open.
                'oifname "vh-*" ct direction reply ct state established accept',
                'iifname "vh-*" ct direction reply ct state established accept',
                'oifname "vh-*" ct state related accept',
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


def _published(server: ServerNetwork, hosts: list[AttachedHost]) -> tuple[list, list]:
    """DNAT rules for every forwarded port and public IP, and SNAT rules for the latter."""
    uplink = _nft_string(server.uplink)
    publish, own_addresses = [], []
    for host in hosts:
        if host.network.public_ip:
            publish.append(f"ip daddr {host.network.public_ip} dnat ip to {host.address}")
            own_addresses.append(
                f"ip saddr {host.address} oifname {uplink} snat ip to {host.network.public_ip}"
            )
        if server.public_address is None:
            continue
        for port in host.network.ports:
            publish.append(
                f"ip daddr {server.public_address} {port.protocol} dport {port.server_port} "
                f"dnat ip to {host.address}:{port.host_port}"
            )
    return publish, own_addresses


def _to_host(host: AttachedHost, hosts: list[AttachedHost]) -> list[str]:
    """What reaches one host: hosts of its group, then what its security group lets in of the
    traffic forwarded to it (DNAT: its ports on the public address, or its public IP)."""
    group = host.network.group
    peers = [other.veth for other in hosts if group and other.network.group == group]
    rules = [
        f"iifname {{ {', '.join(_nft_string(peer) for peer in peers or [host.veth])} }} accept",
        f'iifname "vh-*" {REJECT}',
    ]
    for rule in host.network.ingress:
        ports = (
            str(rule.from_port)
            if rule.from_port == rule.to_port
            else f"{rule.from_port}-{rule.to_port}"
        )
        # Hosts have IPv4 addresses only: an IPv6 source is kept, and matches nothing yet.
        family = "ip6" if ":" in rule.source else "ip"
        rules.append(
            f"ct status dnat {family} saddr {rule.source} "
            f"meta l4proto {rule.protocol} th dport {ports} accept"
        )
    rules.append(REJECT)
    return rules


def _chain(name: str, rules: list[str]) -> str:
    body = "\n".join(f"    {rule}" for rule in rules)
    return f"  chain {name} {{\n{body}\n  }}"


class Firewall:
    """Applies the rendered table, the hosts' public IPs on the uplink, and forgets the
    connections of what is no longer forwarded; one apply at a time (host workers run in
    parallel)."""

    def __init__(self, server: ServerNetwork) -> None:
        self.server = server
        self._lock = threading.Lock()
        # address -> what was forwarded to it at the last apply: ("tcp", 22)..., ("ip", public)
        self._forwarded: dict[str, set[tuple[str, object]]] | None = None

    def apply(self, hosts: list[AttachedHost]) -> None:
        check(self.server, hosts)
        script = render(self.server, hosts)
        with self._lock:
            try:
                Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
                result = subprocess.run(
                    ["nft", "-f", "-"], input=script, capture_output=True, text=True
                )
            except OSError as error:
                raise HostError(f"can't set up the host rules: {error}") from None
            if result.returncode != 0:
                raise HostError(f"nft refused the host rules: {result.stderr.strip()[-1500:]}")
            self._publish_addresses({host.network.public_ip for host in hosts} - {""})
            self._forget_connections(hosts)

    def _publish_addresses(self, wanted: set[str]) -> None:
        """The hosts' public IPs as /32s on the uplink (labelled `<uplink>:lm`), so the server
        answers ARP for them where the park's block is on the uplink's segment."""
        label = f"{self.server.uplink}:lm"[:15]
        listed = _ip("-4", "-o", "addr", "show", "dev", self.server.uplink, "label", label)
        present = set(re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/32", listed))
        for address in wanted - present:
            _ip("addr", "add", f"{address}/32", "dev", self.server.uplink, "label", label)
        for address in present - wanted:
            _ip("addr", "del", f"{address}/32", "dev", self.server.uplink)

    def _forget_connections(self, hosts: list[AttachedHost]) -> None:
        """Connections through a forward that is gone would live on in conntrack (a reused
        address or port would carry an old client to a new tenant): delete them."""
        now: dict[str, set[tuple[str, object]]] = {}
        for host in hosts:
            forwarded = {(port.protocol, port.host_port) for port in host.network.ports}
            if host.network.public_ip:
                forwarded.add(("ip", host.network.public_ip))
            now[host.address] = forwarded
        before, self._forwarded = self._forwarded, now
        if before is None or shutil.which("conntrack") is None:
            return  # the agent's start: nothing known to be gone
        for address, forwarded in before.items():
            gone = forwarded - now.get(address, set())
            if address not in now or any(kind == "ip" for kind, _value in gone):
                _conntrack("--reply-src", address)  # every connection into the host
                if address not in now:
                    _conntrack("--orig-src", address)
                continue
            for protocol, port in gone:
                _conntrack("-p", protocol, "--reply-src", address, "--reply-port-src", str(port))


def _conntrack(*arguments: str) -> None:
    # Exit status 1 when there was nothing to delete: not an error.
    subprocess.run(["conntrack", "-D", *arguments], capture_output=True, text=True, check=False)


def resolv_conf(server: ServerNetwork) -> str:
    lines = [f"nameserver {address}" for address in server.dns_servers]
    return "\n".join(["# written by loam-agent", *lines, ""])
