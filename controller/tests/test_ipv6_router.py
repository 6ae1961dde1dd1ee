"""IPv6 through the router and a simulated switch: a pending device hears no prefix and reaches nothing;
permitted, it is advertised its own /64s (to its MAC only) and its IPv6 goes out; a forged source does not;
devices' /64s differ and traffic between them is routed; deny cuts it; the router's stack finds devices."""

import ipaddress

import dnslib
import pytest
from fakeoftable import FakeSwitch, ipv4
from scapy.layers.inet6 import (
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6ND_RA,
    ICMPv6NDOptPrefixInfo,
    ICMPv6NDOptRDNSS,
    ICMPv6NDOptRouteInfo,
    IPv6,
)
from scapy.layers.l2 import Ether
from support import (
    AF41,
    EF,
    LAPTOP,
    LOCAL,
    PHONE,
    ROUTER_MAC,
    TABLET,
    WEB,
    WLAN,
    deliver,
    join,
    mark_of,
    solicit_router,
    up,
)

from homework_controller import flows
from homework_controller.concerns import border_routes, ipv6
from homework_controller.core.router import EXAMPLE_IPV6_PLAN, HomeRouter
from homework_controller.effects import (
    AddIpv6Gateway,
    AddIpv6Route,
    ForgetNeighbours,
    RemoveIpv6Route,
    SendFrame,
    TellHousehold,
)
from homework_controller.errors import ApiError
from homework_controller.policy import dhcp, dns_rules, downlink
from homework_controller.store import DeviceStore
from homework_controller.wire import nd
from homework_controller.wire.prefixes import PrefixPlan, gateway_of

# The prefixes of the shipped router's fixture (conftest's `router`): its ULA /48, its delegated /56.
ULA, DELEGATED = EXAMPLE_IPV6_PLAN.ula, EXAMPLE_IPV6_PLAN.delegated
INTERNET = "2001:db8:5133::80"


def adverts(effects, mac):
    """The router adverts among effects, as the device reads them: (prefixes, router lifetime)."""
    out = []
    for e in effects:
        if isinstance(e, SendFrame) and ICMPv6ND_RA in Ether(e.data):
            frame = Ether(e.data)
            assert frame.dst == mac, "an advert goes to the device's MAC only"
            prefixes = [f"{o.prefix}/{o.prefixlen}" for o in _options(frame) if isinstance(o, ICMPv6NDOptPrefixInfo)]
            out.append((prefixes, frame[ICMPv6ND_RA].routerlifetime))
    return out


def _options(frame):
    opt = frame[ICMPv6ND_RA].payload
    while opt and opt.name != "NoPayload":
        yield opt
        opt = opt.payload


def ipv6_packet(in_port, eth_src, eth_dst, src, dst, hop_limit=64):
    return {
        "in_port": in_port,
        "eth_src": eth_src,
        "eth_dst": eth_dst,
        "eth_type": nd.ETH_IPV6,
        "ipv6_src": src,
        "ipv6_dst": dst,
        "ip_proto": flows.PROTO_TCP,
        "tcp_src": 40000,
        "tcp_dst": 80,
        "ip_ttl": hop_limit,
    }


def in_prefix(prefix, host=0xAA):
    return str(ipaddress.IPv6Network(prefix).network_address + host)


def test_a_pending_device_hears_no_prefix_and_reaches_nothing(router, switch):
    join(router, switch, PHONE, permit=False)
    assert adverts(solicit_router(router, PHONE), PHONE) == [([], 0)]
    # Whatever address it makes up, nothing it sends over IPv6 passes.
    for src in (in_prefix(router.ipv6.plan.global_of(1)), "fe80::aa", "fd12:3456:789a:1::aa"):
        assert deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, src, INTERNET)) == []
    # Its solicitations reach the controller (to be answered), nothing else.
    ns = ipv6_packet(WLAN, PHONE, "33:33:ff:00:00:01", "fe80::aa", "ff02::1:ff00:1")
    ns.update(ip_proto=nd.PROTO_ICMPV6, icmpv6_type=nd.NEIGHBOUR_SOLICITATION)
    assert [d.port for d in switch.send(ns)] == [flows.CONTROLLER]


def test_permitted_it_is_advertised_its_own_64s_and_its_ipv6_goes_out(router, switch):
    join(router, switch, PHONE, permit=False)
    effects = router.decisions.permit(PHONE)
    switch.apply(effects)
    [(prefixes, lifetime)] = adverts(effects, PHONE)
    assert lifetime == nd.ROUTER_LIFETIME_S
    assert ipaddress.IPv6Network(prefixes[0]).subnet_of(DELEGATED) and prefixes[0].endswith("/64")
    assert ipaddress.IPv6Network(prefixes[1]).subnet_of(ULA)
    assert {e.prefix for e in effects if isinstance(e, AddIpv6Gateway)} == set(prefixes)
    own = in_prefix(prefixes[0])
    [out] = deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, own, INTERNET))
    assert out.port == LOCAL
    # The reply from the router's stack reaches it.
    [back] = deliver(switch, ipv6_packet(LOCAL, ROUTER_MAC, PHONE, INTERNET, own))
    assert back.port == WLAN


