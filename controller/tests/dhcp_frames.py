"""DHCP client frames as real clients build them, made with scapy."""

from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from homework_controller import packets


def client_frame(
    mac,
    msg_type,
    xid=0x1234,
    ciaddr="0.0.0.0",
    src_ip="0.0.0.0",
    dst_ip="255.255.255.255",
    chaddr=None,
    options=(),
    flags=0,
    dst_mac="ff:ff:ff:ff:ff:ff",
):
    chaddr = chaddr or mac
    pkt = (
        Ether(src=mac, dst=dst_mac)
        / IP(src=src_ip, dst=dst_ip)
        / UDP(sport=68, dport=67)
        / BOOTP(op=1, xid=xid, ciaddr=ciaddr, flags=flags, chaddr=bytes.fromhex(chaddr.replace(":", "")))
        / DHCP(options=[("message-type", msg_type), *options, "end"])
    )
    return bytes(pkt)


def frame(mac, msg_type, **kw):
    return packets.parse(client_frame(mac, msg_type, **kw))


def reply_of(effect_data):
    """Decode the DHCP reply inside an AnswerDhcp's bytes with scapy."""
    pkt = Ether(effect_data)
    opts = {o[0]: o[1:] if len(o) > 2 else o[1] for o in pkt[DHCP].options if isinstance(o, tuple)}
    return pkt, opts
