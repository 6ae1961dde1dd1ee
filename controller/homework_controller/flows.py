"""The switch's rule set, compiled from state by pure functions.

Rules are plain values (`FlowRule`) with os-ken OFPMatch field names; `openflow.py` turns
them into FlowMods. Three tables keep rule counts additive. Rule priorities are named bands
per table (`Admission`, `Accounting`, `Routing`), highest first:

Every access port (the radio's, and wired ports where devices plug in) is "wlan" below: a device is
bound to one of them, its own (where it was first seen), and its rules accept its frames there only.

table 0, admission: what may enter at all.
  TAGGED         wlan: any VLAN-tagged frame, or one to a port mark    -> drop (a station sends untagged frames;
                                                                          only the switch writes port marks)
  BLACKLISTED    blacklisted device (from it, or to it)                -> drop
  ELSEWHERE      wlan: a bound device's MAC on another access port     -> newcomers' meter, controller (a moved
                                                                          device, or a copied MAC: `port_binding`)
  DEVICE_CONTROL wlan: a known device's DHCP (broadcast, or to its      -> its own meter, then the router (the
                 gateway) / EAPOL                                         controller's DHCP socket) / hostapd
  CONTROL        wlan: broadcast DHCP / EAPOL from anyone else         -> newcomers' meter, router / hostapd
                 router: EAPOL, DHCP answers                           -> the device's own port (to a bound
                                                                          device), else every access port
  DHCP to the router is marked with the access port it came in on (its destination MAC becomes the
  port's mark, `port_mark`), so the DHCP socket knows where a device is without a packet-in.
  DEVICE_ARP     wlan: a known device's ARP                            -> its own meter, controller
  ARP            wlan or router: ARP                                   -> (newcomers' meter,) controller (proxy ARP)
  SOURCE_CHECKED wlan: permitted device, its MAC *and* its IP          -> goto 1
                 router: IPv4 to a permitted device's MAC              -> goto 1
  MISS           anything else                                         -> drop
table 1, accounting: one counting rule per flow, so OVS counts each flow's packets and bytes.
  BLOCKED        device to an address learnt for a name blocked for it -> drop
  LEARNT_FLOW    a learnt flow (exact 5-tuple, 30 s idle timeout)      -> mark DSCP (and queue) for its app's
                                                                          priority, goto 2
  DEVICE_SOURCE  a permitted device's traffic (sent by it), and
  DEVICE_DEST    traffic to it, not yet learnt                         -> DSCP 0, copy to controller, goto 2
                 (over its flow budget: the same match without the copy: one rule for the device)
  MISS           anything else                                         -> goto 2
table 2, routing:
  TO_DEVICE      from wlan, to a permitted device's address            -> rewrite MACs, dec TTL, out its own port
                 from the router, to a permitted device's address      -> its own port (the router's stack set the MACs)
  BROADCAST      from a permitted device: to 255.255.255.255, 224.0.0.0/4 or the sender's /30
                 broadcast                                             -> one unicast copy to each *other* permitted
                                                                          device, and the router: a pending or
                                                                          denied device hears none of it
  MISS           anything else                                         -> router (its stack routes and NATs)
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import portal
from .model import Device, State, Subnet

TABLE_ADMISSION = 0
TABLE_ACCOUNTING = 1
TABLE_ROUTING = 2


class Admission:
    TAGGED = 1200
    BLACKLISTED = 1100
    ELSEWHERE = 1050
    DEVICE_CONTROL = 1001
    CONTROL = 1000
    DEVICE_ARP = 901
    ARP = 900
    PORTAL = 700
    SOURCE_CHECKED = 500
    MISS = 0


class Accounting:
    BLOCKED = 900
    LEARNT_FLOW = 300
    # Device-to-device traffic matches both; the sender's rule wins, so the flow is the sender's.
    DEVICE_SOURCE = 110
    DEVICE_DEST = 100
    MISS = 0


class Routing:
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
_DEVICE_COOKIE_BASE = 1 << 48  # above the MAC's 48 bits
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
    return _meter_of(device.subnet)


def _meter_of(subnet: Subnet) -> MeterBand:
    return MeterBand(2 + subnet.index, DEVICE_METER_PPS, DEVICE_METER_BURST)


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


@dataclass(frozen=True)
class FiveTuple:
    proto: int
    saddr: str
    sport: int
    daddr: str
    dport: int

    def match(self) -> dict:
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
        return cls(
            proto,
            match.get("ipv4_src", "0.0.0.0"),
            match.get(f"{prefix}_src", 0) if prefix else 0,
            match.get("ipv4_dst", "0.0.0.0"),
            match.get(f"{prefix}_dst", 0) if prefix else 0,
        )


def device_cookie(device: Device) -> int:
    """A cookie per device so its rules (learnt flows included) go in one delete."""
    return _cookie_of(device.mac)


def _cookie_of(mac: str) -> int:
    return _DEVICE_COOKIE_BASE | int(mac.replace(":", ""), 16)


def outputs_to(targets: Sequence[int], in_port: int | str) -> tuple[Output, ...]:
    """Out of each target port; the port the packet came in on only as IN_PORT (OpenFlow sends nothing
    back out of its in_port otherwise)."""
    return tuple(Output(IN_PORT if t == in_port else t) for t in targets)


# ---- a forwarding device's rules, one builder per shape for IPv4 and IPv6 (`flows_v6`) alike


@dataclass(frozen=True)
class Family:
    """What a rule of one shape says differently for IPv4 and IPv6: the frames' type and the match
    fields of their source and destination (an address, or a masked /64)."""

    eth_type: int
    src: str
    dst: str


IPV4 = Family(ETH_IPV4, "ipv4_src", "ipv4_dst")


def admitted(family: Family, cookie: int, mac: str, own: tuple[int, ...], source) -> set[FlowRule]:
    """On to the accounting table: from the device's MAC with its source on its own ports, and whatever
    the router sends its MAC."""
    goto = (GotoTable(TABLE_ACCOUNTING),)
    rules = {
        rule(
            TABLE_ADMISSION,
            Admission.SOURCE_CHECKED,
            goto,
            cookie,
            in_port=port,
            eth_src=mac,
            eth_type=family.eth_type,
            **{family.src: source},
        )
        for port in own
    }
    rules.add(
        rule(
            TABLE_ADMISSION,
            Admission.SOURCE_CHECKED,
            goto,
            cookie,
            in_port=LOCAL,
            eth_dst=mac,
            eth_type=family.eth_type,
        )
    )
    return rules


def counted(family: Family, cookie: int, priorities: tuple[int, int], actions: tuple, address) -> set[FlowRule]:
    """The device's traffic counted, sent by it and to it (priorities: of each), then `actions`."""
    sent, received = priorities
    return {
        rule(TABLE_ACCOUNTING, sent, actions, cookie, eth_type=family.eth_type, **{family.src: address}),
        rule(TABLE_ACCOUNTING, received, actions, cookie, eth_type=family.eth_type, **{family.dst: address}),
    }


