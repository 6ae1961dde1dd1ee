"""What the controller's tests share: the home's devices and constants, a clock, a device joining
(DHCP through the router, and through a fake switch), packets through the switch and the switch's records
of them, OpenFlow messages as the switch reads them, and a resolver on loopback. Test modules import from
here, never from each other."""

from __future__ import annotations

import socket
import struct

import dnslib
from dhcp_frames import frame, reply_of
from dns_upstream import Upstream
from fakeoftable import ipv4
from os_ken.ofproto import ofproto_parser, ofproto_protocol
from os_ken.ofproto import ofproto_v1_3 as ofp
from scapy.layers.inet6 import ICMPv6ND_RS, IPv6
from scapy.layers.l2 import Ether

from homework_controller import flows
from homework_controller.api.server import TimedLock
from homework_controller.edge.lan import dns_server
from homework_controller.effects import AnswerDhcp
from homework_controller.wire import nd

WLAN = 1
ROUTER_MAC = "02:48:57:00:00:01"
LOCAL = flows.LOCAL

PHONE = "02:00:00:00:00:aa"
LAPTOP = "02:00:00:00:00:cc"
TABLET = "02:00:00:00:00:dd"
# The phone's DHCP client, and another client using its MAC (dhclient's defaults, another host name).
PHONE_CLIENT = [("hostname", b"phone"), ("param_req_list", [1, 28, 3, 6])]
OTHER_CLIENT = [("hostname", b"intruder"), ("param_req_list", [1, 28, 3, 6])]

ZOOM, WEB = "198.51.100.7", "198.51.100.80"

EF, AF41 = 46, 34


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


# ---- devices joining


class HoldsCounted(TimedLock):
    """The controller's lock, counting how often a wrapped call (`counting`) runs within each hold of it."""

    def __init__(self):
        super().__init__()
        self.per_hold: list[int] = []

    def __enter__(self):
        super().__enter__()
        self.per_hold.append(0)
        return self

    def counting(self, call):
        def counted(*args, **kwargs):
            self.per_hold[-1] += 1
            return call(*args, **kwargs)

        return counted


def lease(router, mac, client=()):
    """Join (DISCOVER, REQUEST; client: the DHCP client's own options) and return the device's address."""
    [offer] = [
        e for e in router.joining.on_dhcp(frame(mac, "discover", options=list(client))) if isinstance(e, AnswerDhcp)
    ]
    pkt, opts = reply_of(offer.data)
    router.joining.on_dhcp(
        frame(
            mac,
            "request",
            options=[("server_id", opts["server_id"]), ("requested_addr", pkt["BOOTP"].yiaddr), *client],
        )
    )
    return pkt["BOOTP"].yiaddr


def join(router, switch, mac, permit=True, client=()):
    """A device leases its /30 (and renews after a permit, as it would), every effect carried out by the
    switch; returns its address. client: the DHCP client's own options."""
    [offer] = [
        e for e in router.joining.on_dhcp(frame(mac, "discover", options=list(client))) if isinstance(e, AnswerDhcp)
    ]
    pkt, opts = reply_of(offer.data)
    ip = pkt["BOOTP"].yiaddr
    options = [("server_id", opts["server_id"]), ("requested_addr", ip), *client]
    switch.apply(router.joining.on_dhcp(frame(mac, "request", options=options)))
    if permit:
        switch.apply(router.decisions.permit(mac))
        switch.apply(router.joining.on_dhcp(frame(mac, "request", ciaddr=ip, src_ip=ip, options=list(client))))
    return ip


def permitted_phone(router):
    ip = lease(router, PHONE)
    router.decisions.permit(PHONE)
    router.joining.on_dhcp(frame(PHONE, "request", ciaddr=ip, src_ip=ip))
    return ip


# ---- packets through the switch


def up(ip, dst, proto=flows.PROTO_TCP, sport=40000, dport=443, src_mac=PHONE):
    return ipv4(WLAN, src_mac, ROUTER_MAC, ip, dst, proto, sport, dport)


def down(ip, src, proto=flows.PROTO_TCP, sport=443, dport=40000, dst_mac=PHONE):
    return ipv4(LOCAL, ROUTER_MAC, dst_mac, src, ip, proto, sport, dport)


