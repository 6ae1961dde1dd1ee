"""A forwarding device's rules, one builder per shape, for IPv4 (`device.py`) and IPv6 (`flows_v6`) alike:
what differs between them is the `Family`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .values import (
    DNS_OVER_TLS_PORT,
    ETH_IPV4,
    LOCAL,
    PROTO_TCP,
    PROTO_UDP,
    TABLE_ACCOUNTING,
    TABLE_ADMISSION,
    TABLE_ROUTING,
    AccountingPriority,
    AdmissionPriority,
    DecTtl,
    FlowRule,
    GotoTable,
    RoutingPriority,
    SetField,
    outputs_to,
    rule,
)


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
            AdmissionPriority.SOURCE_CHECKED,
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
            AdmissionPriority.SOURCE_CHECKED,
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
    """To the device's address: from the router out of its own ports, to its MAC (the router's stack's
    neighbour entry for the address is not trusted: a device's forged advert must not draw another's
    traffic); from any access port (another device's) hairpinned through the router, MACs rewritten, TTL
    (hop limit) decremented, out of its own port."""
    rules = {
        rule(
            TABLE_ROUTING,
            RoutingPriority.TO_DEVICE,
            (SetField("eth_dst", mac), *outputs_to(own, LOCAL)),
            cookie,
            in_port=LOCAL,
            eth_type=family.eth_type,
            **{family.dst: address},
        )
    }
    rules |= {
        rule(
            TABLE_ROUTING,
            RoutingPriority.TO_DEVICE,
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
            AccountingPriority.BLOCKED,
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
        AccountingPriority.BLOCKED,
        (),
        cookie,
        eth_type=family.eth_type,
        **{family.src: source, family.dst: address},
    )