def test_a_forged_source_reaches_nothing_while_its_own_does(router, switch):
    join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    phone64 = router.ipv6.current[PHONE][0]
    laptop64 = router.ipv6.current[LAPTOP][0]
    assert phone64 != laptop64
    outside = in_prefix(router.ipv6.plan.global_of(200))  # global, in no device's /64
    for forged in (in_prefix(laptop64), outside, "2001:db8:ffff::1"):
        assert deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, forged, INTERNET)) == [], forged
    # positive control: the same packet from its own /64
    assert [d.port for d in deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, in_prefix(phone64), INTERNET))] == [
        LOCAL
    ]
    # Its MAC with the laptop's address, or the laptop's MAC with its address: neither.
    assert deliver(switch, ipv6_packet(WLAN, LAPTOP, ROUTER_MAC, in_prefix(phone64), INTERNET)) == []


def test_between_devices_it_is_routed_through_the_router(router, switch):
    join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    src, dst = in_prefix(router.ipv6.current[PHONE][0]), in_prefix(router.ipv6.current[LAPTOP][0])
    [hop] = deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, src, dst, hop_limit=64))
    assert (hop.port, hop.packet["eth_src"], hop.packet["eth_dst"], hop.packet["ip_ttl"]) == (
        WLAN,
        ROUTER_MAC,
        LAPTOP,
        63,
    )


def multicast(eth_src, src, dst="ff02::fb", proto=flows.PROTO_UDP, **fields):
    """A datagram to a link-scope group (mDNS's by default) as a device sends it."""
    packet = ipv6_packet(WLAN, eth_src, "33:33:00:00:00:fb", src, dst) | {"ip_proto": proto}
    del packet["tcp_src"], packet["tcp_dst"]
    return packet | ({"udp_src": 5353, "udp_dst": 5353} if proto == flows.PROTO_UDP else {}) | fields


def heard(router, switch, packet):
    """Who a packet reaches: the devices (by MAC) it is copied to, and whether the router gets it."""
    out = deliver(switch, packet)
    assert all(d.port in (WLAN, LOCAL) for d in out), out
    return {d.packet["eth_dst"] for d in out if d.port == WLAN}, [d.packet["ipv6_dst"] for d in out if d.port == LOCAL]


def test_link_scope_multicast_reaches_the_other_forwarding_devices_and_no_one_else(router, switch):
    join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    join(router, switch, TABLET, permit=False)  # pending: shares the radio, hears nothing
    phone64 = in_prefix(router.ipv6.current[PHONE][0])
    for src in ("fe80::aa", phone64):  # its link-local address, or its own /64's
        for group in ("ff02::fb", "ff02::c", "ff02::1:3"):  # mDNS, SSDP, LLMNR
            # The laptop, not the pending tablet, not the phone itself; the router's stack too.
            assert heard(router, switch, multicast(PHONE, src, group)) == ({LAPTOP}, [group]), (src, group)
    # The pending tablet's reaches no one, whatever its source; nor a source that is not the phone's.
    assert heard(router, switch, multicast(TABLET, "fe80::dd")) == (set(), [])
    for forged in (in_prefix(router.ipv6.current[LAPTOP][0]), "2001:db8:ffff::1"):
        assert heard(router, switch, multicast(PHONE, forged)) == (set(), []), forged
    # Neighbour discovery and MLD are not copied: a device's advert or report to a group reaches no one.
    mld_report = 143
    for kind, group in (
        (nd.ROUTER_ADVERTISEMENT, "ff02::1"),
        (nd.NEIGHBOUR_ADVERTISEMENT, "ff02::1"),
        (mld_report, "ff02::16"),
    ):
        sent = multicast(PHONE, "fe80::aa", group, nd.PROTO_ICMPV6, icmpv6_type=kind)
        assert heard(router, switch, sent) == (set(), []), kind
    # Who hears it follows the household's decisions.
    switch.apply(router.decisions.permit(TABLET))
    switch.apply(router.decisions.deny(LAPTOP))
    assert heard(router, switch, multicast(PHONE, "fe80::aa")) == ({TABLET}, ["ff02::fb"])
    assert heard(router, switch, multicast(LAPTOP, "fe80::cc")) == (set(), [])


def test_without_ipv6_no_ipv6_multicast_is_copied(db_path, clock):
    router = HomeRouter(DeviceStore(db_path), clock=clock, ipv6_plan=None)  # --no-ipv6
    switch = FakeSwitch()
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    phone = join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    assert heard(router, switch, multicast(PHONE, "fe80::aa")) == (set(), [])
    # positive control: its IPv4 multicast is
    v4 = ipv4(WLAN, PHONE, "01:00:5e:00:00:fb", phone, "224.0.0.251", flows.PROTO_UDP, 5353, 5353)
    assert LAPTOP in {d.packet["eth_dst"] for d in deliver(switch, v4)}


def test_the_routers_address_in_its_64_is_the_router_not_the_device(router, switch):
    join(router, switch, PHONE)
    prefix = router.ipv6.current[PHONE][0]
    [hop] = deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, in_prefix(prefix), gateway_of(prefix)))
    assert hop.port == LOCAL
    # In the switch's records too: a connection from the router's ::1 comes in to the phone, not out of it.
    assert router.registry.device_at(gateway_of(prefix)) is None
    assert router.registry.device_at(in_prefix(prefix)).mac == PHONE


