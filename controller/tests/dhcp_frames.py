"""DHCP client frames as real clients build them, made with scapy."""

import socket

from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from homework_controller.wire import packets


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


_SERVER_MARK, _ADDRESS_MARK = "192.0.2.1", "192.0.2.2"
_STORM_DISCOVER = client_frame("02:00:00:00:00:00", "discover")
_STORM_REQUEST = client_frame(
    "02:00:00:00:00:00", "request", options=[("server_id", _SERVER_MARK), ("requested_addr", _ADDRESS_MARK)]
)


def forged(mac, server=None, address=None):
    """A storm's DISCOVER from `mac` (or its REQUEST, answering an offer of `address` from `server`), as a flooding
    device makes thousands: one frame built by scapy, its MAC and addresses patched in (no UDP checksum, as
    IPv4 allows)."""
    raw = bytearray(_STORM_DISCOVER if server is None else _STORM_REQUEST)
    raw[6:12] = raw[70:76] = bytes.fromhex(mac.replace(":", ""))  # Ethernet source; BOOTP chaddr (42 + 28)
    raw[40:42] = b"\0\0"
    if server is not None:
        for option, mark, value in ((54, _SERVER_MARK, server), (50, _ADDRESS_MARK, address)):
            at = raw.index(bytes([option, 4]) + socket.inet_aton(mark)) + 2
            raw[at : at + 4] = socket.inet_aton(value)
    return packets.parse(bytes(raw))
