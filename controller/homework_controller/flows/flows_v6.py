"""The IPv6 part of the rule set, in `flows`' tables and bands (values only, as there).

Each forwarding device has its own /64s (`ipv6.py`); its IPv6 is checked and routed per prefix:

table 0, admission:
  ARP            wlan: router and neighbour solicitations                -> (newcomers' meter,) controller
                 router: neighbour solicitations (its stack asking for    -> controller (proxy: the router answers
                 a device's address)                                         for the device, as for ARP)
  DEVICE_ARP     wlan: a known device's router/neighbour solicitations   -> its own meter, controller
                 wlan: a forwarding device's router adverts (the routes   -> its own meter, controller
                 it offers: `border_routes`)
  ADVERTS        wlan: neighbour adverts, redirects, router adverts      -> drop: no device speaks for another (or the
                 (but a forwarding device's own, above)                     router): the router's stack finds devices by
                                                                            the controller's proxy answers alone
  SOURCE_CHECKED wlan: forwarding device, its MAC *and* a source in       -> goto 1
                 one of its /64s or of the routes it offers
                 router: IPv6 to a forwarding device's MAC               -> goto 1
                 wlan: a forwarding device's UDP to link-scope multicast   -> goto 1
                 (ff02::/16) from its MAC and a link-local source
  (MISS drops the rest: a pending or denied device's IPv6, a forged source, link-local unicast between
  devices, ICMPv6 other than solicitations (MLD reports); the router's
  own adverts and answers are packet-outs, which the tables do not see)
table 1, accounting (`Flows` rows come from the switch's flow export):
  BLOCKED        from a device's /64s to an address of a name blocked    -> drop
                 for it, or to DNS over TLS/QUIC
  LEARNT_FLOW    one connection of a device (its app's mark), as IPv4's   -> set DSCP, queue; goto 2
  COUNTED_SOURCE from a forwarding device's /64                          -> DSCP 0, goto 2 (allowances count
  COUNTED_DEST   to it                                                      these and the flows' rules)
table 2, routing:
  TO_ROUTER      to a forwarding device's /64's ::1 (the router's)        -> router
  TO_DEVICE      wlan: to a forwarding device's /64 or route             -> rewrite MACs, dec hop limit, out the
                                                                            port it came in (hairpinned)
                 router: to a forwarding device's /64 or route            -> wlan
  BROADCAST      wlan: a forwarding device's UDP to ff02::/16 (mDNS        -> one unicast copy to each *other*
                 ff02::fb, SSDP ff02::c, LLMNR ff02::1:3)                    forwarding device, and the router
  `multicast_rules` (the IPv4 broadcast's twin, under its cookie, rebuilt with it) holds the two BROADCAST_COOKIE
  rules; whichever source admitted the packet (link-local, or one of its /64s), the routing table copies it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from ..model import Device
from ..wire import nd
from . import (
    BROADCAST_COOKIE,
    CONTROLLER,
    LOCAL,
    NEWCOMERS_METER,
    PROTO_UDP,
    TABLE_ACCOUNTING,
    TABLE_ADMISSION,
    TABLE_MARKING,
    TABLE_ROUTING,
    AccountingPriority,
    AdmissionPriority,
    DeviceRules,
    Family,
    FlowRule,
    GotoTable,
    Meter,
    Output,
    RoutingPriority,
    SetField,
    address_blocked,
    admitted,
    counted,
    device_cookie,
    device_meter,
    encrypted_dns_refused,
    masked,
    routed_to,
    rule,
)
from .base_flows import BroadcastCopies

ETH_IPV6 = nd.ETH_IPV6
IPV6 = Family(ETH_IPV6, "ipv6_src", "ipv6_dst")
TO_ROUTER = RoutingPriority.TO_DEVICE + 10  # table 2: the router's own address in a device's /64, above the /64 itself
# Table 1: a device's IPv6 counted (the IPv4 DEVICE_* rules' twins; their own priorities, so the IPv4 Flows
# rows never read them). Between devices both match: the sender's wins, as for IPv4.
COUNTED_SOURCE, COUNTED_DEST = AccountingPriority.DEVICE_SOURCE - 5, AccountingPriority.DEVICE_DEST - 5
_SOLICITATIONS = (nd.ROUTER_SOLICITATION, nd.NEIGHBOUR_SOLICITATION)
_ADVERTS = (nd.ROUTER_ADVERTISEMENT, nd.NEIGHBOUR_ADVERTISEMENT, nd.REDIRECT)
LINK_LOCAL = masked("fe80::/10")
# Link-scope multicast a household's discovery uses (mDNS, SSDP, WS-Discovery, LLMNR), all UDP: matching UDP
# leaves ICMPv6 (neighbour discovery, MLD) to the rules above, so the router alone answers solicitations and
# devices hear no one's adverts.
LINK_SCOPE_MULTICAST = masked("ff02::/16")


def base_rules(access_ports: Sequence[int]) -> list[FlowRule]:
    """Solicitations from anyone on an access port (newcomers' budget), and the router's stack's; adverts
    from anyone on an access port dropped, whatever their source (a forwarding device's own router adverts
    reach the controller by a rule above, `device_rules`). A neighbour advert from a device's own /64 to the
    router's ::1 would otherwise reach the router's stack with hop limit 255, and an override one naming
    another device's address would have the router send that device's traffic to the sender's MAC."""
    newcomer = (Meter(NEWCOMERS_METER.meter_id), Output(CONTROLLER))
    rules = [
        rule(
            TABLE_ADMISSION, band, actions, in_port=port, eth_type=ETH_IPV6, ip_proto=nd.PROTO_ICMPV6, icmpv6_type=kind
        )
        for kinds, band, actions in (
            (_SOLICITATIONS, AdmissionPriority.ARP, newcomer),
            (_ADVERTS, AdmissionPriority.ADVERTS, ()),
        )
        for kind in kinds
        for port in access_ports
    ]
    rules.append(
        rule(
            TABLE_ADMISSION,
            AdmissionPriority.ARP,
            (Output(CONTROLLER),),
            in_port=LOCAL,
            icmpv6_type=nd.NEIGHBOUR_SOLICITATION,
            eth_type=ETH_IPV6,
            ip_proto=nd.PROTO_ICMPV6,
        )
    )
    return rules


def device_rules(
    device: Device,
    ipv4: DeviceRules,
    prefixes: tuple[str, ...],
    routes: tuple[str, ...] = (),
    lan: tuple[str, ...] = (),
) -> frozenset[FlowRule]:
    """A device's IPv6 rules beside its IPv4 ones (`ipv4`, the same cookie: they leave the switch together).

    A known device's solicitations go through its own budget whatever its state; a forwarding device's
    IPv6 passes from its MAC with a source in one of its /64s (`prefixes`; none: it does not forward) or
    of the routes it offers (`routes`: a border router's mesh, behind it), and traffic to those is routed
    to it as to its /64s; its own router adverts reach the controller (the routes they offer). The plugged-in
    gates add theirs (`GateRules.rules_v6`; lan: the household's prefixes, the ULA /48 and the delegated one)."""
    if ipv4.blacklisted or device.subnet is None:
        return frozenset()
    cookie = device_cookie(device)
    own = ipv4.own_ports
    meter = Meter(device_meter(device).meter_id)
    forwards = ipv4.forwarding and bool(prefixes)
    # Its router adverts only while it forwards: a pending device offers no one a route.
    rules = {
        rule(
            TABLE_ADMISSION,
            AdmissionPriority.DEVICE_ARP,
            (meter, Output(CONTROLLER)),
            cookie,
            in_port=port,
            eth_src=device.mac,
            icmpv6_type=kind,
            eth_type=ETH_IPV6,
            ip_proto=nd.PROTO_ICMPV6,
        )
        for kind in _SOLICITATIONS + ((nd.ROUTER_ADVERTISEMENT,) if forwards else ())
        for port in own
    }
    if not forwards:
        return frozenset(rules)
    # As for IPv4 (`flows.device_rules`): the router alone sets the traffic class the shaper reads.
    count = (SetField("ip_dscp", 0), GotoTable(TABLE_MARKING))
    for prefix in prefixes:
        # Its /64's ::1 is the router's (its stack answers there): not hairpinned back to the device.
        rules.add(
            rule(
                TABLE_ROUTING,
                TO_ROUTER,
                (Output(LOCAL),),
                cookie,
                eth_type=ETH_IPV6,
                ipv6_dst=str(ipaddress.IPv6Network(prefix).network_address + 1),
            )
        )
    for prefix in prefixes + routes:
        net = masked(prefix)
        rules |= admitted(IPV6, cookie, device.mac, own, net)
        rules |= counted(IPV6, cookie, (COUNTED_SOURCE, COUNTED_DEST), count, net)
        rules |= routed_to(IPV6, cookie, device.mac, ipv4.router_mac, own, ipv4.access_ports, net)
        if ipv4.dns_gated:  # as for IPv4: its encrypted DNS would get round the names blocked for it
            rules |= encrypted_dns_refused(IPV6, cookie, net)
    for gate in ipv4.gates:
        rules |= set(gate.rules_v6(ipv4, prefixes, lan))
    return frozenset(rules)


def dns_block_rules(device: Device, addr: str, prefixes: tuple[str, ...]) -> list[FlowRule]:
    """The device may not reach an IPv6 address learnt for a name blocked for it, from any of its /64s."""
    return [address_blocked(IPV6, device_cookie(device), masked(prefix), addr) for prefix in prefixes]


def multicast_rules(permitted: list[Device], copies: BroadcastCopies) -> list[FlowRule]:
    """IPv6 link-scope multicast among forwarding devices as unicast copies, as `base_flows.broadcast_rules`
    does IPv4's: a pending or denied device hears none of it, no device its own, and it stays on the LAN
    (the router's stack gets a copy, and routes no link-scope packet). Its source is checked as the rest of
    its IPv6 is: its MAC on its own port, and a link-local source here (its /64s' rules admit those)."""
    rules = []
    for sender in permitted:
        for port in copies.ports_of(sender.mac):
            sent: dict = {
                "in_port": port,
                "eth_src": sender.mac,
                "eth_type": ETH_IPV6,
                "ip_proto": PROTO_UDP,
                "ipv6_dst": LINK_SCOPE_MULTICAST,
            }
            rules.append(
                rule(
                    TABLE_ADMISSION,
                    AdmissionPriority.SOURCE_CHECKED,
                    (GotoTable(TABLE_ACCOUNTING),),
                    BROADCAST_COOKIE,
                    ipv6_src=LINK_LOCAL,
                    **sent,
                )
            )
            rules.append(
                rule(
                    TABLE_ROUTING,
                    RoutingPriority.BROADCAST,
                    copies.to_all_but(sender.mac, port) + (Output(LOCAL),),
                    BROADCAST_COOKIE,
                    **sent,
                )
            )
    return rules