def test_deny_cuts_ipv6_at_once_and_says_so(router, switch):
    join(router, switch, PHONE)
    own = in_prefix(router.ipv6.current[PHONE][0])
    assert deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, own, INTERNET))
    effects = router.decisions.deny(PHONE)
    switch.apply(effects)
    assert adverts(effects, PHONE) == [([], 0)]
    assert deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, own, INTERNET)) == []
    assert deliver(switch, ipv6_packet(LOCAL, ROUTER_MAC, PHONE, INTERNET, own)) == []
    # Permitted again, it is told its prefixes again.
    effects = router.decisions.permit(PHONE)
    assert adverts(effects, PHONE)[0][1] == nd.ROUTER_LIFETIME_S


def test_the_router_answers_for_its_gateways_but_not_a_devices_own_address(router, switch):
    join(router, switch, PHONE)
    prefix = router.ipv6.current[PHONE][0]
    gateway = gateway_of(prefix)

    def ask(target, src="fe80::aa"):
        ns = Ether(src=PHONE, dst="33:33:ff:00:00:01") / IPv6(src=src, dst="ff02::1:ff00:1") / ICMPv6ND_NS(tgt=target)
        return [Ether(e.data) for e in router.on_solicitation(WLAN, nd.parse(bytes(ns)))]

    for target in (gateway, nd.ROUTER_LINK_LOCAL):
        [na] = ask(target)
        assert (na.dst, na[ICMPv6ND_NA].tgt, na[ICMPv6ND_NA].R) == (PHONE, target, 1)
    # Duplicate-address detection of its own address: no answer, so it keeps the address.
    assert ask(in_prefix(prefix), src="::") == []
    assert ask(in_prefix(prefix)) == []


def test_a_device_that_reassociates_is_told_where_the_router_is_unasked(router, switch):
    """A station's stack forgets its neighbours while its link is down at each (re)association, and sends a lost
    solicitation for its default router again only after a second: when an access point authenticates it, a
    device the router advertised itself to is told where the router's link-local address is (not flagged
    solicited, to all nodes: a stack takes that for its incomplete entry). A pending one, never advertised a
    route, is told nothing of it."""
    join(router, switch, PHONE)
    join(router, switch, TABLET, permit=False)
    for mac in (PHONE, TABLET):
        effects = router.joining.station_joined(mac, "", WLAN)
        told = [Ether(e.data) for e in effects if isinstance(e, SendFrame) and e.port == WLAN]
        nas = [f for f in told if ICMPv6ND_NA in f]
        if mac == TABLET:
            assert nas == []
            continue
        [na] = nas
        assert (na.dst, na[IPv6].dst, na[IPv6].hlim) == (PHONE, nd.ALL_NODES, 255)
        assert (na[ICMPv6ND_NA].tgt, na[ICMPv6ND_NA].R, na[ICMPv6ND_NA].S, na[ICMPv6ND_NA].O) == (
            nd.ROUTER_LINK_LOCAL,
            1,
            0,
            1,
        )
        assert na.lladdr == ROUTER_MAC


def test_the_routers_stack_finds_a_device_by_any_address_in_its_64(router, switch):
    join(router, switch, PHONE)
    prefix = router.ipv6.current[PHONE][0]
    gateway = gateway_of(prefix)
    target = in_prefix(prefix, 0x1234_5678)

    def ask(target, src=gateway):
        ns = Ether(src=ROUTER_MAC) / IPv6(src=src, dst="ff02::1:ff00:1") / ICMPv6ND_NS(tgt=target)
        return [(e.port, Ether(e.data)) for e in router.on_solicitation(LOCAL, nd.parse(bytes(ns)))]

    [(port, na)] = ask(target)
    assert (port, na.dst, na.src, na[ICMPv6ND_NA].tgt, na[ICMPv6ND_NA].R) == (LOCAL, ROUTER_MAC, PHONE, target, 0)
    assert ask(gateway) == []  # the router's own address: its stack's DAD finds no one
    assert ask(in_prefix(router.ipv6.plan.global_of(100))) == []  # no device's /64
    switch.apply(router.decisions.deny(PHONE))
    assert ask(target) == []


