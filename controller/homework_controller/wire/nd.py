"""Neighbour discovery frames (RFC 4861) the controller reads and answers: router and neighbour
solicitations in, router advertisements and neighbour advertisements out; and a device's own router
advertisements in, for the routes they offer (RFC 4191 Route Information, as a Thread border router
offers its mesh's prefixes).

Packed and unpacked with struct (as `packets.py` builds the DHCP path's frames); the checksum is the
ICMPv6 one over the IPv6 pseudo-header. `parse` reads only what the policy needs and rejects what
RFC 4861 says a node must ignore (hop limit other than 255, ICMP code other than 0, truncated options).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from .packets import ETH_TYPE_IP6, mac_bytes, mac_text

ETH_IPV6 = ETH_TYPE_IP6
PROTO_ICMPV6 = 58
ROUTER_SOLICITATION, ROUTER_ADVERTISEMENT = 133, 134
NEIGHBOUR_SOLICITATION, NEIGHBOUR_ADVERTISEMENT, REDIRECT = 135, 136, 137
OPT_SOURCE_LINK, OPT_TARGET_LINK, OPT_PREFIX, OPT_MTU, OPT_ROUTE, OPT_RDNSS = 1, 2, 3, 5, 24, 25
ALL_NODES = "ff02::1"
ROUTER_LINK_LOCAL = "fe80::1"  # the router's address on every device's link (the source of its adverts)
UNSPECIFIED = "::"

ROUTER_LIFETIME_S = 1800
PREFIX_VALID_S, PREFIX_PREFERRED_S = 3600, 1800
RDNSS_LIFETIME_S = 1800
LINK_MTU = 1500
CUR_HOP_LIMIT = 64

_ETHERNET = struct.Struct("!6s6sH")
_IPV6 = struct.Struct("!IHBB16s16s")
_ICMP = struct.Struct("!BBH")
_RA_FIXED = 16  # type, code, checksum, hop limit, flags, router lifetime, reachable and retransmit times
_ROUTE = struct.Struct("!BBBBI")  # type, length (8 octets), prefix length, flags (preference), lifetime
RESERVED_PREFERENCE = 0b10  # RFC 4191 2.3: an option with it is ignored
LINK_LOCAL = ipaddress.IPv6Network("fe80::/10")


class MalformedNd(ValueError):
    pass


@dataclass(frozen=True)
class Solicitation:
    """A router solicitation (target "") or a neighbour solicitation for target."""

    kind: int
    eth_src: str
    src: str  # its IPv6 source: "::" for duplicate-address detection
    target: str = ""


@dataclass(frozen=True)
class RouteOffer:
    """One Route Information option: a prefix the advertising router reaches, for lifetime seconds
    (0: no longer; 0xffffffff: until it says otherwise)."""

    prefix: str
    lifetime: int


@dataclass(frozen=True)
class RouterAdvert:
    """A device's own router advertisement: what it sent it from, and the routes it offers."""

    eth_src: str
    src: str
    routes: tuple[RouteOffer, ...]


def parse(data: bytes) -> Solicitation | RouterAdvert | None:
    """A frame's router or neighbour solicitation, or a router advertisement; None if it is other IPv6
    (raises MalformedNd if broken)."""
    if len(data) < _ETHERNET.size + _IPV6.size + _ICMP.size:
        raise MalformedNd("truncated IPv6/ICMPv6 header")
    _, src_mac, ethertype = _ETHERNET.unpack_from(data)
    if ethertype != ETH_IPV6:
        return None
    _, length, next_header, hop_limit, src, _ = _IPV6.unpack_from(data, _ETHERNET.size)
    if next_header != PROTO_ICMPV6:
        return None
    body = data[_ETHERNET.size + _IPV6.size : _ETHERNET.size + _IPV6.size + length]
    if len(body) != length or length < _ICMP.size:
        raise MalformedNd("IPv6 payload length beyond the frame")
    kind, code, _ = _ICMP.unpack_from(body)
    if kind not in (ROUTER_SOLICITATION, NEIGHBOUR_SOLICITATION, ROUTER_ADVERTISEMENT):
        return None
    if hop_limit != 255 or code != 0:
        raise MalformedNd("not from the link (hop limit must be 255, code 0)")
    src_text = str(ipaddress.IPv6Address(src))
    if kind == ROUTER_ADVERTISEMENT:
        return _router_advert(mac_text(src_mac), ipaddress.IPv6Address(src), body)
    if kind == ROUTER_SOLICITATION:
        _check_options(body, 8)
        return Solicitation(kind, mac_text(src_mac), src_text)
    if length < 24:
        raise MalformedNd("truncated neighbour solicitation")
    target = ipaddress.IPv6Address(body[8:24])
    if target.is_multicast:
        raise MalformedNd("a neighbour solicitation's target is never multicast")
    _check_options(body, 24)
    return Solicitation(kind, mac_text(src_mac), src_text, str(target))


