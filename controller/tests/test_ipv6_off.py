"""A router without IPv6 (--no-ipv6: `ipv6.Ipv6Off`) through every IPv6 event the router handles: the
switch gets no IPv6 rule, no device an advert or a neighbour answer, the router's stack no IPv6 address or
route, the household no word of a route, and giving a route is refused. The shipped router (IPv6 on),
through the same events, does each of them: the positive control."""

import ipaddress

import dnslib
from fakeoftable import FakeSwitch
from scapy.layers.inet6 import ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6ND_RA, ICMPv6NDOptRouteInfo, IPv6
from scapy.layers.l2 import Ether
from support import LAPTOP, LOCAL, PHONE, ROUTER_MAC, TABLET, WLAN, join, solicit_router

from homework_controller import flows
from homework_controller.concerns import ipv6
from homework_controller.core.router import EXAMPLE_IPV6_PLAN, HomeRouter
from homework_controller.effects import (
    AddIpv6Gateway,
    AddIpv6Route,
    ForgetNeighbours,
    InstallRules,
    ModifyRules,
    RemoveIpv6Gateway,
    RemoveIpv6Route,
    SendFrame,
    TellHousehold,
)
from homework_controller.errors import NotConfigured
from homework_controller.policy import dns_rules
from homework_controller.store import DeviceStore
from homework_controller.wire import nd
from homework_controller.wire.prefixes import gateway_of

MESH = "fd11:2233:4455:1::/64"  # the Thread mesh the tablet, a border router, offers
RENUMBERED = ipaddress.IPv6Network("2001:db8:200::/56")  # the ISP's next delegation
BLOCKED = "games.example.test"
STACK = (AddIpv6Gateway, RemoveIpv6Gateway, AddIpv6Route, RemoveIpv6Route)


class RecordingSwitch(FakeSwitch):
    """The fake switch, keeping every effect it was given (frames and the stack's too, which it ignores)."""

    def __init__(self):
        super().__init__()
        self.effects = []

    def apply(self, effects) -> None:
        self.effects += effects
        super().apply(effects)


def in_64(prefix, host=0xAA):
    return str(ipaddress.IPv6Network(prefix).network_address + host)


def neighbour_solicitation(eth_src, src, target):
    frame = Ether(src=eth_src, dst="33:33:ff:00:00:01") / IPv6(src=src, dst="ff02::1:ff00:1") / ICMPv6ND_NS(tgt=target)
    return nd.parse(bytes(frame))