def test_a_device_cycling_addresses_in_its_64_holds_at_most_16_of_the_routers_neighbour_entries(router, switch):
    """Issue 39: every address a device uses has the router's stack ask where it is (to answer it, or to pass it
    the internet's reply), and each answer is an entry in the kernel's neighbour table (1,024 for all devices
    together by default): one device cycling addresses in its /64 held one entry per address, and could leave
    no room for the others'. The stack's entries here are what the answers taught it, less what the controller
    had it forget."""
    join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    table = {}  # the router's stack's neighbour entries: address -> MAC

    def stack_asks(target):
        src = gateway_of(str(ipaddress.IPv6Network((target, 64), strict=False)))
        ns = Ether(src=ROUTER_MAC) / IPv6(src=src, dst="ff02::1:ff00:1") / ICMPv6ND_NS(tgt=target)
        for effect in router.on_solicitation(LOCAL, nd.parse(bytes(ns))):
            if isinstance(effect, SendFrame):
                na = Ether(effect.data)
                table[na[ICMPv6ND_NA].tgt] = na.src
            elif isinstance(effect, ForgetNeighbours):
                assert not effect.prefixes
                table.pop(effect.address, None)
        return table.get(target)

    laptop_prefix, phone_prefix = router.ipv6.current[LAPTOP][0], router.ipv6.current[PHONE][0]
    laptops = [in_prefix(laptop_prefix, host) for host in (0xAA, 0x51, 0x52)]  # its address and privacy ones
    assert [stack_asks(a) for a in laptops] == [LAPTOP] * 3
    cycled = [in_prefix(phone_prefix, 0x1000 + n) for n in range(200)]
    assert [stack_asks(a) for a in cycled] == [PHONE] * 200  # each address works as it comes
    assert len([mac for mac in table.values() if mac == PHONE]) == ipv6.MAX_NEIGHBOURS_PER_DEVICE == 16
    # The other device keeps its entries (positive control); the first addresses still work: asked again, answered.
    assert [table.get(a) for a in laptops] == [LAPTOP] * 3
    assert stack_asks(cycled[0]) == PHONE
    [out] = deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, cycled[0], INTERNET))
    assert out.port == LOCAL


def test_adverts_are_repeated_by_the_tick(router, switch, clock):
    join(router, switch, PHONE)
    clock.now += 1
    assert adverts(router.tick(), PHONE) == []
    clock.now += ipv6.ADVERT_INTERVAL_S
    [(prefixes, lifetime)] = adverts(router.tick(), PHONE)
    assert len(prefixes) == 2 and lifetime == nd.ROUTER_LIFETIME_S


def aaaa_answer(name, *ips):
    record = dnslib.DNSRecord.question(name, "AAAA").reply()
    for ip in ips:
        record.add_answer(dnslib.RR(name, dnslib.QTYPE.AAAA, rdata=dnslib.AAAA(ip), ttl=300))
    return record.pack()


def test_an_aaaa_answer_for_a_blocked_name_drops_its_ipv6_address_for_that_device_only(router, switch):
    join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    switch.apply(router.decisions.deny_dns(PHONE, "games.example.test"))
    games, www = "2001:db8:5133::81", INTERNET
    learnt = dns_rules.inspect_answer(aaaa_answer("games.example.test", games), "games.example.test").learnt
    assert learnt == (("games.example.test", games, 300),)
    switch.apply(router.dns_answer(learnt))
    phone, laptop = (in_prefix(router.ipv6.current[mac][0]) for mac in (PHONE, LAPTOP))
    # The phone's connection to the address, even without asking for the name: dropped.
    assert deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, phone, games)) == []
    # Positive controls: another address from the phone, the same address from the laptop.
    assert [d.port for d in deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, phone, www))] == [LOCAL]
    assert [d.port for d in deliver(switch, ipv6_packet(WLAN, LAPTOP, ROUTER_MAC, laptop, games))] == [LOCAL]
    # From its ULA /64 too.
    ula = in_prefix(router.ipv6.current[PHONE][1])
    assert deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, ula, games)) == []


def test_a_device_with_blocked_names_cannot_use_dns_over_tls_over_ipv6(router, switch):
    join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    switch.apply(router.decisions.deny_dns(PHONE, "games.example.test"))
    phone, laptop = (in_prefix(router.ipv6.current[mac][0]) for mac in (PHONE, LAPTOP))
    dot = ipv6_packet(WLAN, PHONE, ROUTER_MAC, phone, "2001:db8:5133::853")
    dot.update(tcp_dst=flows.DNS_OVER_TLS_PORT)
    assert deliver(switch, dot) == []
    # Positive control: the laptop, with no blocked names, may.
    dot.update(eth_src=LAPTOP, ipv6_src=laptop)
    assert [d.port for d in deliver(switch, dot)] == [LOCAL]


# ---- IPv6 counts against a data allowance


def poll(router, switch, frame_size):
    """The stats poll: each accounting rule's counters as the switch keeps them (every frame frame_size bytes)."""
    entries = [
        (r.priority, dict(r.match), switch.hits.get(r, 0), switch.hits.get(r, 0) * frame_size)
        for r in switch.table(flows.TABLE_ACCOUNTING)
    ]
    return router.on_flow_stats(entries)


def test_ipv6_traffic_uses_up_a_data_allowance_as_ipv4_does(router, switch):
    phone_v4, laptop_v4 = join(router, switch, PHONE), join(router, switch, LAPTOP)
    switch.apply(router.decisions.set_allowance(PHONE, "1 MB"))
    switch.apply(router.decisions.set_allowance(LAPTOP, "1 MB"))
    phone, laptop = (in_prefix(router.ipv6.current[mac][0]) for mac in (PHONE, LAPTOP))
    # 2 MB over IPv6 in one poll (a download: up and back): the phone is paused at once.
    deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, phone, INTERNET))
    deliver(switch, ipv6_packet(LOCAL, ROUTER_MAC, PHONE, INTERNET, phone))
    switch.apply(poll(router, switch, 1_000_000))
    assert router.status(PHONE)["paused_why"] == "allowance"
    assert deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, phone, INTERNET)) == []
    assert deliver(switch, ipv4(WLAN, PHONE, ROUTER_MAC, phone_v4, "192.0.2.80")) == []
    # Positive control: the laptop, with its own 1 MB, moves less over IPv6 and IPv4 together...
    switch.hits.clear()
    deliver(switch, ipv6_packet(WLAN, LAPTOP, ROUTER_MAC, laptop, INTERNET))
    deliver(switch, ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop_v4, "192.0.2.80"))
    switch.apply(poll(router, switch, 400_000))
    assert router.status(LAPTOP)["allowance"]["used"] == 800_000  # both families counted
    assert [d.port for d in deliver(switch, ipv6_packet(WLAN, LAPTOP, ROUTER_MAC, laptop, INTERNET))] == [LOCAL]
    # ...and is paused when the sum goes over (here by its IPv6).
    switch.apply(poll(router, switch, 400_000))
    assert router.status(LAPTOP)["paused_why"] == "allowance"


