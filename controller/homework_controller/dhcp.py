"""The router's DHCP server: per-device /30 leases, decided by pure functions.

`decode_request` turns a UDP payload into a `DhcpRequest`; `serve` decides,
from the request and what the router knows of the device, what to answer and
how the device's record changes; `encode_reply` builds the wire message. Both
ends are packed and unpacked with struct: the message is a fixed header and a
tag-length-value list, and a hundred devices asking at once made dpkt's
generic packet objects cost more than the decisions. Nothing here touches a
socket, a switch or a clock.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from . import portal
from .model import ROUTER_FALLBACK_IP, Device, State, Subnet

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
    # What tells one DHCP client from another using the same MAC (`clones`): the options it asks
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


@dataclass(frozen=True)
class LeasePolicy:
    pending_seconds: int = 30
    permitted_seconds: int = 3600

    def seconds_for(self, state: State) -> int:
        return self.permitted_seconds if state is State.PERMITTED else self.pending_seconds


@dataclass
class Outcome:
    """What serving one request decided."""

    reply: DhcpReply | None
    device: Device | None  # the device's record after this request (None: unknown and untouched)
    events: list[tuple[str, str]] = field(default_factory=list)  # (kind, message) for the household
    log: str = ""
    lease_action: str | None = None  # "granted", "renewed" or "released", for the Leases log


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
_CAPTIVE_PORTAL = bytes((OPT_CAPTIVE_PORTAL, len(portal.API_URL))) + portal.API_URL.encode()


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


def _destination(req: DhcpRequest, msg_type: int, yiaddr: str) -> tuple[str, str]:
    """Where a reply goes, per RFC 2131 section 4.1 (no relay agents on a home LAN)."""
    if msg_type == NAK or req.flags & BROADCAST_FLAG:
        return BROADCAST_IP, BROADCAST_MAC
    if req.ciaddr != ZERO_IP:
        return req.ciaddr, req.chaddr
    return yiaddr, req.chaddr


def _reply(
    req: DhcpRequest,
    msg_type: int,
    subnet: Subnet | None,
    lease: int | None,
    message: str = "",
    yiaddr: str | None = None,
) -> DhcpReply:
    yiaddr = yiaddr if yiaddr is not None else (subnet.device_ip if subnet else ZERO_IP)
    dst_ip, dst_mac = _destination(req, msg_type, yiaddr)
    return DhcpReply(
        msg_type=msg_type,
        xid=req.xid,
        flags=req.flags,
        chaddr=req.chaddr,
        ciaddr=req.ciaddr if msg_type == ACK else ZERO_IP,
        yiaddr=yiaddr if msg_type != NAK else ZERO_IP,
        server_ip=subnet.gateway if subnet else ROUTER_FALLBACK_IP,
        dst_ip=dst_ip,
        dst_mac=dst_mac,
        lease_seconds=lease,
        subnet=subnet,
        message=message,
    )


def serve(
    req: DhcpRequest, device: Device | None, now: float, policy: LeasePolicy, allocate: Callable[[], Subnet]
) -> Outcome:
    """Decide the answer to one request.

    `device` is the router's record for req.chaddr (None if never seen);
    `allocate` hands out a fresh /30 and is only called for a new device.
    Denied devices get no OFFER (so they do not churn through DISCOVERs) and a
    NAK to any REQUEST (so they drop an address they still hold at once).
    Blacklisted devices never reach this function: the switch drops their frames.
    """
    if device is not None and device.state is State.BLACKLISTED:
        return Outcome(None, device, log="blacklisted: ignored")
    if device is not None:
        seen: dict = {"last_seen": now}
        if req.hostname:
            seen["hostname"] = req.hostname
        if req.vendor_class:
            seen["vendor_class"] = req.vendor_class
        device = device.with_(**seen)

    if req.msg_type == DISCOVER:
        return _discover(req, device, now, policy, allocate)
    if req.msg_type == REQUEST:
        return _request(req, device, now, policy)
    if req.msg_type == RELEASE:
        if device is None or device.subnet is None or req.ciaddr != device.subnet.device_ip:
            return Outcome(None, device, log="release for an address it does not hold: ignored")
        return Outcome(None, device.with_(lease_expires=0.0), log="released", lease_action="released")
    if req.msg_type == DECLINE:
        # Each /30 belongs to one device, so a conflict means another host is
        # squatting on it; source-address rules already keep the squatter out.
        # The device keeps its /30 (same MAC, same /30) and the household is told.
        if device is None:
            return Outcome(None, None, log="decline from unknown device: ignored")
        return Outcome(
            None,
            device,
            events=[
                ("address-conflict", f"{device.mac} reports its address {req.requested_ip} in use by another host")
            ],
            log="declined",
        )
    if req.msg_type == INFORM:
        if (
            device is None
            or device.subnet is None
            or req.ciaddr != device.subnet.device_ip
            or device.state in (State.DENIED, State.BLACKLISTED)
        ):
            return Outcome(None, device, log="inform from a device without that lease: ignored")
        # INFORM answers carry configuration only: no address, no lease time.
        return Outcome(_reply(req, ACK, device.subnet, None, yiaddr=ZERO_IP), device, log="informed")
    return Outcome(None, device, log=f"{req.name} is not a client message: ignored")


def _discover(req, device, now, policy, allocate) -> Outcome:
    events = []
    if device is None:
        device = Device(
            mac=req.chaddr,
            state=State.PENDING,
            subnet=allocate(),
            hostname=req.hostname,
            vendor_class=req.vendor_class,
            first_seen=now,
            last_seen=now,
        )
        label = req.hostname or req.vendor_class or "unnamed device"
        events.append(("new-device", f"{label} ({req.chaddr}) asks to join"))
    elif device.subnet is None:
        device = device.with_(subnet=allocate())  # whitelisted before it ever appeared
    if device.state is State.DENIED:
        return Outcome(None, device, events, log="denied: no offer")
    lease = policy.seconds_for(device.state)
    return Outcome(_reply(req, OFFER, device.subnet, lease), device, events, log="offered")


def _request(req, device, now, policy) -> Outcome:
    if req.server_id is not None:  # SELECTING: answering some server's OFFER
        if device is None or device.subnet is None or req.server_id != device.subnet.gateway:
            return Outcome(None, device, log="client selected another server: ignored")
        wanted = req.requested_ip
    elif req.ciaddr != ZERO_IP:  # RENEWING or REBINDING
        wanted = req.ciaddr
    else:  # INIT-REBOOT: checking an address it remembers
        wanted = req.requested_ip
    if device is None or device.subnet is None:
        return Outcome(
            _reply(req, NAK, None, None, "no lease known for this device"), device, log="unknown device: nak"
        )
    if device.state is State.DENIED:
        return Outcome(
            _reply(req, NAK, device.subnet, None, "refused by the household"),
            device.with_(lease_expires=0.0),
            log="denied: nak",
        )
    if wanted != device.subnet.device_ip:
        return Outcome(
            _reply(req, NAK, device.subnet, None, "wrong address for this device"),
            device,
            log=f"asked for {wanted}: nak",
        )
    lease = policy.seconds_for(device.state)
    action = "renewed" if device.lease_active(now) else "granted"
    device = device.with_(lease_expires=now + lease)
    return Outcome(_reply(req, ACK, device.subnet, lease), device, log=f"acked {lease}s", lease_action=action)
