"""Neighbour discovery frames as a device's stack sees them: scapy (an independent implementation) builds
the solicitations the controller parses and reads the advertisements it builds, checksums included."""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import (
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6ND_RA,
    ICMPv6ND_RS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptMTU,
    ICMPv6NDOptPrefixInfo,
    ICMPv6NDOptRDNSS,
    ICMPv6NDOptRouteInfo,
    ICMPv6NDOptSrcLLAddr,
    IPv6,
)
from scapy.layers.l2 import Ether

from homework_controller.wire import nd

DEV = "02:00:00:00:00:aa"
ROUTER = "02:48:57:00:00:01"
PREFIXES = ("2001:db8:100:1::/64", "fd12:3456:789a:1::/64")


def test_a_router_solicitation_is_read():
    frame = Ether(src=DEV, dst="33:33:00:00:00:02") / IPv6(src="fe80::aa", dst="ff02::2") / ICMPv6ND_RS()
    frame /= ICMPv6NDOptSrcLLAddr(lladdr=DEV)
    assert nd.parse(bytes(frame)) == nd.Solicitation(nd.ROUTER_SOLICITATION, DEV, "fe80::aa")


def test_a_neighbour_solicitation_is_read_with_its_target():
    frame = Ether(src=DEV) / IPv6(src="fe80::aa", dst="ff02::1:ff00:1") / ICMPv6ND_NS(tgt="fe80::1")
    assert nd.parse(bytes(frame)) == nd.Solicitation(nd.NEIGHBOUR_SOLICITATION, DEV, "fe80::aa", "fe80::1")


def test_duplicate_address_detection_comes_from_the_unspecified_address():
    frame = Ether(src=DEV) / IPv6(src="::", dst="ff02::1:ff00:aa") / ICMPv6ND_NS(tgt="2001:db8:100:1::aa")
    assert nd.parse(bytes(frame)).src == nd.UNSPECIFIED


def test_other_ipv6_is_not_a_solicitation():
    assert nd.parse(bytes(Ether(src=DEV) / IPv6(src="fe80::aa", dst="fe80::1") / UDP(dport=53))) is None
    assert nd.parse(bytes(Ether(src=DEV) / IPv6(dst="fe80::1") / ICMPv6ND_NA(tgt="fe80::aa"))) is None


@pytest.mark.parametrize(
    "frame",
    [
        Ether(src=DEV) / IPv6(src="fe80::aa", hlim=64) / ICMPv6ND_RS(),  # routed from afar: not on the link
        Ether(src=DEV) / IPv6(src="fe80::aa") / ICMPv6ND_RS(code=1),
        Ether(src=DEV) / IPv6(src="fe80::aa") / ICMPv6ND_NS(tgt="ff02::1"),
        Ether(src=DEV) / IPv6(src="fe80::aa") / ICMPv6ND_RS() / b"\x01\x00xxxxxx",  # zero-length option
        Ether(src=DEV) / IPv6(src="fe80::aa", plen=200) / ICMPv6ND_RS(),  # longer than the frame
        Ether(src=DEV) / IPv6(src="fe80::aa") / ICMPv6ND_NS(tgt="fe80::1"),  # cut below
    ],
)
def test_broken_solicitations_are_refused(frame):
    data = bytes(frame)
    if ICMPv6ND_NS in frame and frame[ICMPv6ND_NS].tgt == "fe80::1":
        data = data[:-4]
    with pytest.raises(nd.MalformedNd):
        nd.parse(data)


def test_a_truncated_frame_is_refused():
    with pytest.raises(nd.MalformedNd):
        nd.parse(bytes(Ether(src=DEV) / IP())[:20])


def test_the_advert_carries_the_devices_prefixes_its_dns_and_the_mtu_to_its_mac_only():
    lifetimes = ((PREFIXES[0], 600, 300), (PREFIXES[1], nd.PREFIX_VALID_S, nd.PREFIX_PREFERRED_S))
    data = nd.router_advert(ROUTER, DEV, lifetimes, "2001:db8:100:1::1")
    frame = Ether(data)
    assert frame.dst == DEV and frame.src == ROUTER  # never to a multicast MAC
    assert frame[IPv6].src == "fe80::1" and frame[IPv6].hlim == 255
    ra = frame[ICMPv6ND_RA]
    assert ra.routerlifetime == nd.ROUTER_LIFETIME_S
    assert frame[ICMPv6NDOptSrcLLAddr].lladdr == ROUTER
    assert frame[ICMPv6NDOptMTU].mtu == 1500
    infos = []
    opt = frame[ICMPv6NDOptPrefixInfo]
    while opt is not None and isinstance(opt, ICMPv6NDOptPrefixInfo):
        infos.append((f"{opt.prefix}/{opt.prefixlen}", opt.L, opt.A, opt.validlifetime, opt.preferredlifetime))
        opt = opt.payload if isinstance(opt.payload, ICMPv6NDOptPrefixInfo) else None
    assert infos == [(p, 1, 1, valid, preferred) for p, valid, preferred in lifetimes]
    assert frame[ICMPv6NDOptRDNSS].dns == ["2001:db8:100:1::1"]
    assert _checksum_ok(frame)


