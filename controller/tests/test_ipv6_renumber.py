"""Renumbering (issue 22, test 6 in the unit): the ISP delegates another prefix and each forwarding device
moves to a /64 of it at once (rules and advert), its old /64 still in its adverts but deprecated (preferred
lifetime 0, the valid one counting down) until it runs out; a pending device hears nothing new."""

import ipaddress

import pytest
from scapy.layers.inet6 import ICMPv6ND_RA, ICMPv6NDOptPrefixInfo
from scapy.layers.l2 import Ether
from support import LAPTOP, LOCAL, PHONE, ROUTER_MAC, WLAN, deliver, join, solicit_router

from homework_controller import flows
from homework_controller.concerns import ipv6
from homework_controller.core.router import HomeRouter
from homework_controller.effects import AddIpv6Gateway, RemoveIpv6Gateway, SendFrame
from homework_controller.policy import dhcp
from homework_controller.store import DeviceStore
from homework_controller.wire import nd, prefixes

ULA = prefixes.ula_prefix(0x12_3456_789A)
OLD = ipaddress.IPv6Network("2001:db8:100::/56")
NEW = ipaddress.IPv6Network("2001:db8:200::/56")
INTERNET = "2001:db8:5133::80"


@pytest.fixture
def router(db_path, clock):
    return HomeRouter(
        DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, ipv6_plan=prefixes.PrefixPlan(ULA, OLD)
    )


def advertised(effects, mac) -> list[dict[str, tuple[int, int]]]:
    """Each router advert to mac among effects, as the device reads it: prefix -> (valid, preferred)."""
    out = []
    for e in effects:
        if isinstance(e, SendFrame) and ICMPv6ND_RA in Ether(e.data) and Ether(e.data).dst == mac:
            frame = Ether(e.data)
            options, opt = {}, frame[ICMPv6ND_RA].payload
            while opt and opt.name != "NoPayload":
                if isinstance(opt, ICMPv6NDOptPrefixInfo):
                    options[f"{opt.prefix}/{opt.prefixlen}"] = (opt.validlifetime, opt.preferredlifetime)
                opt = opt.payload
            out.append(options)
    return out


def packet_from(src):
    return {
        "in_port": WLAN,
        "eth_src": PHONE,
        "eth_dst": ROUTER_MAC,
        "eth_type": nd.ETH_IPV6,
        "ipv6_src": src,
        "ipv6_dst": INTERNET,
        "ip_proto": flows.PROTO_TCP,
        "tcp_src": 40000,
        "tcp_dst": 80,
        "ip_ttl": 64,
    }


def host_in(prefix):
    return str(ipaddress.IPv6Network(prefix).network_address + 0xAA)


def test_a_new_prefix_moves_each_device_and_its_next_advert_deprecates_the_old(router, switch, clock):
    join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    old_phone, ula_phone = router.ipv6.current[PHONE]
    effects = router.renumber(NEW)
    switch.apply(effects)
    new_phone, _ = router.ipv6.current[PHONE]
    # The same /64 number in the new prefix (stable numbering), the ULA /64 unchanged.
    assert ipaddress.IPv6Network(new_phone).subnet_of(NEW)
    assert int(ipaddress.IPv6Network(new_phone).network_address) - int(NEW.network_address) == int(
        ipaddress.IPv6Network(old_phone).network_address
    ) - int(OLD.network_address)
    [advert] = advertised(effects, PHONE)
    assert advert == {
        new_phone: (nd.PREFIX_VALID_S, nd.PREFIX_PREFERRED_S),
        ula_phone: (nd.PREFIX_VALID_S, nd.PREFIX_PREFERRED_S),
        old_phone: (ipv6.DEPRECATED_VALID_S, 0),
    }
    assert len(advertised(effects, LAPTOP)) == 1
    assert new_phone in {e.prefix for e in effects if isinstance(e, AddIpv6Gateway)}
    # Its traffic from the new /64 goes out; from the old one (the ISP no longer routes it back) it does not.
    assert [d.port for d in deliver(switch, packet_from(host_in(new_phone)))] == [LOCAL]
    assert deliver(switch, packet_from(host_in(old_phone))) == []


def test_the_old_prefix_counts_down_in_the_periodic_adverts_then_goes(router, switch, clock):
    join(router, switch, PHONE)
    old_phone, _ = router.ipv6.current[PHONE]
    switch.apply(router.renumber(NEW))
    clock.now += ipv6.ADVERT_INTERVAL_S
    [advert] = advertised(router.tick(), PHONE)
    assert advert[old_phone] == (ipv6.DEPRECATED_VALID_S - ipv6.ADVERT_INTERVAL_S, 0)
    clock.now += ipv6.DEPRECATED_VALID_S
    [advert] = advertised(router.tick(), PHONE)
    assert old_phone not in advert and len(advert) == 2