def ipv6_events(router, clock):
    """Every IPv6 event the router handles, in a household's order, each answer carried out by the switch:
    what of IPv6 reached the switch (its rules' tables), the devices (the frames' kinds), the router's stack
    (the effects' kinds) and the household (what it was told, what it was refused)."""
    switch = RecordingSwitch()
    refused = []
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    for mac in (PHONE, LAPTOP, TABLET):  # each leases its /30, is permitted: it forwards, and has its /64s
        join(router, switch, mac)
    # The phone asks for the router's advert, then for the router's link-local address.
    switch.apply(solicit_router(router, PHONE))
    switch.apply(router.on_solicitation(WLAN, neighbour_solicitation(PHONE, "fe80::aa", nd.ROUTER_LINK_LOCAL)))
    # The router's stack asks where addresses in the phone's ULA /64 (the shipped plan's) are, more of them
    # than it may hold entries for.
    phone_64 = EXAMPLE_IPV6_PLAN.ula_of(router.devices[PHONE].subnet.index)
    for host in range(ipv6.MAX_NEIGHBOURS_PER_DEVICE + 1):
        asked = neighbour_solicitation(ROUTER_MAC, gateway_of(phone_64), in_64(phone_64, 0x100 + host))
        switch.apply(router.on_solicitation(LOCAL, asked))
    # The tablet, a Thread border router, offers its mesh; the household gives the mesh to the phone.
    advert = Ether(src=TABLET, dst="33:33:00:00:00:01") / IPv6(src="fe80::bb", dst="ff02::1")
    advert /= ICMPv6ND_RA(routerlifetime=0) / ICMPv6NDOptRouteInfo(prefix=MESH.split("/")[0], plen=64, rtlifetime=60)
    switch.apply(router.on_router_advert(nd.parse(bytes(advert))))
    try:
        switch.apply(router.give_route(PHONE, MESH))
    except NotConfigured as exc:
        refused.append(str(exc))
    # The phone may not reach a name; its resolver learns the name's IPv6 address.
    switch.apply(router.decisions.deny_dns(PHONE, BLOCKED))
    answer = dnslib.DNSRecord.question(BLOCKED, "AAAA").reply()
    answer.add_answer(dnslib.RR(BLOCKED, dnslib.QTYPE.AAAA, rdata=dnslib.AAAA("2001:db8:5133::81"), ttl=300))
    switch.apply(router.dns_answer(dns_rules.inspect_answer(answer.pack(), BLOCKED).learnt))
    # The ISP delegates another prefix; the clock runs past the next adverts, the old /64s and the mesh's route.
    switch.apply(router.renumber(RENUMBERED))
    clock.now += ipv6.DEPRECATED_VALID_S
    switch.apply(router.tick())
    switch.apply(router.decisions.deny(LAPTOP))  # it stops forwarding: its prefixes go
    return {
        "switch": {r.table for r in switch_rules(switch.effects) if dict(r.match).get("eth_type") == nd.ETH_IPV6},
        "devices": {frame_kind(e.data) for e in switch.effects if isinstance(e, SendFrame)} - {None},
        "stack": {type(e).__name__ for e in switch.effects if isinstance(e, STACK) or is_ipv6_forget(e)},
        "household": {e.kind for e in switch.effects if isinstance(e, TellHousehold) and e.kind == "route"},
        "refused": refused,
    }


def switch_rules(effects):
    return [r for e in effects if isinstance(e, InstallRules | ModifyRules) for r in e.rules]


def frame_kind(data):
    """What a frame sent to a device (or the router's stack) is, if IPv6."""
    frame = Ether(data)
    for layer, kind in ((ICMPv6ND_RA, "router advert"), (ICMPv6ND_NA, "neighbour advert"), (IPv6, "IPv6")):
        if layer in frame:
            return kind
    return None


def is_ipv6_forget(effect):
    return isinstance(effect, ForgetNeighbours) and (":" in effect.address or bool(effect.prefixes))


def test_a_router_without_ipv6_does_nothing_of_ipv6_whatever_happens(db_path, clock):
    router = HomeRouter(DeviceStore(db_path), clock=clock, ipv6_plan=None)  # --no-ipv6
    assert not router.ipv6.enabled and router.ipv6.delegation() == (None, None)
    assert ipv6_events(router, clock) == {
        "switch": set(),
        "devices": set(),
        "stack": set(),
        "household": set(),
        "refused": ["this router does not run IPv6: no device offers routes"],
    }
    # Its devices forward all the same (IPv4).
    assert router.registry.forwarding_now(router.devices[PHONE])


def test_the_shipped_router_through_the_same_events_does_each(db_path, clock):
    router = HomeRouter(DeviceStore(db_path), clock=clock)  # as shipped: IPv6 on
    assert router.ipv6.enabled
    assert ipv6_events(router, clock) == {
        "switch": {flows.TABLE_ADMISSION, flows.TABLE_ACCOUNTING, flows.TABLE_MARKING, flows.TABLE_ROUTING},
        "devices": {"router advert", "neighbour advert"},
        "stack": {"AddIpv6Gateway", "RemoveIpv6Gateway", "AddIpv6Route", "RemoveIpv6Route", "ForgetNeighbours"},
        "household": {"route"},
        "refused": [],
    }
