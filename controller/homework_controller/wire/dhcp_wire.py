"""DHCP on the wire: `decode_request` turns a UDP payload into a `DhcpRequest`, `encode_reply` a
`DhcpReply` into the message. Both ends are packed and unpacked with struct: the message is a fixed
header and a tag-length-value list, and a hundred devices asking at once made dpkt's generic packet
objects cost more than the decisions (`dhcp.serve`). Nothing here touches a socket.
"""

from __future__ import annotations

import socket
import struct
from typing import NamedTuple

from . import lan
from .lan import Subnet

DISCOVER, OFFER, REQUEST, DECLINE, ACK, NAK, RELEASE, INFORM = 1, 2, 3, 4, 5, 6, 7, 8
MESSAGE_NAMES = {1: "DISCOVER", 2: "OFFER", 3: "REQUEST", 4: "DECLINE", 5: "ACK", 6: "NAK", 7: "RELEASE", 8: "INFORM"}

OPT_PAD = 0
OPT_SUBNET_MASK = 1
OPT_ROUTER = 3
OPT_DNS = 6
OPT_HOSTNAME = 12
OPT_BROADCAST = 28
OPT_REQUESTED_IP = 50
OPT_LEASE_TIME = 51
OPT_MESSAGE_TYPE = 53
OPT_SERVER_ID = 54
OPT_PARAMETER_LIST = 55
OPT_MESSAGE = 56
OPT_RENEWAL_T1 = 58
OPT_REBINDING_T2 = 59
OPT_VENDOR_CLASS = 60
OPT_CLIENT_ID = 61
OPT_CAPTIVE_PORTAL = 114  # RFC 8910: the captive portal's API (RFC 8908)
OPT_END = 255

BROADCAST_FLAG = 0x8000
ZERO_IP = "0.0.0.0"
BROADCAST_IP = "255.255.255.255"
BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"


class MalformedDhcp(ValueError):
    pass


# Requests and replies are named tuples, not frozen dataclasses: one of each per DHCP message, and a frozen
# dataclass's fields cost more to set than the message costs to unpack.
class DhcpRequest(NamedTuple):
    msg_type: int
    xid: int
    flags: int
    ciaddr: str
    giaddr: str
    chaddr: str
    requested_ip: str | None = None
    server_id: str | None = None
    hostname: str = ""
    vendor_class: str = ""
    # What tells one DHCP client from another using the same MAC (`fingerprints`): the options it asks
    # for, in its order (option 55), and its client identifier (option 61), both as hex, bounded.
    parameter_list: str = ""
    client_id: str = ""

    @property
    def name(self) -> str:
        return MESSAGE_NAMES.get(self.msg_type, str(self.msg_type))


class DhcpReply(NamedTuple):
    msg_type: int
    xid: int
    flags: int
    chaddr: str
    ciaddr: str
    yiaddr: str
    server_ip: str
    dst_ip: str
    dst_mac: str
    lease_seconds: int | None = None
    subnet: Subnet | None = None
    message: str = ""

    @property
    def name(self) -> str:
        return MESSAGE_NAMES[self.msg_type]


def _ip(raw: bytes) -> str:
    if len(raw) != 4:
        raise MalformedDhcp(f"IPv4 option of {len(raw)} bytes")
    return socket.inet_ntoa(raw)


def _text(raw: bytes, limit: int = 64) -> str:
    # Names come from untrusted devices: keep printable characters only, bounded.
    text = raw.decode("utf-8", "replace")
    if text.isprintable():  # as nearly every name is: nothing to take out
        return text[:limit]
    return "".join(ch for ch in text if ch.isprintable())[:limit]


# A BOOTP message's fixed part (RFC 2131 section 2): op, htype, hlen, hops, xid, secs, flags, ciaddr, yiaddr,
# siaddr, giaddr, chaddr (16 octets), sname and file (192 octets), the magic cookie.
_BOOTP = struct.Struct("!BBBBIHH4s4s4s4s16s192sI")
BOOTREQUEST, BOOTREPLY, HTYPE_ETHERNET = 1, 2, 1
DHCP_MAGIC = 0x63825363
_NO_ADDRESS = bytes(4)


def _options(payload: bytes) -> dict[int, bytes]:
    """The options after the magic cookie, up to END: the first of each tag (a value cut off by the end of
    the message is kept as far as it goes; a tag without its length octet is malformed)."""
    opts: dict[int, bytes] = {}
    at, end = _BOOTP.size, len(payload)
    while at < end:
        tag = payload[at]
        if tag == OPT_END:
            break
        if tag == OPT_PAD:
            at += 1
            continue
        if at + 1 == end:
            raise MalformedDhcp(f"option {tag} has no length")
        length = payload[at + 1]
        opts.setdefault(tag, payload[at + 2 : at + 2 + length])
        at += 2 + length
    return opts


