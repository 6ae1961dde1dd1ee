"""The router's DHCP server: per-device /30 leases, decided by pure functions.

`serve` decides, from a request (`dhcp_wire.decode_request` reads it off the wire) and what the
router knows of the device, what to answer (`dhcp_wire.encode_reply` writes it) and how the device's
record changes. Nothing here touches a socket, a switch or a clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..effects import AnswerDhcp
from ..flows import DHCP_CLIENT_PORT, DHCP_SERVER_PORT
from ..model import Device, State
from ..wire import packets
from ..wire.dhcp_wire import (
    ACK,
    BROADCAST_FLAG,
    BROADCAST_IP,
    BROADCAST_MAC,
    DECLINE,
    DISCOVER,
    INFORM,
    NAK,
    OFFER,
    RELEASE,
    REQUEST,
    ZERO_IP,
    DhcpReply,
    DhcpRequest,
    encode_reply,
)
from ..wire.lan import ROUTER_FALLBACK_IP, Subnet


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


def answer(outcome: Outcome, router_mac: str) -> AnswerDhcp | None:
    """The outcome's reply as the router's LAN interface sends it into the switch; after the rule changes
    the request brings if it lets the device use its address (an ACK: its first DNS query must find its
    rules in place, the forwarding ones or, held back, the captive portal's), else before them
    (`effects.AnswerDhcp`)."""
    reply = outcome.reply
    if reply is None:
        return None
    device = outcome.device
    lets_it_use_the_address = outcome.lease_action in ("granted", "renewed") and device is not None
    frame = packets.udp_frame(
        router_mac,
        reply.dst_mac,
        reply.server_ip,
        reply.dst_ip,
        DHCP_SERVER_PORT,
        DHCP_CLIENT_PORT,
        encode_reply(reply),
    )
    return AnswerDhcp(
        frame,
        after_rules=lets_it_use_the_address,
        held_back=lets_it_use_the_address and device is not None and not device.forwards,
    )


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
