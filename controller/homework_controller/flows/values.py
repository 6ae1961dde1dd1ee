"""The rule set's vocabulary: the tables and their priority bands (the layout is drawn in `flows`'s
docstring), the frames' numbers, actions, meters, the port marks, a rule, a connection's 5-tuple, cookies.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..model import Device
from ..wire.lan import SUBNET_COUNT, Subnet
from ..wire.nd import ETH_IPV6

TABLE_ADMISSION = 0
TABLE_ACCOUNTING = 1
TABLE_MARKING = 2
TABLE_ROUTING = 3


class AdmissionPriority:
    TAGGED = 1200
    BLACKLISTED = 1100
    ELSEWHERE = 1050
    DEVICE_CONTROL = 1001
    CONTROL = 1000
    GATEWAY_ARP = 950  # a forwarding device asking, as itself, for its gateway: answered by the switch
    DEVICE_ARP = 901
    ARP = 900
    ADVERTS = 800
    PORTAL = 700
    SOURCE_CHECKED = 500
    MISS = 0


class AccountingPriority:
    BLOCKED = 900
    LEARNT_FLOW = 300
    # Device-to-device traffic matches both; the sender's rule wins, so the flow is the sender's.
    DEVICE_SOURCE = 110
    DEVICE_DEST = 100
    MISS = 0


class MarkingPriority:
    BY_AGENT = 500  # a device's socket (its protocol and port, any far end) its agent named a program for
    BY_NAME = 400  # a device and an address its lookups named for an app
    DEMOTED_PORT = 300  # a device over its share of High: its High apps' ports, at Medium
    BY_PORT = 200  # an app's service port, either end (every device)
    MISS = 0


class RoutingPriority:
    TO_DEVICE = 600
    BROADCAST = 550
    MISS = 0


# Symbolic ports, resolved when the rule becomes a FlowMod.
IN_PORT = "IN_PORT"
LOCAL = "LOCAL"
CONTROLLER = "CONTROLLER"

ETH_IPV4, ETH_ARP, ETH_EAPOL = 0x0800, 0x0806, 0x888E
DHCP_SERVER_PORT, DHCP_CLIENT_PORT = 67, 68
ALL_HOSTS, MULTICAST = "255.255.255.255", ("224.0.0.0", "240.0.0.0")
VLAN_PRESENT = 0x1000  # OpenFlow 1.3's OFPVID_PRESENT bit of vlan_vid
DNS_OVER_TLS_PORT = 853
DNS_PORT = 53
PROTO_TCP, PROTO_UDP = 6, 17
FLOW_IDLE_TIMEOUT_S = 30

BASE_COOKIE = 0x1
BROADCAST_COOKIE = 0x2
DEVICE_COOKIE_BASE = 1 << 48  # above the MAC's 48 bits
DEVICE_COOKIE_MASK = 0xFFFF_FFFF_FFFF_FFFF


@dataclass(frozen=True)
class Output:
    port: int | str


@dataclass(frozen=True)
class SetField:
    field: str
    value: str | int


@dataclass(frozen=True)
class SetQueue:
    """OpenFlow set_queue: the egress queue on a kernel-datapath switch (no effect on the userspace one)."""

    queue_id: int


@dataclass(frozen=True)
class DecTtl:
    pass


@dataclass(frozen=True)
class GotoTable:
    table: int


@dataclass(frozen=True)
class Group:
    """Hand the packet to an OpenFlow group (`CopyGroup`)."""

    group_id: int


@dataclass(frozen=True)
class CopyGroup:
    """An OpenFlow group of type ALL: each bucket's actions run on a copy of the packet, and the rule that
    names the group goes on with the packet as it was."""

    group_id: int
    buckets: tuple[tuple, ...]  # each bucket's actions


@dataclass(frozen=True)
class Meter:
    """Send the packet through an OpenFlow meter first (a packet-in budget)."""

    meter_id: int


@dataclass(frozen=True)
class MeterBand:
    meter_id: int
    rate_pps: int
    burst: int


# Packet-in budgets (packets per second). Every device the router knows has its own meter for
# what it sends the controller (DHCP, ARP); devices it does not know yet share one, so a storm
# of forged MACs eats only the newcomers' budget, never a known device's. The newcomers' burst
# lets a whole household (100 devices after a power cut) ask at once: a DISCOVER and a REQUEST
# each (a device has its own budget only from its first lease on), and some to spare.
NEWCOMERS_METER = MeterBand(1, rate_pps=100, burst=250)
DEVICE_METER_PPS, DEVICE_METER_BURST = 20, 20
# A held-back device's budget towards the captive portal (what it sends the router's port 80): a page and its
# parts in one burst, a few pages a second after that. A device asking for pages as fast as it can (8 at once)
# otherwise kept the web UI and the controller busy enough to triple another device's DNS p99 (issue 39); now
# the switch drops what is over, before any process sees it.
PORTAL_METER_PPS, PORTAL_METER_BURST = 100, 300


# DHCP reaching the router's DHCP socket carries the access port it came in on as its destination MAC
# (a locally administered address no interface has: the router's stack ignores the frame, the raw
# socket reads it). "HWP" and the port number in the last two bytes.
PORT_MARK_PREFIX = "0a:48:57:50"
ANY_PORT_MARK = (PORT_MARK_PREFIX + ":00:00", "ff:ff:ff:ff:00:00")  # (value, mask)


def port_mark(port: int) -> str:
    assert 0 < port < 0xFF00, f"not a switch port: {port}"
    return f"{PORT_MARK_PREFIX}:{port >> 8:02x}:{port & 0xFF:02x}"


def port_of_mark(mac: str) -> int | None:
    """The access port a DHCP frame came in on, from its destination MAC; None: not marked."""
    if not mac.startswith(PORT_MARK_PREFIX + ":"):
        return None
    return int(mac[len(PORT_MARK_PREFIX) + 1 :].replace(":", ""), 16) or None


def device_meter(device: Device) -> MeterBand:
    assert device.subnet is not None, "only a device with a /30 has its own meter"
    return meter_of(device.subnet)


def meter_of(subnet: Subnet) -> MeterBand:
    return MeterBand(2 + subnet.index, DEVICE_METER_PPS, DEVICE_METER_BURST)


def portal_meter_of(subnet: Subnet) -> MeterBand:
    """The /30's device's budget towards the captive portal (ids above every `meter_of`)."""
    return MeterBand(2 + SUBNET_COUNT + subnet.index, PORTAL_METER_PPS, PORTAL_METER_BURST)


@dataclass(frozen=True)
class FlowRule:
    table: int
    priority: int
    match: tuple[tuple[str, object], ...]
    actions: tuple = ()  # empty: drop
    cookie: int = BASE_COOKIE
    idle_timeout: int = 0
    notify_removal: bool = False

    @property
    def match_dict(self) -> dict:
        return dict(self.match)

    @property
    def slot(self) -> tuple:
        """What OpenFlow tells rules apart by: a rule of the same table, rule priority and match replaces it."""
        return (self.table, self.priority, self.match)


def rule(
    table: int,
    priority: int,
    actions=(),
    cookie: int = BASE_COOKIE,
    idle_timeout: int = 0,
    notify_removal: bool = False,
    **match,
) -> FlowRule:
    return FlowRule(table, priority, tuple(sorted(match.items())), tuple(actions), cookie, idle_timeout, notify_removal)


class FiveTuple(NamedTuple):
    """A connection direction. A named tuple, not a dataclass: made and hashed for every counted flow
    at every poll and every export merge (thousands under the lock), where a tuple's C code is ~5x faster."""

    proto: int
    saddr: str
    sport: int
    daddr: str
    dport: int

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.saddr

    def match(self) -> dict:
        if self.is_ipv6:
            fields = {"eth_type": ETH_IPV6, "ip_proto": self.proto, "ipv6_src": self.saddr, "ipv6_dst": self.daddr}
        else:
            fields = {"eth_type": ETH_IPV4, "ip_proto": self.proto, "ipv4_src": self.saddr, "ipv4_dst": self.daddr}
        if self.proto == PROTO_TCP:
            fields.update(tcp_src=self.sport, tcp_dst=self.dport)
        elif self.proto == PROTO_UDP:
            fields.update(udp_src=self.sport, udp_dst=self.dport)
        return fields

    @classmethod
    def from_match(cls, match: dict) -> FiveTuple:
        proto = match.get("ip_proto", 0)
        prefix = {PROTO_TCP: "tcp", PROTO_UDP: "udp"}.get(proto)
        family, unspecified = ("ipv6", "::") if "ipv6_src" in match or "ipv6_dst" in match else ("ipv4", "0.0.0.0")
        return cls(
            proto,
            match.get(f"{family}_src", unspecified),
            match.get(f"{prefix}_src", 0) if prefix else 0,
            match.get(f"{family}_dst", unspecified),
            match.get(f"{prefix}_dst", 0) if prefix else 0,
        )


def masked(prefix: str) -> tuple[str, str]:
    """An IPv6 prefix as an OpenFlow masked match (address, mask)."""
    net = ipaddress.IPv6Network(prefix)
    return str(net.network_address), str(net.netmask)


def device_cookie(device: Device) -> int:
    """A cookie per device so its rules (learnt flows included) go in one delete."""
    return cookie_of(device.mac)


def cookie_of(mac: str) -> int:
    return DEVICE_COOKIE_BASE | int(mac.replace(":", ""), 16)


def outputs_to(targets: Sequence[int], in_port: int | str) -> tuple[Output, ...]:
    """Out of each target port; the port the packet came in on only as IN_PORT (OpenFlow sends nothing
    back out of its in_port otherwise)."""
    return tuple(Output(IN_PORT if t == in_port else t) for t in targets)


def unspecified(address: str) -> str:
    """The far side of a device's whole-device row, in the address's family."""
    return "::" if ":" in address else "0.0.0.0"
