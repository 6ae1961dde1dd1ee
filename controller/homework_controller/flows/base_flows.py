"""The rules the switch holds whatever devices there are (`base_rules`: the table layout's fixed rules,
the newcomers' budget, the misses), and broadcast among permitted devices (`broadcast_rules`, rebuilt
when the permitted set changes); both in `flows`' tables and bands (its docstring draws the layout).
A device's own rules are `flows.device_rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..model import Device
from . import (
    ALL_HOSTS,
    ANY_PORT_MARK,
    BROADCAST_COOKIE,
    CONTROLLER,
    DHCP_CLIENT_PORT,
    DHCP_SERVER_PORT,
    ETH_ARP,
    ETH_EAPOL,
    ETH_IPV4,
    LOCAL,
    MULTICAST,
    NEWCOMERS_METER,
    PROTO_UDP,
    TABLE_ACCOUNTING,
    TABLE_ADMISSION,
    TABLE_MARKING,
    TABLE_ROUTING,
    VLAN_PRESENT,
    AccountingPriority,
    AdmissionPriority,
    FlowRule,
    GotoTable,
    MarkingPriority,
    Meter,
    Output,
    RoutingPriority,
    SetField,
    outputs_to,
    port_mark,
    rule,
)


def base_rules(access_ports: Sequence[int]) -> list[FlowRule]:
    to_controller = (Output(CONTROLLER),)
    newcomers_meter = Meter(NEWCOMERS_METER.meter_id)
    newcomer = (newcomers_meter, Output(CONTROLLER))
    to_every_access_port = tuple(Output(p) for p in access_ports)
    rules = []
    for port in access_ports:
        rules += [
            # OVS matches an untagged frame's fields whatever tag it carries: refuse tags outright.
            rule(TABLE_ADMISSION, AdmissionPriority.TAGGED, (), in_port=port, vlan_vid=(VLAN_PRESENT, VLAN_PRESENT)),
            # A port mark from a device would tell the DHCP socket it is on another port.
            rule(TABLE_ADMISSION, AdmissionPriority.TAGGED, (), in_port=port, eth_dst=ANY_PORT_MARK),
            # DHCP goes to the controller's socket on the router's LAN interface, not as packet-ins:
            # no OpenFlow round trip on the path a hundred devices take at once after a power cut.
            # Only to a DHCP server's addresses: the router's stack would route anything else onwards.
            rule(
                TABLE_ADMISSION,
                AdmissionPriority.CONTROL,
                (newcomers_meter, SetField("eth_dst", port_mark(port)), Output(LOCAL)),
                in_port=port,
                eth_type=ETH_IPV4,
                ip_proto=PROTO_UDP,
                ipv4_dst=ALL_HOSTS,
                udp_dst=DHCP_SERVER_PORT,
            ),
            # EAPOL between devices and the authenticator (hostapd) on the router's side, metered:
            # a flood of forged EAPOL-Starts uses up the newcomers' budget, not hostapd.
            rule(
                TABLE_ADMISSION,
                AdmissionPriority.CONTROL,
                (newcomers_meter, Output(LOCAL)),
                in_port=port,
                eth_type=ETH_EAPOL,
            ),
            rule(TABLE_ADMISSION, AdmissionPriority.ARP, newcomer, in_port=port, eth_type=ETH_ARP),
        ]
    return rules + [
        # To a device not bound to a port yet (a newcomer's offer): every access port.
        rule(
            TABLE_ADMISSION,
            AdmissionPriority.CONTROL,
            to_every_access_port,
            in_port=LOCAL,
            eth_type=ETH_IPV4,
            ip_proto=PROTO_UDP,
            udp_src=DHCP_SERVER_PORT,
            udp_dst=DHCP_CLIENT_PORT,
        ),
        rule(TABLE_ADMISSION, AdmissionPriority.CONTROL, to_every_access_port, in_port=LOCAL, eth_type=ETH_EAPOL),
        rule(TABLE_ADMISSION, AdmissionPriority.ARP, to_controller, in_port=LOCAL, eth_type=ETH_ARP),
        rule(TABLE_ADMISSION, AdmissionPriority.MISS, ()),
        rule(TABLE_ACCOUNTING, AccountingPriority.MISS, (GotoTable(TABLE_MARKING),)),
        rule(TABLE_MARKING, MarkingPriority.MISS, (GotoTable(TABLE_ROUTING),)),
        rule(TABLE_ROUTING, RoutingPriority.MISS, (Output(LOCAL),)),
    ]


def broadcast_rules(
    permitted: list[Device], access_ports: Sequence[int], own_ports: Callable[[str], Sequence[int]]
) -> frozenset[FlowRule]:
    """Broadcast and multicast among permitted devices, as unicast copies (an access point's
    multicast-to-unicast): a pending or denied device shares the radio but hears none of it, and
    no device hears its own frames back. One rule per sender, port and destination, each naming
    every other permitted device (out of its own ports: `own_ports(mac)`), so it is rebuilt whenever
    the permitted set changes."""

    rules = set()
    for sender in permitted:
        assert sender.subnet is not None
        for port in own_ports(sender.mac):
            assert port in access_ports, f"{sender.mac} bound to {port}, not an access port"
            others = copies_to(permitted, sender, port, own_ports)
            for dst in (ALL_HOSTS, MULTICAST):
                rules.add(
                    rule(
                        TABLE_ROUTING,
                        RoutingPriority.BROADCAST,
                        others + (Output(LOCAL),),
                        BROADCAST_COOKIE,
                        in_port=port,
                        eth_src=sender.mac,
                        eth_type=ETH_IPV4,
                        ipv4_dst=dst,
                    )
                )
            # A /30's own broadcast address becomes the all-hosts broadcast (where a device expects it).
            rules.add(
                rule(
                    TABLE_ROUTING,
                    RoutingPriority.BROADCAST,
                    (SetField("ipv4_dst", ALL_HOSTS), Output(LOCAL)) + others,
                    BROADCAST_COOKIE,
                    in_port=port,
                    eth_src=sender.mac,
                    eth_type=ETH_IPV4,
                    ipv4_dst=sender.subnet.broadcast,
                )
            )
    return frozenset(rules)


def copies_to(
    permitted: list[Device], sender: Device, in_port: int, own_ports: Callable[[str], Sequence[int]]
) -> tuple:
    """One unicast copy of the sender's frame to each other permitted device, out of its own ports."""
    out: list = []
    for d in permitted:
        if d.mac != sender.mac:
            out += [SetField("eth_dst", d.mac), *outputs_to(own_ports(d.mac), in_port)]
    return tuple(out)