def routed_to(
    family: Family, cookie: int, mac: str, router_mac: str, own: tuple[int, ...], access_ports: tuple[int, ...], address
) -> set[FlowRule]:
    """To the device's address: from the router out of its own ports (the router's stack set the MACs);
    from any access port (another device's) hairpinned through the router, MACs rewritten, TTL (hop
    limit) decremented, out of its own port."""
    rules = {
        rule(
            TABLE_ROUTING,
            Routing.TO_DEVICE,
            outputs_to(own, LOCAL),
            cookie,
            in_port=LOCAL,
            eth_type=family.eth_type,
            **{family.dst: address},
        )
    }
    rules |= {
        rule(
            TABLE_ROUTING,
            Routing.TO_DEVICE,
            (SetField("eth_src", router_mac), SetField("eth_dst", mac), DecTtl(), *outputs_to(own, port)),
            cookie,
            in_port=port,
            eth_type=family.eth_type,
            **{family.dst: address},
        )
        for port in access_ports
    }
    return rules


def encrypted_dns_refused(family: Family, cookie: int, source) -> set[FlowRule]:
    """The household blocks names for the device: its encrypted DNS (DNS over TLS or QUIC, port 853),
    which the router cannot read, is dropped, so it falls back to plain DNS."""
    return {
        rule(
            TABLE_ACCOUNTING,
            Accounting.BLOCKED,
            (),
            cookie,
            eth_type=family.eth_type,
            ip_proto=proto,
            **{family.src: source, f"{l4}_dst": DNS_OVER_TLS_PORT},
        )
        for proto, l4 in ((PROTO_TCP, "tcp"), (PROTO_UDP, "udp"))
    }


def address_blocked(family: Family, cookie: int, source, address: str) -> FlowRule:
    """The device may not reach an address learnt for a name blocked for it (even by address)."""
    return rule(
        TABLE_ACCOUNTING,
        Accounting.BLOCKED,
        (),
        cookie,
        eth_type=family.eth_type,
        **{family.src: source, family.dst: address},
    )