# ---- DNS over IPv6


def test_adverts_name_the_routers_address_in_the_devices_ula_64_as_its_dns_server(router, switch):
    join(router, switch, PHONE, permit=False)
    effects = router.decisions.permit(PHONE)
    switch.apply(effects)
    [frame] = [Ether(e.data) for e in effects if isinstance(e, SendFrame) and ICMPv6ND_RA in Ether(e.data)]
    global64, ula64 = router.ipv6.current[PHONE]
    resolver = gateway_of(ula64)
    assert frame[ICMPv6NDOptRDNSS].dns == [resolver]
    # The device reaches it: the router's own address in its /64, not hairpinned back.
    query = ipv6_packet(WLAN, PHONE, ROUTER_MAC, in_prefix(ula64), resolver)
    query.update(ip_proto=flows.PROTO_UDP, udp_src=40000, udp_dst=53)
    del query["tcp_src"], query["tcp_dst"]
    assert [d.port for d in deliver(switch, query)] == [LOCAL]
    # Denied: no prefix, so no DNS server either.
    [frame] = [
        Ether(e.data) for e in router.decisions.deny(PHONE) if isinstance(e, SendFrame) and ICMPv6ND_RA in Ether(e.data)
    ]
    assert ICMPv6NDOptRDNSS not in frame


def test_a_query_over_ipv6_is_gated_as_its_devices_by_its_64(router, switch):
    join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    switch.apply(router.decisions.deny_dns(PHONE, "games.example.test"))
    query = dns_rules.parse_query(dnslib.DNSRecord.question("games.example.test", "AAAA").pack(), False)
    for prefix in router.ipv6.current[PHONE]:  # from any address of either of its /64s
        assert router.dns_query(in_prefix(prefix, 0x1234), query).action == "block"
    # Positive control: the laptop asks the same, from its /64.
    assert router.dns_query(in_prefix(router.ipv6.current[LAPTOP][0]), query).action == "allow"
    # From no device's /64 (or a link-local address): not a device, no answer.
    assert router.dns_query(in_prefix(router.ipv6.plan.global_of(200)), query).action == "drop"
    assert router.dns_query("fe80::aa%br-lan", query).action == "drop"
    # Denied, its /64s are no one's: its queries are not answered.
    phone = in_prefix(router.ipv6.current[PHONE][0])
    switch.apply(router.decisions.deny(PHONE))
    assert router.dns_query(phone, query).action == "drop"


# ---- priorities over IPv6


def test_ipv6_flows_get_their_apps_priority_both_ways_and_a_change_re_marks_them(router, switch, clock):
    """Priorities hold for IPv6 as for IPv4 (issue 22, test 5): a connection carries its app's mark from its
    first packet, both ways, and one judged by its behaviour in the switch's records gets a rule of its own."""
    phone_v4 = join(router, switch, PHONE)
    phone = in_prefix(router.ipv6.current[PHONE][0])
    out, back = (
        ipv6_packet(WLAN, PHONE, ROUTER_MAC, phone, INTERNET),
        ipv6_packet(LOCAL, ROUTER_MAC, PHONE, INTERNET, phone),
    )
    for packet, sport, dport in ((out, 40000, 443), (back, 443, 40000)):
        packet.update(tcp_src=sport, tcp_dst=dport, ip_dscp=EF)  # the device's own mark: not trusted
    assert mark_of(switch, out) == (0, 0, LOCAL)
    assert mark_of(switch, back) == (0, 0, WLAN)
    switch.apply(router.set_app_priorities({"web": "high"}))
    assert mark_of(switch, out) == (EF, 1, LOCAL)
    assert mark_of(switch, back) == (EF, 1, WLAN)
    # The same app over IPv4 is marked alike (the positive control: nothing here is IPv6's own).
    assert mark_of(switch, up(phone_v4, WEB)) == (EF, 1, LOCAL)
    # Steady small packets on a port no app lists, over two polls: interactive (Medium), by a rule of its own.
    game = {**out, "ip_proto": flows.PROTO_UDP, "udp_src": 50000, "udp_dst": 9999}
    del game["tcp_src"], game["tcp_dst"]
    assert mark_of(switch, game) == (0, 0, LOCAL)
    steady = {
        flows.FiveTuple(flows.PROTO_UDP, phone, 50000, INTERNET, 9999): [100, 100 * 120],
        flows.FiveTuple(flows.PROTO_UDP, phone_v4, 50000, WEB, 9999): [100, 100 * 120],
    }
    for _ in range(3):
        router.flow_events.on_flow_export(steady)
        clock.now += 5
        switch.apply(router.on_flow_stats([]))
    assert mark_of(switch, game) == (AF41, 2, LOCAL)
    assert mark_of(switch, up(phone_v4, WEB, flows.PROTO_UDP, 50000, 9999)) == (AF41, 2, LOCAL)
    # The ISP's slice takes IPv4 connections only (its rules name the household's public IPv4 address).
    assert {c.is_ipv6 for c, _ in router.learnt_connections()} == {False, True}
    [slice_rule] = downlink.wanted_rules(router.learnt_connections(), ["203.0.113.9"])
    assert dict(slice_rule.match)["ipv4_src"] == WEB


