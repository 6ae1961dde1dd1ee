"""Frame parsing and building for what the controller answers itself.

os-ken's packet library does the header work; these helpers only pick the
fields policy needs and build the router's replies.
"""
from __future__ import annotations

from dataclasses import dataclass

from os_ken.lib.packet import arp, ethernet, ipv4, packet, udp
from os_ken.lib.packet import ether_types, in_proto


@dataclass(frozen=True)
class Frame:
    """The parts of a packet-in the policy looks at."""

    eth_src: str
    eth_dst: str
    ethertype: int
    arp: arp.arp | None = None
    ip_src: str | None = None
    ip_dst: str | None = None
    udp_src: int | None = None
    udp_dst: int | None = None
    payload: bytes = b""  # UDP payload


class MalformedFrame(ValueError):
    pass


def parse(data: bytes) -> Frame:
    try:
        eth, _, rest = ethernet.ethernet.parser(data)
        if eth.ethertype == ether_types.ETH_TYPE_ARP:
            arp_pkt, _, _ = arp.arp.parser(rest)
            return Frame(eth.src, eth.dst, eth.ethertype, arp=arp_pkt)
        if eth.ethertype != ether_types.ETH_TYPE_IP:
            return Frame(eth.src, eth.dst, eth.ethertype)
        ip, _, ip_payload = ipv4.ipv4.parser(rest)  # payload already cut to the IP total length
        if ip.proto != in_proto.IPPROTO_UDP or ip.offset:
            return Frame(eth.src, eth.dst, eth.ethertype, ip_src=ip.src, ip_dst=ip.dst)
        u, _, body = udp.udp.parser(ip_payload)
        if u.total_length < 8 or u.total_length > len(ip_payload):
            raise ValueError(f"UDP length {u.total_length} does not fit a {len(ip_payload)}-byte payload")
        return Frame(eth.src, eth.dst, eth.ethertype, ip_src=ip.src, ip_dst=ip.dst,
                     udp_src=u.src_port, udp_dst=u.dst_port, payload=bytes(body))
    except Exception as exc:  # os-ken parsers raise struct.error, IndexError, ValueError...
        raise MalformedFrame(f"{type(exc).__name__}: {exc}") from None


def udp_frame(eth_src: str, eth_dst: str, ip_src: str, ip_dst: str, sport: int, dport: int,
              payload: bytes) -> bytes:
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=eth_dst, src=eth_src, ethertype=ether_types.ETH_TYPE_IP))
    pkt.add_protocol(ipv4.ipv4(src=ip_src, dst=ip_dst, proto=in_proto.IPPROTO_UDP, ttl=64))
    pkt.add_protocol(udp.udp(src_port=sport, dst_port=dport))
    pkt.add_protocol(payload)
    pkt.serialize()
    return bytes(pkt.data)


def arp_reply(answer_mac: str, answer_ip: str, asker_mac: str, asker_ip: str) -> bytes:
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=asker_mac, src=answer_mac, ethertype=ether_types.ETH_TYPE_ARP))
    pkt.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=answer_mac, src_ip=answer_ip,
                             dst_mac=asker_mac, dst_ip=asker_ip))
    pkt.serialize()
    return bytes(pkt.data)