def _router_advert(eth_src: str, src: ipaddress.IPv6Address, body: bytes) -> RouterAdvert:
    """RFC 4861 6.1.2: an advert comes from a link-local address. Its Route Information options (RFC 4191
    2.3) are read; one whose length does not fit its prefix length, or with the reserved preference, is
    ignored as the RFC says (the rest of the advert stands)."""
    if src not in LINK_LOCAL:
        raise MalformedNd("a router advertisement comes from a link-local address")
    if len(body) < _RA_FIXED:
        raise MalformedNd("truncated router advertisement")
    routes = []
    for kind, option in _options(body, _RA_FIXED):
        if kind != OPT_ROUTE or len(option) < _ROUTE.size:
            continue
        _, length, prefix_length, flags, lifetime = _ROUTE.unpack_from(option)
        fits = 1 + (prefix_length + 63) // 64 <= length <= 3 and prefix_length <= 128
        if not fits or (flags >> 3) & 3 == RESERVED_PREFERENCE:
            continue
        packed = option[_ROUTE.size :][:16].ljust(16, b"\0")
        prefix = ipaddress.IPv6Network((int.from_bytes(packed, "big"), prefix_length), strict=False)
        routes.append(RouteOffer(str(prefix), lifetime))
    return RouterAdvert(eth_src, str(src), tuple(routes))


def _check_options(body: bytes, start: int) -> None:
    for _ in _options(body, start):
        pass


def _options(body: bytes, start: int) -> Iterator[tuple[int, bytes]]:
    """Each option after `start` as (type, its bytes); raises MalformedNd at a truncated or empty one."""
    at = start
    while at < len(body):
        if at + 2 > len(body) or body[at + 1] == 0 or at + body[at + 1] * 8 > len(body):
            raise MalformedNd("truncated or zero-length ND option")
        end = at + body[at + 1] * 8
        yield body[at], body[at:end]
        at = end


def router_advert(
    router_mac: str,
    dst_mac: str,
    prefixes: tuple[tuple[str, int, int], ...],
    dns: str | None,
    dst_ip: str = ALL_NODES,
    deprecated: tuple[tuple[str, int], ...] = (),
    routes: tuple[tuple[str, int], ...] = (),
):
    """A router advertisement for one device, sent to its MAC only: its /64s (on-link, autonomous), each with
    its valid and preferred lifetimes (seconds), the router's address as its DNS server, the link MTU. No
    prefix: router lifetime 0 (not a default router). deprecated: /64s it had before a renumbering, each with
    the seconds it stays valid (preferred 0). routes: prefixes reached through the router (Route
    Information, medium preference), each with its lifetime."""
    options = _link_option(OPT_SOURCE_LINK, router_mac) + struct.pack("!BBHI", OPT_MTU, 1, 0, LINK_MTU)
    for prefix, valid, preferred in prefixes + tuple((prefix, valid, 0) for prefix, valid in deprecated):
        net = ipaddress.IPv6Network(prefix)
        options += struct.pack(
            "!BBBBIII16s",
            OPT_PREFIX,
            4,
            net.prefixlen,
            0xC0,  # L (on-link) and A (autonomous: SLAAC)
            valid,
            preferred,
            0,
            net.network_address.packed,
        )
    for prefix, lifetime in routes:
        net = ipaddress.IPv6Network(prefix)
        options += _ROUTE.pack(OPT_ROUTE, 3, net.prefixlen, 0, lifetime) + net.network_address.packed
    if prefixes and dns:
        options += struct.pack("!BBHI16s", OPT_RDNSS, 3, 0, RDNSS_LIFETIME_S, ipaddress.IPv6Address(dns).packed)
    lifetime = ROUTER_LIFETIME_S if prefixes else 0
    body = struct.pack("!BBHBBHII", ROUTER_ADVERTISEMENT, 0, 0, CUR_HOP_LIMIT, 0, lifetime, 0, 0) + options
    return _frame(router_mac, dst_mac, ROUTER_LINK_LOCAL, dst_ip, body)


def neighbour_advert(
    src_mac: str, dst_mac: str, target: str, dst_ip: str, router: bool, target_mac: str, solicited: bool = True
) -> bytes:
    """The answer to a neighbour solicitation for target: it is at target_mac (override; solicited, or unasked)."""
    flags = (0x80000000 if router else 0) | (0x40000000 if solicited else 0) | 0x20000000
    body = struct.pack("!BBHI16s", NEIGHBOUR_ADVERTISEMENT, 0, 0, flags, ipaddress.IPv6Address(target).packed)
    body += _link_option(OPT_TARGET_LINK, target_mac)
    return _frame(src_mac, dst_mac, target, dst_ip, body)


def _link_option(kind: int, mac: str) -> bytes:
    return struct.pack("!BB6s", kind, 1, mac_bytes(mac))


def _frame(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, icmp: bytes) -> bytes:
    src, dst = ipaddress.IPv6Address(src_ip).packed, ipaddress.IPv6Address(dst_ip).packed
    checksum = _checksum(src + dst + struct.pack("!IxxxB", len(icmp), PROTO_ICMPV6) + icmp)
    icmp = icmp[:2] + struct.pack("!H", checksum) + icmp[4:]
    return (
        _ETHERNET.pack(mac_bytes(dst_mac), mac_bytes(src_mac), ETH_IPV6)
        + _IPV6.pack(6 << 28, len(icmp), PROTO_ICMPV6, 255, src, dst)
        + icmp
    )


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