def decode_request(payload: bytes) -> DhcpRequest:
    """Parse a client's BOOTREQUEST. Raises MalformedDhcp for anything not a sane request."""
    if len(payload) < _BOOTP.size:
        raise MalformedDhcp(f"truncated: {len(payload)} bytes, a DHCP message has at least {_BOOTP.size}")
    op, htype, hlen, _, xid, _, flags, ciaddr, _, _, giaddr, chaddr, _, magic = _BOOTP.unpack_from(payload)
    if op != BOOTREQUEST:
        raise MalformedDhcp(f"op {op} is not BOOTREQUEST")
    if htype != HTYPE_ETHERNET or hlen != 6:
        raise MalformedDhcp(f"hardware type {htype}/length {hlen} is not Ethernet")
    if magic != DHCP_MAGIC:
        raise MalformedDhcp("missing DHCP magic cookie")
    # A message whose options run off the end never reaches END: its last option is cut.
    if payload.find(b"\xff", _BOOTP.size) < 0:
        raise MalformedDhcp("options are not terminated by END")
    opts = _options(payload)
    mtype = opts.get(OPT_MESSAGE_TYPE)
    if mtype is None or len(mtype) != 1 or mtype[0] not in MESSAGE_NAMES:
        raise MalformedDhcp("missing or invalid message type option")
    return DhcpRequest(
        msg_type=mtype[0],
        xid=xid,
        flags=flags,
        ciaddr=socket.inet_ntoa(ciaddr),
        giaddr=socket.inet_ntoa(giaddr),
        chaddr=chaddr[:6].hex(":"),
        requested_ip=_ip(opts[OPT_REQUESTED_IP]) if OPT_REQUESTED_IP in opts else None,
        server_id=_ip(opts[OPT_SERVER_ID]) if OPT_SERVER_ID in opts else None,
        hostname=_text(opts.get(OPT_HOSTNAME, b"")),
        vendor_class=_text(opts.get(OPT_VENDOR_CLASS, b"")),
        parameter_list=opts.get(OPT_PARAMETER_LIST, b"")[:64].hex(),
        client_id=opts.get(OPT_CLIENT_ID, b"")[:64].hex(),
    )


# The options an answer carries, each packed in one go (tag, length, value): its type and server, the lease's
# times (an INFORM's answer has none), and the /30's mask, router, DNS server (the router) and broadcast.
_TYPE_AND_SERVER = struct.Struct("!BBB BB4s")
_LEASE_TIMES = struct.Struct("!BBI BBI BBI")
_ADDRESSES = struct.Struct("!BB4s BB4s BB4s BB4s")
_SUBNET_MASK = socket.inet_aton(Subnet.mask)
_END = b"\xff"
_CAPTIVE_PORTAL = bytes((OPT_CAPTIVE_PORTAL, len(lan.API_URL))) + lan.API_URL.encode()


def encode_reply(reply: DhcpReply) -> bytes:
    parts = [
        _BOOTP.pack(
            BOOTREPLY,
            HTYPE_ETHERNET,
            6,
            0,
            reply.xid,
            0,
            reply.flags,
            socket.inet_aton(reply.ciaddr),
            socket.inet_aton(reply.yiaddr),
            _NO_ADDRESS,
            _NO_ADDRESS,
            bytes.fromhex(reply.chaddr.replace(":", "")),
            b"",
            DHCP_MAGIC,
        ),
        _TYPE_AND_SERVER.pack(OPT_MESSAGE_TYPE, 1, reply.msg_type, OPT_SERVER_ID, 4, socket.inet_aton(reply.server_ip)),
    ]
    if reply.msg_type == NAK:
        if reply.message:
            message = reply.message.encode()[:250]
            parts.append(bytes((OPT_MESSAGE, len(message))) + message)
    else:
        sub = reply.subnet
        assert sub is not None, "a reply other than NAK always names the device's /30"
        if reply.lease_seconds is not None:
            lease = reply.lease_seconds
            parts.append(
                _LEASE_TIMES.pack(
                    OPT_LEASE_TIME, 4, lease, OPT_RENEWAL_T1, 4, lease // 2, OPT_REBINDING_T2, 4, lease * 7 // 8
                )
            )
        gateway = socket.inet_aton(sub.gateway)
        parts.append(
            _ADDRESSES.pack(
                OPT_SUBNET_MASK,
                4,
                _SUBNET_MASK,
                OPT_ROUTER,
                4,
                gateway,
                OPT_DNS,
                4,
                gateway,
                OPT_BROADCAST,
                4,
                socket.inet_aton(sub.broadcast),
            )
        )
        # Every device is told where the portal's API is; it answers `captive: false` once it may go online.
        parts.append(_CAPTIVE_PORTAL)
    parts.append(_END)
    return b"".join(parts)