def test_a_device_back_under_a_new_mac_has_the_stack_forget_its_ipv6_neighbours_too(db_path, clock):
    """It joined with its own passphrase under a new MAC while online: its addresses in its /64s are
    behind its new MAC now (ForgetNeighbours names its /64s); the newcomer it was taken for under the
    new MAC had none to forget (a pending device is given no /64)."""
    router = HomeRouter(
        DeviceStore(db_path),
        dhcp.LeasePolicy(30, 3600),
        clock=clock,
        ipv6_plan=PrefixPlan(ULA, DELEGATED),
        wifi_ssid="home",
    )
    switch = FakeSwitch()
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    join(router, switch, PHONE)
    prefixes = router.ipv6.current[PHONE]
    keyid = router.decisions.issue_wifi_key(PHONE)["keyid"]
    newcomer = "06:11:22:33:44:55"
    join(router, switch, newcomer, permit=False)
    assert router.ipv6.current.get(newcomer, ()) == ()
    forgotten = [e for e in router.joining.station_joined(newcomer, keyid) if isinstance(e, ForgetNeighbours)]
    assert sorted(e.prefixes for e in forgotten) == [(), prefixes]


# ---- routes a device offers (a Thread border router's mesh, RFC 4191)

MESH = "fd11:2233:4455:1::/64"
MESH_NODE = in_prefix(MESH, 0x77)  # a Thread device behind the border router


def border_router_advert(mac, *routes):
    """The advert a border router sends (router lifetime 0, its mesh as Route Information), as the switch
    sees it and as the controller parses what the switch passes on."""
    frame = (
        Ether(src=mac, dst="33:33:00:00:00:01") / IPv6(src="fe80::bb", dst="ff02::1") / ICMPv6ND_RA(routerlifetime=0)
    )
    frame /= b"".join(bytes(ICMPv6NDOptRouteInfo(prefix=p.split("/")[0], plen=64, rtlifetime=t)) for p, t in routes)
    packet = ipv6_packet(WLAN, mac, "33:33:00:00:00:01", "fe80::bb", "ff02::1")
    packet.update(ip_proto=nd.PROTO_ICMPV6, icmpv6_type=nd.ROUTER_ADVERTISEMENT)
    del packet["tcp_src"], packet["tcp_dst"]
    return packet, nd.parse(bytes(frame))


def offer(router, switch, mac, *routes):
    """The border router advertises: whether the switch passed it to the controller, and the effects."""
    packet, advert = border_router_advert(mac, *routes)
    if [d.port for d in switch.send(packet)] != [flows.CONTROLLER]:
        return False, []
    effects = router.on_router_advert(advert)
    switch.apply(effects)
    return True, effects


def routes_heard(effects, mac):
    found = []
    for e in effects:
        if isinstance(e, SendFrame) and ICMPv6ND_RA in Ether(e.data) and Ether(e.data).dst == mac:
            found += [(f"{o.prefix}/{o.plen}", o.rtlifetime) for o in _options(Ether(e.data)) if o.type == 24]
    return found


def test_a_border_routers_mesh_is_reached_through_the_router_from_a_permitted_device(router, switch):
    join(router, switch, TABLET)  # the border router (a permitted device)
    join(router, switch, LAPTOP)
    passed, effects = offer(router, switch, TABLET, (MESH, 1800))
    assert passed
    assert AddIpv6Route(MESH) in effects
    # The laptop hears the route (the router its next hop), and the household what happened.
    assert routes_heard(effects, LAPTOP) == [(MESH, 1800)]
    assert routes_heard(effects, TABLET) == []
    assert any(isinstance(e, TellHousehold) and MESH in e.message for e in effects)
    # The laptop's packet to a mesh node goes to the border router, hop limit one lower.
    laptop = in_prefix(router.ipv6.current[LAPTOP][1])  # its ULA address, which it picks for a ULA node
    [hop] = deliver(switch, ipv6_packet(WLAN, LAPTOP, ROUTER_MAC, laptop, MESH_NODE))
    assert (hop.port, hop.packet["eth_dst"], hop.packet["ip_ttl"]) == (WLAN, TABLET, 63)
    # The node's answer, forwarded by the border router from its MAC, reaches the laptop.
    [back] = deliver(switch, ipv6_packet(WLAN, TABLET, ROUTER_MAC, MESH_NODE, laptop))
    assert (back.port, back.packet["eth_dst"]) == (WLAN, LAPTOP)
    # The router's own stack finds the node behind the border router (its route is on-link).
    ns = Ether(src=ROUTER_MAC) / IPv6(src="fe80::1", dst="ff02::1:ff00:77") / ICMPv6ND_NS(tgt=MESH_NODE)
    [answer] = router.on_solicitation(LOCAL, nd.parse(bytes(ns)))
    assert (Ether(answer.data).src, Ether(answer.data)[ICMPv6ND_NA].tgt) == (TABLET, MESH_NODE)
    # Traffic from the mesh counts as the border router's (its allowance, its Flows rows).
    assert router.registry.device_at(MESH_NODE).mac == TABLET


