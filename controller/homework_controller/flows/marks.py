"""The marking table's rules (table 2): an app's mark decided ahead of a connection's first packet,
from what the router knows before it is sent (issue 26). The accounting table sends every permitted
packet here, its own DSCP cleared; a rule here sets its app's mark and a miss leaves it Normal.

- by port (every device, cookie `PORT_MARKS_COOKIE`): an app's service ports, either end, for the
  apps whose priority is not Normal. A range is as few prefixes (value/mask) as cover it exactly.
- by name (a device's, its marks cookie): a device and an address its lookups named for an app, both
  ways, at that app's priority for the device, whatever it is (so names beat ports, as in
  `apps.classify`).
- by its agent (a device's, its marks cookie): a socket of the device its agent named a program for
  without a far end (an unconnected UDP socket: a call's media), both ways, above names.
- while a device is over its share of High (its marks cookie): its High apps' ports at Medium.

A connection whose app is only known otherwise (an agent's report of it, its behaviour) gets a rule
of its own in the accounting table (`learnt_flow_rule`), which goes straight to routing with its mark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..model import Device
from ..wire.nd import ETH_IPV6
from .values import (
    DEVICE_COOKIE_BASE,
    ETH_IPV4,
    PROTO_TCP,
    PROTO_UDP,
    TABLE_MARKING,
    TABLE_ROUTING,
    FlowRule,
    GotoTable,
    MarkingPriority,
    masked,
    rule,
)

PORT_MARKS_COOKIE = 0x3
MARKS_COOKIE_BASE = 2 * DEVICE_COOKIE_BASE  # a device's marks: apart from its other rules, which are reinstalled
_PORT_FIELDS = {PROTO_TCP: ("tcp_src", "tcp_dst"), PROTO_UDP: ("udp_src", "udp_dst")}
# A device's side of a rule: IPv4 by its address, IPv6 by each of its /64s.
_FAMILIES = ((ETH_IPV4, "ipv4_src", "ipv4_dst"), (ETH_IPV6, "ipv6_src", "ipv6_dst"))


def marks_cookie(mac: str) -> int:
    return MARKS_COOKIE_BASE | int(mac.replace(":", ""), 16)


def port_prefixes(low: int, high: int) -> list[tuple[int, int]]:
    """The fewest (value, mask) pairs whose ports are exactly low..high."""
    out = []
    while low <= high:
        size = 1
        while low % (size * 2) == 0 and low + size * 2 - 1 <= high:
            size *= 2
        out.append((low, 0xFFFF & ~(size - 1)))
        low += size
    return out


def port_ranges(ports: Mapping[tuple[int, int], str], apps: Iterable[str]) -> list[tuple[int, str, int, int]]:
    """The apps' service ports as (proto, app, first, last) runs of consecutive ports."""
    wanted = set(apps)
    runs: list[tuple[int, str, int, int]] = []
    for (proto, port), app in sorted(ports.items()):
        if app not in wanted:
            continue
        if runs and runs[-1][:2] == (proto, app) and runs[-1][3] == port - 1:
            runs[-1] = (proto, app, runs[-1][2], port)
        else:
            runs.append((proto, app, port, port))
    return runs


def _port_match(value: int, mask: int):
    return value if mask == 0xFFFF else (value, mask)


def port_matches(ports: Mapping[tuple[int, int], str]) -> list[tuple[int, Any, str]]:
    """Every app's service ports as (proto, a port or (value, mask), app): as few as cover them exactly."""
    return [
        (proto, _port_match(value, mask), app)
        for proto, app, low, high in port_ranges(ports, set(ports.values()))
        for value, mask in port_prefixes(low, high)
    ]


def _marking(priority: int, actions: tuple, cookie: int, fields: dict[str, Any]) -> FlowRule:
    return rule(TABLE_MARKING, priority, actions, cookie, **fields)