@dataclass(frozen=True)
class DeviceRules:
    """The rules a device should have (learnt flows aside), named by what they are made of, so that two are
    equal exactly when their rules are: the router compares the wanted set with the installed one after
    every change and for every device on each tick, and a comparison of these costs no rule building.

    The rules themselves (`rules`, or iterating) are built when first read, which is when they are sent: a
    storm's newcomers' rules wait behind the answers (`held.py`), and are built once the storm is quiet.
    Made by `device_rules`, which leaves out what a kind of rule set does not depend on."""

    mac: str
    access_ports: tuple[int, ...]
    port: int | None = None  # its own access port; None: not bound to one yet (accepted on every one)
    blacklisted: bool = False
    subnet: Subnet | None = None  # its own packet-in budget (meter, DHCP, EAPOL, ARP), from its first lease on
    forwarding: bool = False  # permitted with a live lease: its traffic is forwarded and counted
    portal: bool = False  # held back with a live lease: it reaches the router's resolver and the portal only
    # Only a forwarding device's rules depend on these (`device_rules` leaves them at their defaults otherwise).
    router_mac: str = ""
    learning: bool = True
    dns_gated: bool = False

    @property
    def metered(self) -> bool:
        """Whether the rules send through the device's own meter (which must be on the switch first)."""
        return self.subnet is not None

    @property
    def own_ports(self) -> tuple[int, ...]:
        return self.access_ports if self.port is None else (self.port,)

    def __iter__(self) -> Iterator[FlowRule]:
        return iter(self.rules)

    @functools.cached_property
    def rules(self) -> frozenset[FlowRule]:
        cookie = _cookie_of(self.mac)
        if self.blacklisted:
            # Nothing in or out on any port, EAPOL included: it cannot even finish the key handshake.
            return frozenset(
                {
                    rule(TABLE_ADMISSION, Admission.BLACKLISTED, (), cookie, in_port=p, eth_src=self.mac)
                    for p in self.access_ports
                }
                | {rule(TABLE_ADMISSION, Admission.BLACKLISTED, (), cookie, in_port=LOCAL, eth_dst=self.mac)}
            )
        subnet = self.subnet
        assert subnet is not None, "a device without a lease has no rules (device_rules: None)"
        own = self.own_ports
        # Its MAC on another access port is not the device (or it moved): nothing of it passes there;
        # the controller hears of it on the newcomers' budget (a copier must not use up the device's).
        elsewhere = {
            rule(
                TABLE_ADMISSION,
                Admission.ELSEWHERE,
                (Meter(NEWCOMERS_METER.meter_id), Output(CONTROLLER)),
                cookie,
                in_port=p,
                eth_src=self.mac,
            )
            for p in self.access_ports
            if p not in own
        }
        # Its own packet-in budget from its first lease on: a known device's DHCP is never starved.
        meter = Meter(_meter_of(subnet).meter_id)
        budget = {
            rule(
                TABLE_ADMISSION,
                Admission.DEVICE_CONTROL,
                (meter, SetField("eth_dst", port_mark(port)), Output(LOCAL)),
                cookie,
                in_port=port,
                eth_src=self.mac,
                eth_type=ETH_IPV4,
                ip_proto=PROTO_UDP,
                ipv4_dst=server,
                udp_dst=DHCP_SERVER_PORT,
            )
            for server in (ALL_HOSTS, subnet.gateway)
            for port in own
        }
        for port in own:
            budget |= {
                rule(
                    TABLE_ADMISSION,
                    Admission.DEVICE_CONTROL,
                    (meter, Output(LOCAL)),
                    cookie,
                    in_port=port,
                    eth_src=self.mac,
                    eth_type=ETH_EAPOL,
                ),
                rule(
                    TABLE_ADMISSION,
                    Admission.DEVICE_ARP,
                    (meter, Output(CONTROLLER)),
                    cookie,
                    in_port=port,
                    eth_src=self.mac,
                    eth_type=ETH_ARP,
                ),
            }
        if self.port is not None and len(self.access_ports) > 1:
            # What the router and hostapd send it go out of its own port only.
            to_own = (Output(self.port),)
            budget |= {
                rule(
                    TABLE_ADMISSION,
                    Admission.DEVICE_CONTROL,
                    to_own,
                    cookie,
                    in_port=LOCAL,
                    eth_dst=self.mac,
                    eth_type=ETH_IPV4,
                    ip_proto=PROTO_UDP,
                    udp_src=DHCP_SERVER_PORT,
                    udp_dst=DHCP_CLIENT_PORT,
                ),
                rule(
                    TABLE_ADMISSION,
                    Admission.DEVICE_CONTROL,
                    to_own,
                    cookie,
                    in_port=LOCAL,
                    eth_dst=self.mac,
                    eth_type=ETH_EAPOL,
                ),
            }
        budget |= elsewhere
        if not self.forwarding:
            return frozenset(budget | portal_rules(self.mac, own, subnet, cookie) if self.portal else budget)
        ip = subnet.device_ip
        # The router alone sets DSCP, which the shaper classifies on: a device's own EF mark on a flow's
        # first packet, or on everything while it is over its flow budget, must not jump the queue.
        unmark = SetField("ip_dscp", 0)
        count = (
            (unmark, Output(CONTROLLER), GotoTable(TABLE_ROUTING))
            if self.learning
            else (unmark, GotoTable(TABLE_ROUTING))
        )
        rules = admitted(IPV4, cookie, self.mac, own, ip)
        rules |= routed_to(IPV4, cookie, self.mac, self.router_mac, own, self.access_ports, ip)
        rules |= counted(IPV4, cookie, (Accounting.DEVICE_SOURCE, Accounting.DEVICE_DEST), count, ip)
        if self.dns_gated:
            rules |= encrypted_dns_refused(IPV4, cookie, ip)
        return frozenset(rules | budget)