def test_a_pending_devices_route_is_never_honoured(router, switch):
    join(router, switch, TABLET, permit=False)
    join(router, switch, LAPTOP)
    passed, _ = offer(router, switch, TABLET, (MESH, 1800))
    assert not passed  # the switch does not even pass it on
    # Even if it got through, the controller would not take it from a device that does not forward.
    _, advert = border_router_advert(TABLET, (MESH, 1800))
    assert router.on_router_advert(advert) == []
    laptop = in_prefix(router.ipv6.current[LAPTOP][1])
    assert [d.port for d in deliver(switch, ipv6_packet(WLAN, LAPTOP, ROUTER_MAC, laptop, MESH_NODE))] == [
        LOCAL  # the router's stack: no route to it, nothing reaches the pending device
    ]
    assert deliver(switch, ipv6_packet(WLAN, TABLET, ROUTER_MAC, MESH_NODE, laptop)) == []


def test_a_device_cannot_draw_another_devices_traffic_to_itself_with_a_route(router, switch):
    join(router, switch, TABLET)
    join(router, switch, LAPTOP)
    laptop_ula = router.ipv6.current[LAPTOP][1]
    laptop_global = router.ipv6.current[LAPTOP][0]
    _, effects = offer(router, switch, TABLET, (laptop_ula, 1800), (laptop_global, 1800))
    assert not any(isinstance(e, AddIpv6Route) for e in effects)
    assert sum(isinstance(e, TellHousehold) and "refused" in e.message for e in effects) == 2
    phone_src = in_prefix(laptop_ula, 0x99)
    join(router, switch, PHONE)
    phone = in_prefix(router.ipv6.current[PHONE][1])
    [hop] = deliver(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, phone, phone_src))
    assert hop.packet["eth_dst"] == LAPTOP  # still the laptop's
    # Nor send from the laptop's addresses.
    assert deliver(switch, ipv6_packet(WLAN, TABLET, ROUTER_MAC, phone_src, phone)) == []


def test_a_route_goes_when_it_is_withdrawn_runs_out_or_its_device_is_denied(router, switch, clock):
    join(router, switch, TABLET)
    join(router, switch, LAPTOP)
    laptop = in_prefix(router.ipv6.current[LAPTOP][1])

    def reached() -> bool:
        out = deliver(switch, ipv6_packet(WLAN, LAPTOP, ROUTER_MAC, laptop, MESH_NODE))
        return [d.packet["eth_dst"] for d in out] == [TABLET]

    offer(router, switch, TABLET, (MESH, 1800))
    assert reached()
    clock.now += border_routes.CHANGE_HOLD_S
    _, effects = offer(router, switch, TABLET, (MESH, 0))  # withdrawn
    assert RemoveIpv6Route(MESH) in effects and not reached()
    clock.now += border_routes.CHANGE_HOLD_S
    offer(router, switch, TABLET, (MESH, 100))
    assert reached()
    clock.now += 101  # ran out: the border router stopped advertising
    effects = router.tick()
    switch.apply(effects)
    assert RemoveIpv6Route(MESH) in effects and not reached()
    offer(router, switch, TABLET, (MESH, 1800))
    effects = router.decisions.deny(TABLET)
    switch.apply(effects)
    assert RemoveIpv6Route(MESH) in effects and not reached()
    # Permitted again, it is honoured once it advertises again.
    switch.apply(router.decisions.permit(TABLET))
    assert not reached()
    offer(router, switch, TABLET, (MESH, 1800))
    assert reached()


# ---- no device speaks for another at layer 2 or 3 (issue 39, finding 2)


def icmpv6(eth_src, src, dst, kind, in_port=WLAN, eth_dst=ROUTER_MAC):
    """An ICMPv6 message of `kind` as the switch sees it."""
    packet = ipv6_packet(in_port, eth_src, eth_dst, src, dst, hop_limit=255)
    del packet["tcp_src"], packet["tcp_dst"]
    return packet | {"ip_proto": nd.PROTO_ICMPV6, "icmpv6_type": kind}