def solicit_router(router, mac):
    """The device's router solicitation (from its link-local address): the router's answer."""
    rs = Ether(src=mac, dst="33:33:00:00:00:02") / IPv6(src="fe80::aa", dst="ff02::2") / ICMPv6ND_RS()
    return router.on_solicitation(WLAN, nd.parse(bytes(rs)))


def deliver(switch, packet):
    """Send a packet through the switch: where it went, besides the controller (which hears a device's ARP and
    neighbour discovery; nothing of its connections: test_decided_ahead)."""
    return [d for d in switch.send(packet) if d.port != flows.CONTROLLER]


def records(router, clock, totals, seconds=5.0):
    """The switch's records of `totals` ({flow: [packets, bytes]}) reach the collector, then a poll."""
    router.flow_events.on_flow_export(totals)
    clock.now += seconds
    return router.on_flow_stats([])


def mark_of(switch, packet):
    """The DSCP (and queue) a packet leaves with, and where it goes."""
    [out] = deliver(switch, packet)
    return out.packet.get("ip_dscp", 0), out.packet.get("queue", 0), out.port


# ---- OpenFlow messages as the switch reads them

DATAPATH = ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)


def wire(msg):
    """What the switch would read: the message serialised, then parsed again."""
    serialised(msg)
    return ofproto_parser.msg(DATAPATH, *ofproto_parser.header(msg.buf), msg.buf)


def serialised(msg):
    """The message, once os-ken has encoded it (os-ken parses only some kinds back)."""
    msg.datapath = DATAPATH
    msg.serialize()
    assert len(msg.buf) == msg.msg_len
    return msg


# ---- the resolver on loopback

WWW, WWW_IP = "www.example.test", "198.51.100.80"


def free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1."""
    while True:
        with (
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp,
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
        ):
            tcp.bind(("127.0.0.1", 0))
            try:
                udp.bind(tcp.getsockname())
            except OSError:
                continue
            return tcp.getsockname()[1]


class Resolver:
    """A DnsServer wired to a HomeRouter as the edge wires it (`service_calls.py`; the same lock type), on loopback.

    Every loopback client is taken for the permitted phone: the address check itself is the
    router core's, tested in test_dns_gating.
    """

    def __init__(self, router, device_ip, upstream: Upstream, **options):
        self.router, self.lock = router, TimedLock()
        self.port = free_port()
        self.learnt = []
        self.holds = []  # what each hold of the lock learnt
        self.server = dns_server.DnsServer(
            ("127.0.0.1", self.port), upstream.address, self.verdict, self.learn, **options
        )
        self.device_ip = device_ip
        self.server.start()

    def verdict(self, client_ip, query):
        with self.lock:
            return self.router.dns_query(self.device_ip, query)

    def learn(self, learnt, client_ip):
        with self.lock:
            self.learnt += learnt
            self.holds.append(len(learnt))
            self.router.dns_answer(learnt, self.device_ip if client_ip == "127.0.0.1" else client_ip)

    def udp(self, wire, timeout=2.0):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(timeout)
            s.sendto(wire, ("127.0.0.1", self.port))
            try:
                return s.recv(65535)
            except TimeoutError:
                return None

    def tcp(self, wire, timeout=2.0, source="127.0.0.1"):
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout, source_address=(source, 0)) as s:
            try:
                s.sendall(struct.pack("!H", len(wire)) + wire)
                head = s.recv(2, socket.MSG_WAITALL)
            except ConnectionResetError:  # closed with the message unread
                return None
            if len(head) < 2:
                return None
            return s.recv(struct.unpack("!H", head)[0], socket.MSG_WAITALL)

    def lookup(self, name, over_tcp=False):
        """(rcode name, addresses) as a device's stub resolver sees them."""
        wire = (self.tcp if over_tcp else self.udp)(dnslib.DNSRecord.question(name).pack())
        if wire is None:
            return "TIMEOUT", []
        reply = dnslib.DNSRecord.parse(wire)
        return dnslib.RCODE.get(reply.header.rcode), [str(rr.rdata) for rr in reply.rr]
