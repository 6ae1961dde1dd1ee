"""The rules the switch holds whatever devices there are (`base_rules`: the table layout's fixed rules,
the newcomers' budget, the misses), and broadcast among permitted devices (`broadcast_rules`, rebuilt
when the permitted set changes); both in `flows`' tables and bands (its docstring draws the layout).
A device's own rules are `flows.device_rules`.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

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
    CopyGroup,
    FlowRule,
    GotoTable,
    Group,
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


def broadcast_rules(permitted: list[Device], access_ports: Sequence[int], copies: BroadcastCopies) -> list[FlowRule]:
    """Broadcast and multicast among permitted devices, as unicast copies (an access point's
    multicast-to-unicast): a pending or denied device shares the radio but hears none of it, and
    no device hears its own frames back. One rule per sender, port and destination, each naming
    every other permitted device (`copies`)."""

    rules = []
    for sender in permitted:
        assert sender.subnet is not None
        for port in copies.ports_of(sender.mac):
            assert port in access_ports, f"{sender.mac} bound to {port}, not an access port"
            others = copies.to_all_but(sender.mac, port)
            for dst in (ALL_HOSTS, MULTICAST):
                rules.append(
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
            rules.append(
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
    return rules


# Each sender's broadcast rules name every other forwarding device. Listing them all in every rule makes the
# rule set, and what a new or departing device sends the switch, grow with the square of the devices (1.3 MB
# of OpenFlow per permit with 100 devices). So the devices are cut into blocks by their MAC, each block's
# copies are one group per port frames come in on, and a sender's rule names the other blocks' groups and
# only its own block's other devices: a device that comes or goes changes its block's groups and the rules of
# its block's senders.
BROADCAST_BLOCKS = 16
_BROADCAST_GROUP_PORTS = 1 << 16  # above any OpenFlow port number a switch gives an access port


class BroadcastCopies:
    """A frame's unicast copy to each forwarding device (its MAC set, out of its own ports; out of IN_PORT to
    one on the port it came in on), as `Group` actions and the `CopyGroup`s they name."""

    def __init__(self, forwarding: Mapping[str, Sequence[int]]):
        self.ports_of = forwarding.__getitem__
        self._blocks: dict[int, list[str]] = {}
        for mac in sorted(forwarding):
            self._blocks.setdefault(broadcast_block(mac), []).append(mac)
        self._in_ports = sorted({port for ports in forwarding.values() for port in ports})

    def groups(self) -> list[CopyGroup]:
        return [
            CopyGroup(
                broadcast_group(block, in_port),
                tuple(self._copy_to(mac, in_port) for mac in macs),
            )
            for block, macs in sorted(self._blocks.items())
            for in_port in self._in_ports
        ]

    def to_all_but(self, sender: str, in_port: int) -> tuple:
        own_block = broadcast_block(sender)
        groups = tuple(Group(broadcast_group(block, in_port)) for block in sorted(self._blocks) if block != own_block)
        mates = (self._copy_to(mac, in_port) for mac in self._blocks[own_block] if mac != sender)
        return groups + tuple(action for copy in mates for action in copy)

    def _copy_to(self, mac: str, in_port: int) -> tuple:
        return (SetField("eth_dst", mac), *outputs_to(self.ports_of(mac), in_port))


def broadcast_block(mac: str) -> int:
    # A checksum of the whole MAC, not its last bits: one vendor's MACs may differ only in their first bytes.
    return zlib.crc32(mac.encode()) % BROADCAST_BLOCKS


def broadcast_group(block: int, in_port: int) -> int:
    """The group of a block's copies for frames that came in on `in_port`."""
    return (block + 1) * _BROADCAST_GROUP_PORTS + in_port