def device_rules(
    device: Device,
    now: float,
    access_ports: tuple[int, ...],
    router_mac: str,
    *,
    port: int | None = None,
    learning: bool = True,
    dns_gated: bool = False,
    held: bool = False,
) -> DeviceRules | None:
    """The rules a device should have right now (learnt flows aside); None if none.

    dns_gated: the household blocks names for it, so its encrypted DNS (DNS over TLS or QUIC, port
    853), which the router cannot read, is refused: the device falls back to plain DNS.

    learning=False is the device over its flow budget: one rule each way instead of a
    rule per flow, and no copies to the controller.

    held: a per-device policy holds its traffic for now (it is paused): its rules are a
    non-forwarding device's, DHCP and ARP only, and while its lease is live the captive portal.

    port: the access port it is bound to (`port_binding`); None: any of them.
    """
    if device.state is State.BLACKLISTED:
        return DeviceRules(device.mac, access_ports, blacklisted=True)
    live = device.lease_active(now)
    if device.subnet is None or (device.state is State.PENDING and not live):
        # Not even a lease yet (a DISCOVER is all it sent, which is all a forged MAC sends):
        # it shares the newcomers' budget, and a storm of them costs the switch nothing.
        return None
    if held or not (device.forwards and live):
        portal = live and device.state is not State.DENIED  # held back, so told why (refused: nothing)
        return DeviceRules(device.mac, access_ports, port, subnet=device.subnet, portal=portal)
    return DeviceRules(
        device.mac,
        access_ports,
        port,
        subnet=device.subnet,
        forwarding=True,
        router_mac=router_mac,
        learning=learning,
        dns_gated=dns_gated,
    )


def dns_block_rule(device: Device, addr: str) -> FlowRule:
    """The device may not reach an address learnt for a name blocked for it (even by address)."""
    assert device.subnet is not None
    return address_blocked(IPV4, device_cookie(device), device.subnet.device_ip, addr)


def learnt_flow_rule(device: Device, flow: FiveTuple, mark: tuple = ()) -> FlowRule:
    """One flow's counting rule; mark: the actions that mark its packets for the shaper (`qos.mark_actions`)."""
    return rule(
        TABLE_ACCOUNTING,
        Accounting.LEARNT_FLOW,
        (*mark, GotoTable(TABLE_ROUTING)),
        device_cookie(device),
        idle_timeout=FLOW_IDLE_TIMEOUT_S,
        notify_removal=True,
        **flow.match(),
    )


def portal_rules(mac: str, ports: tuple[int, ...], subnet: Subnet, cookie: int) -> set[FlowRule]:
    """A held-back device (pending, paused, out of its allowance) with a live lease reaches the router's
    resolver at its gateway (which answers the OS's captive-portal probes with the router's address and
    refuses every other name) and the portal on the router's address, port 80, and nothing else; only
    from its own MAC and leased address on its own ports, so no device can ask as another."""
    ip, gateway = subnet.device_ip, subnet.gateway
    services = (
        (gateway, PROTO_UDP, "udp", DNS_PORT),
        (gateway, PROTO_TCP, "tcp", DNS_PORT),
        (portal.ROUTER_ADDRESS, PROTO_TCP, "tcp", portal.HTTP_PORT),
    )
    to_device = tuple(Output(p) for p in ports)
    rules = set()
    for server, proto, l4, service in services:
        # Any: rule() takes match fields and its own options as keywords alike.
        there: dict[str, Any] = {"ipv4_src": ip, "ipv4_dst": server, "ip_proto": proto, f"{l4}_dst": service}
        back: dict[str, Any] = {"eth_type": ETH_IPV4, "ipv4_src": server, "ipv4_dst": ip, "ip_proto": proto}
        back[f"{l4}_src"] = service
        rules |= {
            rule(
                TABLE_ADMISSION,
                Admission.PORTAL,
                (Output(LOCAL),),
                cookie,
                in_port=p,
                eth_src=mac,
                eth_type=ETH_IPV4,
                **there,
            )
            for p in ports
        }
        back_rule = rule(TABLE_ADMISSION, Admission.PORTAL, to_device, cookie, in_port=LOCAL, eth_dst=mac, **back)
        rules.add(back_rule)
    return rules
