"""Frame parsing and building for what the controller answers itself.

dpkt does the header work (it is several times faster than os-ken's packet
library, which matters when a hundred devices join at once); these helpers
only pick out the fields policy needs and build the router's replies.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass

import dpkt

ETH_TYPE_IP, ETH_TYPE_ARP = 0x0800, 0x0806
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


@dataclass(frozen=True)
class Frame:
    """The parts of a packet-in the policy looks at."""

    eth_src: str
    eth_dst: str
    ethertype: int
    arp: Arp | None = None
    ip_src: str | None = None
    ip_dst: str | None = None
    ip_proto: int = 0
    sport: int = 0     # TCP or UDP ports; 0 for other protocols
    dport: int = 0
    payload: bytes = b""  # UDP payload
    size: int = 0  # octets on the wire, as OVS counts them

    @property
    def is_udp(self) -> bool:
        return self.ip_proto == dpkt.ip.IP_PROTO_UDP


class MalformedFrame(ValueError):
    pass


def parse(data: bytes) -> Frame:
    try:
        eth = dpkt.ethernet.Ethernet(data)
        src, dst = mac_text(eth.src), mac_text(eth.dst)
        if eth.type == ETH_TYPE_ARP:
            a = eth.data
            if not isinstance(a, dpkt.arp.ARP) or a.hln != 6 or a.pln != 4:
                raise ValueError("not an Ethernet/IPv4 ARP")
            return Frame(src, dst, eth.type, arp=Arp(a.op, mac_text(a.sha), socket.inet_ntoa(a.spa),
                                                     socket.inet_ntoa(a.tpa)))
        if eth.type != ETH_TYPE_IP:
            return Frame(src, dst, eth.type)
        ip = eth.data
        if not isinstance(ip, dpkt.ip.IP):
            raise ValueError("truncated IPv4 header")
        ip_src, ip_dst = socket.inet_ntoa(ip.src), socket.inet_ntoa(ip.dst)
        if ip.offset or ip.p not in (dpkt.ip.IP_PROTO_UDP, dpkt.ip.IP_PROTO_TCP):
            return Frame(src, dst, eth.type, ip_src=ip_src, ip_dst=ip_dst, ip_proto=ip.p, size=len(data))
        l4 = ip.data
        if ip.p == dpkt.ip.IP_PROTO_TCP:
            if not isinstance(l4, dpkt.tcp.TCP):
                raise ValueError("truncated TCP header")
            return Frame(src, dst, eth.type, ip_src=ip_src, ip_dst=ip_dst, ip_proto=ip.p,
                         sport=l4.sport, dport=l4.dport, size=len(data))
        if not isinstance(l4, dpkt.udp.UDP) or l4.ulen < 8 or l4.ulen - 8 > len(l4.data):
            raise ValueError("truncated UDP datagram")
        return Frame(src, dst, eth.type, ip_src=ip_src, ip_dst=ip_dst, ip_proto=ip.p, sport=l4.sport,
                     dport=l4.dport, payload=bytes(l4.data[:l4.ulen - 8]), size=len(data))
    except (dpkt.UnpackError, ValueError, OSError) as exc:
        raise MalformedFrame(f"{type(exc).__name__}: {exc}") from None


def udp_frame(eth_src: str, eth_dst: str, ip_src: str, ip_dst: str, sport: int, dport: int,
              payload: bytes) -> bytes:
    udp = dpkt.udp.UDP(sport=sport, dport=dport, data=payload)
    udp.ulen = len(udp)
    ip = dpkt.ip.IP(src=socket.inet_aton(ip_src), dst=socket.inet_aton(ip_dst), p=dpkt.ip.IP_PROTO_UDP,
                    ttl=64, data=udp)
    ip.len = len(ip)
    return bytes(dpkt.ethernet.Ethernet(src=mac_bytes(eth_src), dst=mac_bytes(eth_dst), type=ETH_TYPE_IP, data=ip))


def arp_reply(answer_mac: str, answer_ip: str, asker_mac: str, asker_ip: str) -> bytes:
    arp = dpkt.arp.ARP(op=ARP_REPLY, sha=mac_bytes(answer_mac), spa=socket.inet_aton(answer_ip),
                       tha=mac_bytes(asker_mac), tpa=socket.inet_aton(asker_ip))
    return bytes(dpkt.ethernet.Ethernet(src=mac_bytes(answer_mac), dst=mac_bytes(asker_mac), type=ETH_TYPE_ARP,
                                        data=arp))