def removed_gateways(effects) -> list[str]:
    return [e.prefix for e in effects if isinstance(e, RemoveIpv6Gateway)]


def test_the_old_prefix_gateway_leaves_the_router_once_its_valid_lifetime_is_over(router, switch, clock):
    join(router, switch, PHONE)
    old_phone, ula_phone = router.ipv6.current[PHONE]
    switch.apply(router.renumber(NEW))
    new_phone, _ = router.ipv6.current[PHONE]
    # While the phone may still use its old addresses (deprecated, still valid), the router keeps routing them.
    clock.now += ipv6.DEPRECATED_VALID_S - 1
    assert removed_gateways(router.tick()) == []
    clock.now += 2
    assert removed_gateways(router.tick()) == [old_phone]  # once
    assert removed_gateways(router.tick()) == []
    # The current /64s keep their ::1s (positive control): nothing else was removed, and they are still held.
    assert {new_phone, ula_phone} <= router.ipv6.gateways and old_phone not in router.ipv6.gateways


def test_renumbering_back_keeps_the_gateway_of_the_prefix_that_is_current_again(router, switch, clock):
    join(router, switch, PHONE)
    old_phone, _ = router.ipv6.current[PHONE]
    switch.apply(router.renumber(NEW))
    new_phone, _ = router.ipv6.current[PHONE]
    switch.apply(router.renumber(OLD))  # the ISP gives the first prefix back
    clock.now += ipv6.DEPRECATED_VALID_S + 1
    assert removed_gateways(router.tick()) == [new_phone]
    assert old_phone in router.ipv6.gateways and router.ipv6.current[PHONE][0] == old_phone


def test_the_same_prefix_again_changes_nothing(router, switch):
    join(router, switch, PHONE)
    assert router.renumber(OLD) == []


def test_a_pending_device_hears_nothing_new(router, switch):
    join(router, switch, PHONE, permit=False)
    join(router, switch, LAPTOP)
    effects = router.renumber(NEW)
    assert advertised(effects, PHONE) == [] and len(advertised(effects, LAPTOP)) == 1


def test_down_to_a_single_64_devices_keep_their_ula_and_the_old_global_is_deprecated(router, switch):
    join(router, switch, PHONE)
    old_phone, ula_phone = router.ipv6.current[PHONE]
    effects = router.renumber(ipaddress.IPv6Network("2001:db8:300::/64"))
    assert router.ipv6.current[PHONE] == (ula_phone,)
    [advert] = advertised(effects, PHONE)
    assert advert == {ula_phone: (nd.PREFIX_VALID_S, nd.PREFIX_PREFERRED_S), old_phone: (ipv6.DEPRECATED_VALID_S, 0)}


def test_adverts_never_promise_more_than_the_delegation_has_left(router, switch, clock):
    # The ISP's lease: preferred 5 min, valid 10 min (the emulated ISP's); the router's own are longer.
    switch.apply(router.renumber(OLD, (clock.now + 300, clock.now + 600)))
    join(router, switch, PHONE)
    phone, ula = router.ipv6.current[PHONE]
    [advert] = advertised(solicit_router(router, PHONE), PHONE)
    assert advert == {phone: (600, 300), ula: (nd.PREFIX_VALID_S, nd.PREFIX_PREFERRED_S)}
    # Counting down in the periodic adverts, the ULA /64 (the router's own) untouched.
    clock.now += ipv6.ADVERT_INTERVAL_S
    [advert] = advertised(router.tick(), PHONE)
    assert advert == {phone: (540, 240), ula: (nd.PREFIX_VALID_S, nd.PREFIX_PREFERRED_S)}
    # Renewed (the client rewrote the file): no rules redone, the next advert says the new time left.
    assert router.renumber(OLD, (clock.now + 300, clock.now + 600)) == []
    clock.now += ipv6.ADVERT_INTERVAL_S
    [advert] = advertised(router.tick(), PHONE)
    assert advert[phone] == (540, 240)
    # Not renewed past its preferred lifetime: deprecated, still valid for what is left.
    clock.now += 250
    [advert] = advertised(router.tick(), PHONE)
    assert advert[phone] == (290, 0)


def test_a_delegation_without_lifetimes_is_advertised_with_the_routers_own(router, switch):
    switch.apply(router.renumber(OLD, None))
    join(router, switch, PHONE)
    phone, _ = router.ipv6.current[PHONE]
    [advert] = advertised(solicit_router(router, PHONE), PHONE)
    assert advert[phone] == (nd.PREFIX_VALID_S, nd.PREFIX_PREFERRED_S)
