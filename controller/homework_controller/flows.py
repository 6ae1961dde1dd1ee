"""The switch's rule set, compiled from state by pure functions.

Rules are plain values (`FlowRule`) with os-ken OFPMatch field names; the
os-ken app turns them into FlowMods. Two tables keep rule counts additive:

table 0 (admission): what may enter at all.
  1100  blacklisted device (eth_src)                     -> drop
  1000  wlan: UDP to port 67 (DHCP)                      -> controller
   900  wlan or router: ARP                              -> controller (proxy ARP)
   500  wlan: permitted device, its MAC *and* its IP     -> goto table 1
   500  router: to a permitted device's MAC              -> wlan
     0  anything else                                    -> drop
table 1 (routing), only for traffic that passed the source check:
   700  DNS (UDP 53)                                     -> controller (the router's resolver)
   600  to a permitted device's address                  -> rewrite MACs, dec TTL, out the port it came in
   600  to a device's /30 broadcast                      -> rewritten to 255.255.255.255, all devices + router
   550  to 255.255.255.255 or 224.0.0.0/4                -> all devices + router
     0  anything else                                    -> router (its stack routes and NATs)
"""
from __future__ import annotations

from dataclasses import dataclass

from .model import Device, State

TABLE_ADMISSION = 0
TABLE_ROUTING = 1

# Symbolic ports, resolved by the os-ken app.
IN_PORT = "IN_PORT"
LOCAL = "LOCAL"
CONTROLLER = "CONTROLLER"

ETH_IPV4, ETH_ARP = 0x0800, 0x0806
PROTO_UDP = 17
BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"

BASE_COOKIE = 0x1
_DEVICE_COOKIE_BASE = 0x1_0000_0000


@dataclass(frozen=True)
class Output:
    port: int | str


@dataclass(frozen=True)
class SetField:
    field: str
    value: str


@dataclass(frozen=True)
class DecTtl:
    pass


@dataclass(frozen=True)
class GotoTable:
    table: int


@dataclass(frozen=True)
class FlowRule:
    table: int
    priority: int
    match: tuple[tuple[str, object], ...]
    actions: tuple = ()  # empty: drop
    cookie: int = BASE_COOKIE

    @property
    def match_dict(self) -> dict:
        return dict(self.match)


def rule(table: int, priority: int, actions=(), cookie: int = BASE_COOKIE, **match) -> FlowRule:
    return FlowRule(table, priority, tuple(sorted(match.items())), tuple(actions), cookie)


def device_cookie(device: Device) -> int:
    """A cookie per device so its rules can be removed in one delete."""
    return _DEVICE_COOKIE_BASE | int(device.mac.replace(":", ""), 16)


DEVICE_COOKIE_MASK = 0xFFFF_FFFF_FFFF_FFFF


def base_rules(wlan_port: int) -> list[FlowRule]:
    to_controller = (Output(CONTROLLER),)
    everyone = (Output(IN_PORT), Output(LOCAL))
    return [
        rule(TABLE_ADMISSION, 1000, to_controller, in_port=wlan_port, eth_type=ETH_IPV4,
             ip_proto=PROTO_UDP, udp_dst=67),
        rule(TABLE_ADMISSION, 900, to_controller, in_port=wlan_port, eth_type=ETH_ARP),
        rule(TABLE_ADMISSION, 900, to_controller, in_port=LOCAL, eth_type=ETH_ARP),
        rule(TABLE_ADMISSION, 0, ()),
        rule(TABLE_ROUTING, 700, to_controller, eth_type=ETH_IPV4, ip_proto=PROTO_UDP, udp_dst=53),
        rule(TABLE_ROUTING, 550, everyone, eth_type=ETH_IPV4, ipv4_dst="255.255.255.255"),
        rule(TABLE_ROUTING, 550, everyone, eth_type=ETH_IPV4, ipv4_dst=("224.0.0.0", "240.0.0.0")),
        rule(TABLE_ROUTING, 0, (Output(LOCAL),)),
    ]


def device_rules(device: Device, now: float, wlan_port: int, router_mac: str) -> frozenset[FlowRule]:
    """The rules a device should have right now; empty if it should have none."""
    cookie = device_cookie(device)
    if device.state is State.BLACKLISTED:
        return frozenset({rule(TABLE_ADMISSION, 1100, (), cookie, in_port=wlan_port, eth_src=device.mac)})
    if not (device.forwards and device.lease_active(now)):
        return frozenset()
    sub = device.subnet
    return frozenset({
        rule(TABLE_ADMISSION, 500, (GotoTable(TABLE_ROUTING),), cookie, in_port=wlan_port,
             eth_src=device.mac, eth_type=ETH_IPV4, ipv4_src=sub.device_ip),
        rule(TABLE_ADMISSION, 500, (Output(wlan_port),), cookie, in_port=LOCAL, eth_dst=device.mac),
        rule(TABLE_ROUTING, 600, (SetField("eth_src", router_mac), SetField("eth_dst", device.mac),
                                  DecTtl(), Output(IN_PORT)), cookie,
             eth_type=ETH_IPV4, ipv4_dst=sub.device_ip),
        rule(TABLE_ROUTING, 600, (SetField("ipv4_dst", "255.255.255.255"), SetField("eth_dst", BROADCAST_MAC),
                                  Output(IN_PORT), Output(LOCAL)), cookie,
             eth_type=ETH_IPV4, ipv4_dst=sub.broadcast),
    })