def test_a_pending_devices_advert_has_router_lifetime_0_and_no_prefix():
    frame = Ether(nd.router_advert(ROUTER, DEV, (), "2001:db8:100:1::1"))
    assert frame[ICMPv6ND_RA].routerlifetime == 0
    assert ICMPv6NDOptPrefixInfo not in frame and ICMPv6NDOptRDNSS not in frame
    assert _checksum_ok(frame)


def test_the_neighbour_advert_answers_for_the_target():
    frame = Ether(nd.neighbour_advert(ROUTER, DEV, "fe80::1", "fe80::aa", router=True, target_mac=ROUTER))
    na = frame[ICMPv6ND_NA]
    assert (na.tgt, na.R, na.S, na.O) == ("fe80::1", 1, 1, 1)
    assert frame[ICMPv6NDOptDstLLAddr].lladdr == ROUTER
    assert (frame.dst, frame[IPv6].dst, frame[IPv6].src, frame[IPv6].hlim) == (DEV, "fe80::aa", "fe80::1", 255)
    assert _checksum_ok(frame)


def _checksum_ok(frame) -> bool:
    icmp = frame[IPv6].payload
    sent = icmp.cksum
    del icmp.cksum
    return Ether(bytes(frame))[IPv6].payload.cksum == sent


MESH = "fd11:2233:4455:1::/64"


def border_router_advert(*routes, src="fe80::bb"):
    """A Thread border router's advert as OpenThread sends it: not a default router (lifetime 0), its
    mesh's prefixes as Route Information."""
    frame = Ether(src=DEV, dst="33:33:00:00:00:01") / IPv6(src=src, dst="ff02::1") / ICMPv6ND_RA(routerlifetime=0)
    return frame / ICMPv6NDOptSrcLLAddr(lladdr=DEV) / b"".join(bytes(r) for r in routes)


def test_a_border_routers_advert_is_read_for_the_routes_it_offers():
    advert = border_router_advert(
        ICMPv6NDOptRouteInfo(prefix="fd11:2233:4455:1::", plen=64, rtlifetime=1800),
        ICMPv6NDOptRouteInfo(prefix="fd99::", plen=48, rtlifetime=0, len=3),  # withdrawn, the long form
        ICMPv6NDOptRouteInfo(prefix="::", plen=0, rtlifetime=600),  # a default route, the short form
    )
    assert nd.parse(bytes(advert)) == nd.RouterAdvert(
        DEV,
        "fe80::bb",
        (nd.RouteOffer(MESH, 1800), nd.RouteOffer("fd99::/48", 0), nd.RouteOffer("::/0", 600)),
    )


def test_a_route_option_that_does_not_fit_is_ignored_and_the_rest_of_the_advert_stands():
    advert = border_router_advert(
        ICMPv6NDOptRouteInfo(prefix="fd11:2233:4455:1::", plen=64, rtlifetime=1800, len=1),  # too short for a /64
        ICMPv6NDOptRouteInfo(prefix="fd11:2233:4455:2::", plen=64, rtlifetime=1800, prf=2),  # reserved preference
        ICMPv6NDOptRouteInfo(prefix="fd11:2233:4455:3::", plen=64, rtlifetime=1800),
    )
    assert nd.parse(bytes(advert)).routes == (nd.RouteOffer("fd11:2233:4455:3::/64", 1800),)


def test_an_advert_from_an_address_off_the_link_is_refused():
    advert = border_router_advert(ICMPv6NDOptRouteInfo(prefix="fd11:2233:4455:1::", plen=64), src="fd11::1")
    with pytest.raises(nd.MalformedNd):
        nd.parse(bytes(advert))


def test_the_routers_advert_carries_other_devices_routes_as_a_linux_host_reads_them():
    data = nd.router_advert(ROUTER, DEV, ((PREFIXES[0], 600, 300),), None, routes=((MESH, 1700), ("fd99::/48", 30)))
    options = Ether(data)[ICMPv6ND_RA]
    found = []
    while options.payload and options.payload.name != "NoPayload":
        options = options.payload
        if isinstance(options, ICMPv6NDOptRouteInfo):
            found.append((f"{options.prefix}/{options.plen}", options.rtlifetime, options.prf))
    assert found == [(MESH, 1700, 0), ("fd99::/48", 30, 0)]


def test_a_mangled_advert_is_refused_or_read_never_an_error_of_another_kind():
    """Seeded: bytes of a border router's advert overwritten and cut at random (a hostile device's, which
    reach the controller through its meter). Each is MalformedNd or an advert; nothing else escapes."""
    base = bytes(border_router_advert(ICMPv6NDOptRouteInfo(prefix="fd11:2233:4455:1::", plen=64)))
    rng = random.Random(22)
    read = 0
    for _ in range(5000):
        data = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(14 + 40, len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data))]
        try:
            read += isinstance(nd.parse(bytes(data)), nd.RouterAdvert)
        except nd.MalformedNd:
            pass
    assert read > 0  # positive control: some mangled ones are still adverts (say, only the lifetime changed)
