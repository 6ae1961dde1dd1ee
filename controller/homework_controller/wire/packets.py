"""Frame parsing and building for what the controller answers itself.

dpkt does the header work (it is several times faster than os-ken's packet
library, which matters when a hundred devices join at once); these helpers
only pick out the fields policy needs and build the router's replies. The one
frame built on the DHCP path (`udp_frame`) is packed in one go with struct, its
checksums summed as one big integer (dpkt's sum is the reference it is tested
against): dpkt's generic packet objects cost more than the answer itself.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import NamedTuple

import dpkt

ETH_TYPE_IP, ETH_TYPE_ARP, ETH_TYPE_IP6 = 0x0800, 0x0806, 0x86DD
ARP_REQUEST, ARP_REPLY = 1, 2


def mac_text(raw: bytes) -> str:
    return raw.hex(":")


def mac_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


@dataclass(frozen=True)
class Arp:
    opcode: int
    src_mac: str
    src_ip: str
    dst_ip: str


class Frame(NamedTuple):
    """The parts of a packet-in (or a DHCP frame) the policy looks at: who sent it, to whom, its ethertype,
    an ARP's fields, and an IPv4 UDP datagram's payload (DHCP; empty for any other frame, which DHCP reads
    as malformed). A named tuple, not a frozen dataclass: made for every frame a device sends, and a
    dataclass's frozen fields cost more to set than to parse. Neighbour discovery is `nd`'s to read."""

    eth_src: str
    eth_dst: str
    ethertype: int
    arp: Arp | None = None
    payload: bytes = b""


# Ethernet, IPv4 (options aside) and UDP.
_ETHERNET = struct.Struct("!6s6sH")
_IPV4_UDP = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")
_IPV4_ETHERTYPE = ETH_TYPE_IP.to_bytes(2, "big")
_IPV6_ETHERTYPE = ETH_TYPE_IP6.to_bytes(2, "big")


class MalformedFrame(ValueError):
    pass


def parse(data: bytes) -> Frame:
    try:
        if data[12:14] == _IPV4_ETHERTYPE:
            return _parse_ipv4(data)
        if data[12:14] == _IPV6_ETHERTYPE:
            dst, src, _ = _ETHERNET.unpack_from(data)
            return Frame(mac_text(src), mac_text(dst), ETH_TYPE_IP6)
        eth = dpkt.ethernet.Ethernet(data)
        src, dst = mac_text(eth.src), mac_text(eth.dst)
        if eth.type == ETH_TYPE_ARP:
            a = eth.data
            if not isinstance(a, dpkt.arp.ARP) or a.hln != 6 or a.pln != 4:
                raise ValueError("not an Ethernet/IPv4 ARP")
            return Frame(
                src, dst, eth.type, arp=Arp(a.op, mac_text(a.sha), socket.inet_ntoa(a.spa), socket.inet_ntoa(a.tpa))
            )
        return Frame(src, dst, eth.type)
    except (dpkt.UnpackError, ValueError, OSError) as exc:
        raise MalformedFrame(f"{type(exc).__name__}: {exc}") from None


def _parse_ipv4(data: bytes) -> Frame:
    """An untagged IPv4 frame (every DHCP frame), unpacked with struct: dpkt's packet objects cost more
    than the rest of a DHCP answer. Read as dpkt reads it: the IP header's length field bounds the
    datagram (0: the frame does), and the version nibble is not looked at."""
    if len(data) < _ETHERNET.size + _IPV4_UDP.size:
        raise ValueError("truncated IPv4 header")
    dst, src, _ = _ETHERNET.unpack_from(data)
    v_hl, _, total, _, flags_offset, _, proto, _, _, _ = _IPV4_UDP.unpack_from(data, _ETHERNET.size)
    header = (v_hl & 0xF) * 4
    if header < _IPV4_UDP.size:
        raise ValueError("truncated IPv4 header")
    if flags_offset & 0x1FFF or proto != dpkt.ip.IP_PROTO_UDP:
        return Frame(mac_text(src), mac_text(dst), ETH_TYPE_IP)
    start = _ETHERNET.size + header
    l4 = data[start : _ETHERNET.size + total] if total else data[start:]
    if len(l4) < _UDP.size:
        raise ValueError("truncated UDP datagram")
    _, _, length, _ = _UDP.unpack_from(l4)
    if length < _UDP.size or length > len(l4):
        raise ValueError("truncated UDP datagram")
    return Frame(mac_text(src), mac_text(dst), ETH_TYPE_IP, payload=bytes(l4[_UDP.size : length]))


_PSEUDO_HEADER = struct.Struct("!4s4sxBH")
_UDP_FRAME_HEADERS = struct.Struct("!6s6sH BBHHHBBH4s4s HHHH")  # Ethernet, IPv4 without options, UDP
IP_TTL = 64


def internet_checksum(data: bytes) -> int:
    """RFC 1071's checksum, as `dpkt.in_cksum` computes it (the reference in test_dhcp.py), as one remainder of a
    big integer: 2**16 is 1 modulo 0xFFFF, so the 16-bit words' sum folded with end-around carry is the number's
    remainder (0xFFFF for a non-zero multiple). dpkt sums the words one by one in Python, which cost a tenth of
    a DHCP answer."""
    if len(data) % 2:
        data += b"\0"  # an odd last octet is the high half of a word
    number = int.from_bytes(data, "big")
    return 0xFFFF - (number % 0xFFFF or (0xFFFF if number else 0))


def udp_frame(eth_src: str, eth_dst: str, ip_src: str, ip_dst: str, sport: int, dport: int, payload: bytes) -> bytes:
    src, dst = socket.inet_aton(ip_src), socket.inet_aton(ip_dst)
    udp_length = _UDP.size + len(payload)
    ip_length = _IPV4_UDP.size + udp_length
    ip_sum = internet_checksum(_IPV4_UDP.pack(0x45, 0, ip_length, 0, 0, IP_TTL, dpkt.ip.IP_PROTO_UDP, 0, src, dst))
    udp_sum = internet_checksum(
        _PSEUDO_HEADER.pack(src, dst, dpkt.ip.IP_PROTO_UDP, udp_length)
        + _UDP.pack(sport, dport, udp_length, 0)
        + payload
    )
    return (
        _UDP_FRAME_HEADERS.pack(
            mac_bytes(eth_dst),
            mac_bytes(eth_src),
            ETH_TYPE_IP,
            0x45,
            0,
            ip_length,
            0,
            0,
            IP_TTL,
            dpkt.ip.IP_PROTO_UDP,
            ip_sum,
            src,
            dst,
            # RFC 768: a sum that comes out zero is sent as all ones (zero: "no checksum").
            sport,
            dport,
            udp_length,
            udp_sum or 0xFFFF,
        )
        + payload
    )


def arp_reply(answer_mac: str, answer_ip: str, asker_mac: str, asker_ip: str) -> bytes:
    arp = dpkt.arp.ARP(
        op=ARP_REPLY,
        sha=mac_bytes(answer_mac),
        spa=socket.inet_aton(answer_ip),
        tha=mac_bytes(asker_mac),
        tpa=socket.inet_aton(asker_ip),
    )
    return bytes(
        dpkt.ethernet.Ethernet(src=mac_bytes(answer_mac), dst=mac_bytes(asker_mac), type=ETH_TYPE_ARP, data=arp)
    )