def test_a_devices_neighbour_advert_for_another_devices_address_reaches_nothing(router, switch):
    """The attack: the laptop sends the router's ::1 in its own /64 an override NA saying the phone's
    address is at the laptop's MAC (from a source in its /64, hop limit 255: Linux would take it). No NA,
    redirect or stray router advert from a device reaches the router's stack: the router learns where a
    device is only from the controller's proxy answers."""
    join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    laptop64 = router.ipv6.current[LAPTOP][0]
    laptop, gateway = in_prefix(laptop64), gateway_of(laptop64)
    for kind in (nd.NEIGHBOUR_ADVERTISEMENT, nd.REDIRECT, nd.ROUTER_ADVERTISEMENT):
        for dst in (gateway, nd.ALL_NODES):
            for src in (laptop, "fe80::cc"):
                assert deliver(switch, icmpv6(LAPTOP, src, dst, kind)) == [], (kind, dst, src)
    # Positive controls: its ping to the router's ::1 and its solicitations still get there (the latter to the
    # controller, which answers them); a forwarding device's own router adverts reach the controller (its routes).
    echo_request = 128
    assert [d.port for d in deliver(switch, icmpv6(LAPTOP, laptop, gateway, echo_request))] == [LOCAL]
    for kind in (nd.NEIGHBOUR_SOLICITATION, nd.ROUTER_SOLICITATION):
        assert [d.port for d in switch.send(icmpv6(LAPTOP, laptop, gateway, kind))] == [flows.CONTROLLER], kind
    assert [d.port for d in switch.send(icmpv6(LAPTOP, "fe80::cc", nd.ALL_NODES, nd.ROUTER_ADVERTISEMENT))] == [
        flows.CONTROLLER
    ]


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_the_routers_frames_for_a_device_carry_that_devices_mac(router, switch, family):
    """Had the router's stack been told the phone's address is at the laptop's MAC (a poisoned neighbour
    entry), its frames for the phone still reach the phone, addressed to the phone: the switch sets the
    destination MAC from the address, never trusts the stack's."""
    phone_v4 = join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    if family == "ipv4":
        to_phone = ipv4(LOCAL, ROUTER_MAC, LAPTOP, "192.0.2.80", phone_v4, sport=443, dport=40000)
    else:
        to_phone = ipv6_packet(LOCAL, ROUTER_MAC, LAPTOP, INTERNET, in_prefix(router.ipv6.current[PHONE][0]))
    [out] = deliver(switch, to_phone)
    assert (out.port, out.packet["eth_dst"]) == (WLAN, PHONE)
    # Positive control: the frame the stack addressed right leaves the same way.
    [out] = deliver(switch, to_phone | {"eth_dst": PHONE})
    assert (out.port, out.packet["eth_dst"]) == (WLAN, PHONE)


def test_a_border_routers_route_keeps_its_owner_while_it_is_paused_and_across_a_restart(router, switch, db_path, clock):
    """Finding 6 (issue 39): route offers were first come, first served and in memory: with the border
    router paused (or the controller restarted) a guest advertising its mesh took it, and the real border
    router was then refused. Now the prefix keeps its owner on the disk; the guest is refused until the
    household gives the route a new owner (positive control: then the guest's offer is honoured)."""
    join(router, switch, TABLET)  # the border router
    join(router, switch, LAPTOP)
    join(router, switch, PHONE)  # the guest
    laptop = in_prefix(router.ipv6.current[LAPTOP][1])

    def next_hop():
        out = deliver(switch, ipv6_packet(WLAN, LAPTOP, ROUTER_MAC, laptop, MESH_NODE))
        return [d.packet["eth_dst"] for d in out if d.port != flows.CONTROLLER]

    offer(router, switch, TABLET, (MESH, 1800))
    assert next_hop() == [TABLET]
    switch.apply(router.decisions.pause(TABLET))  # a bedtime, the panel: it stops forwarding and its route goes
    clock.now += border_routes.CHANGE_HOLD_S
    _, effects = offer(router, switch, PHONE, (MESH, 1800))
    assert not any(isinstance(e, AddIpv6Route) for e in effects)
    assert any(isinstance(e, TellHousehold) and "another device's route" in e.message for e in effects)
    assert next_hop() != [PHONE]
    switch.apply(router.decisions.resume(TABLET))
    offer(router, switch, TABLET, (MESH, 1800))
    assert next_hop() == [TABLET]

    # A restart: the owner is on the disk, and the guest, first to advertise after it, is refused still.
    assert router.store.flush()
    again = HomeRouter(
        DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, ipv6_plan=PrefixPlan(ULA, DELEGATED)
    )
    switch2 = FakeSwitch()
    switch2.apply(again.switch_ready(WLAN, ROUTER_MAC))
    for mac in (TABLET, LAPTOP, PHONE):
        join(again, switch2, mac, permit=False)
    _, effects = offer(again, switch2, PHONE, (MESH, 1800))
    assert not any(isinstance(e, AddIpv6Route) for e in effects)
    # The household gives the route to the phone (the owner's verb): its offer is honoured, the tablet's not.
    switch2.apply(again.give_route(PHONE, MESH))
    clock.now += border_routes.CHANGE_HOLD_S
    _, effects = offer(again, switch2, PHONE, (MESH, 1800))
    assert AddIpv6Route(MESH) in effects
    clock.now += border_routes.CHANGE_HOLD_S
    _, effects = offer(again, switch2, TABLET, (MESH, 1800))
    assert any(isinstance(e, TellHousehold) and "refused" in e.message for e in effects)


def test_a_route_is_given_only_as_a_prefix_a_device_could_offer(router, switch):
    join(router, switch, TABLET)
    for bad in ("not a prefix", "2001:db8::/64", "fd00::/40"):
        with pytest.raises(ApiError):
            router.give_route(TABLET, bad)
    assert router.ipv6.routes.owned() == {}
    router.give_route(TABLET, MESH)
    assert router.ipv6.routes.owned() == {MESH: TABLET}