def port_marks(
    ports: Mapping[tuple[int, int], str],
    priority_of: Callable[[str], str],
    mark_of: Callable[[str], tuple],
    ipv6: bool = False,
) -> frozenset[FlowRule]:
    """Every device's connections to or from an app's service port, marked for its priority (apps at
    Normal need none: a miss is Normal); IPv6 ones too if the router runs IPv6."""
    rules = set()
    for proto, port, app in port_matches(ports):
        if priority_of(app) == "default":
            continue
        actions = (*mark_of(priority_of(app)), GotoTable(TABLE_ROUTING))
        for eth_type, _, _ in _FAMILIES if ipv6 else _FAMILIES[:1]:
            for field in _PORT_FIELDS[proto]:
                fields = {"eth_type": eth_type, "ip_proto": proto, field: port}
                rules.add(_marking(MarkingPriority.BY_PORT, actions, PORT_MARKS_COOKIE, fields))
    return frozenset(rules)


def _own_sides(device: Device, prefixes: Iterable[str], ipv4: bool = True) -> list[tuple[int, str, str, Any]]:
    """(eth_type, the source field, the destination field, the device's side): its IPv4 address (if
    ipv4) and each of its /64s."""
    assert device.subnet is not None
    sides: list[tuple[int, str, str, Any]] = (
        [(ETH_IPV4, "ipv4_src", "ipv4_dst", device.subnet.device_ip)] if ipv4 else []
    )
    return sides + [(ETH_IPV6, "ipv6_src", "ipv6_dst", masked(p)) for p in prefixes]


def name_marks(device: Device, address: str, mark: tuple, prefixes: Iterable[str] = ()) -> list[FlowRule]:
    """The device's connections with an address its lookups named for an app, both ways, marked."""
    actions = (*mark, GotoTable(TABLE_ROUTING))
    cookie = marks_cookie(device.mac)
    v6 = ":" in address
    rules = []
    for eth_type, src, dst, own in _own_sides(device, prefixes if v6 else (), ipv4=not v6):
        rules.append(_marking(MarkingPriority.BY_NAME, actions, cookie, {"eth_type": eth_type, src: own, dst: address}))
        rules.append(_marking(MarkingPriority.BY_NAME, actions, cookie, {"eth_type": eth_type, src: address, dst: own}))
    return rules


def socket_marks(device: Device, proto: int, port: int, mark: tuple, prefixes: Iterable[str] = ()) -> list[FlowRule]:
    """A device's socket an agent named a program for (an unconnected UDP socket: any far end), both
    ways: what it sends from the port and what comes back to it."""
    actions = (*mark, GotoTable(TABLE_ROUTING))
    cookie = marks_cookie(device.mac)
    src_port, dst_port = _PORT_FIELDS[proto]
    rules = []
    for eth_type, src, dst, own in _own_sides(device, prefixes):
        fields = {"eth_type": eth_type, "ip_proto": proto}
        rules.append(_marking(MarkingPriority.BY_AGENT, actions, cookie, {**fields, src: own, src_port: port}))
        rules.append(_marking(MarkingPriority.BY_AGENT, actions, cookie, {**fields, dst: own, dst_port: port}))
    return rules


def demoted_port_marks(
    device: Device, ports: Mapping[tuple[int, int], str], apps: Iterable[str], mark: tuple, prefixes: Iterable[str] = ()
) -> list[FlowRule]:
    """The device's connections on the given apps' service ports (its High ones), marked `mark`
    (Medium) while it is over its share of High."""
    actions = (*mark, GotoTable(TABLE_ROUTING))
    cookie = marks_cookie(device.mac)
    rules = []
    for proto, _, low, high in port_ranges(ports, apps):
        src_port, dst_port = _PORT_FIELDS[proto]
        for value, mask in port_prefixes(low, high):
            port = _port_match(value, mask)
            for eth_type, src, dst, side in _own_sides(device, prefixes):
                fields = {"eth_type": eth_type, "ip_proto": proto}
                rules.append(
                    _marking(MarkingPriority.DEMOTED_PORT, actions, cookie, {**fields, src: side, dst_port: port})
                )
                rules.append(
                    _marking(MarkingPriority.DEMOTED_PORT, actions, cookie, {**fields, dst: side, src_port: port})
                )
    return rules
