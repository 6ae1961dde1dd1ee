"""The controller's DHCP socket on the router's LAN interface (the switch's LOCAL port).

The switch sends DHCP from the air to the LAN interface (base_flows.base_rules), where this raw
socket reads it; answers go back the same way and the switch passes them to the wireless port.
DHCP is the one thing a hundred devices ask at the same moment (a power cut), and a packet-in
and packet-out per message cost more than the answer itself (docs/PERFORMANCE.md, dhcp_storm).

A raw socket, not a UDP one: the policy checks the frame's source MAC against the client's
hardware address, and a client without an address can only be answered at layer 2. A classic BPF
filter keeps everything but DHCP to the server port out of the socket, so the rest of the
LAN's traffic through the router's stack costs it nothing.

Answers are decided under the controller's lock, so they are not sent there (`outbox.py` says why): they
are handed to a thread of their own (`answers`), which sends them in the order decided.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import socket
import struct
from collections.abc import Callable

from ... import flows
from ...wire import packets
from ..outbox import Outbox
from ..supervised import SocketService, Supervisor

LOG = logging.getLogger(__name__)

ETH_P_IP = 0x0800
PACKET_OUTGOING = 4  # linux/if_packet.h: a frame this host sent, which the socket also sees
MAX_FRAME = 4096  # larger than any DHCP message a client may send on one Ethernet frame
SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SOL_PACKET, PACKET_STATISTICS = 263, 6
# A household's devices all asking at once (the newcomers' meter lets 250 frames through in a
# burst) must fit while the controller is busy answering: the default (~200 KB, about 90 of
# these frames as the kernel accounts them) dropped half of a 100-device storm.
RECEIVE_BUFFER = 4 << 20
# Answers waiting for their thread, at most: beyond that (a storm of thousands while the LAN interface takes
# nothing) one is dropped, counted, and its client asks again.
MAX_WAITING_ANSWERS = 1024

# IPv4, UDP, first fragment, destination port 67 (tcpdump -dd 'udp dst port 67' for IPv4 only).
_BPF_UDP_DST_PORT_67 = (
    (0x28, 0, 0, 12),  # ldh [12]            ethertype
    (0x15, 0, 8, ETH_P_IP),  # jeq IPv4, else drop
    (0x30, 0, 0, 23),  # ldb [23]            IP protocol
    (0x15, 0, 6, flows.PROTO_UDP),  # jeq UDP, else drop
    (0x28, 0, 0, 20),  # ldh [20]            flags and fragment offset
    (0x45, 4, 0, 0x1FFF),  # jset offset: a later fragment, drop
    (0xB1, 0, 0, 14),  # ldxb 4*([14]&0xf)   IP header length
    (0x48, 0, 0, 16),  # ldh [x+16]          UDP destination port
    (0x15, 0, 1, flows.DHCP_SERVER_PORT),  # jeq 67, else drop
    (0x06, 0, 0, MAX_FRAME),  # ret: keep
    (0x06, 0, 0, 0),  # ret: drop
)


def _attach_filter(sock: socket.socket, program) -> None:
    code = b"".join(struct.pack("HBBI", *insn) for insn in program)
    buf = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HL", len(program), ctypes.addressof(buf))  # struct sock_fprog
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)  # the kernel copies the program


class DhcpPort:
    """Reads clients' DHCP frames from the LAN interface and sends the router's answers into it.

    `start(deliver)` serves for ever: each client frame, parsed outside the controller's lock (a
    malformed one costs only itself), goes to `deliver`. A supervisor reopens the socket if its
    thread dies (`health()`)."""

    def __init__(self, iface: str):
        self.iface = iface
        self.malformed = 0
        self._dropped = 0  # by the kernel: the socket's buffer was full
        self.answers: Outbox[bytes] = Outbox(self._send_now, "dhcp-answers", MAX_WAITING_ANSWERS)
        self._deliver: Callable[[packets.Frame], None] | None = None
        self.service = SocketService("socket", self._open, self._serve)
        self.supervisor = Supervisor("dhcp", [self.service])
        # Clients renewing send to their gateway's address: without a socket on port 67 the router's
        # stack would answer each renewal with "port unreachable". This one only holds the port;
        # the packet socket reads the frames.
        self.port_holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.port_holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.port_holder.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        try:
            self.port_holder.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, iface.encode())
            self.port_holder.bind(("0.0.0.0", flows.DHCP_SERVER_PORT))
        except OSError as exc:
            LOG.warning(
                "cannot hold UDP port %d on %s (%s): renewals may get 'port unreachable'",
                flows.DHCP_SERVER_PORT,
                iface,
                exc,
            )

    def start(self, deliver: Callable[[packets.Frame], None]) -> None:
        self._deliver = deliver
        self.supervisor.start()

    def health(self) -> dict:
        return self.supervisor.health()

    def dropped(self) -> int:
        """Frames the kernel dropped because the socket's buffer was full, since the start."""
        sock = self.service.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # closed just now: its supervisor opens another
                _, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
                self._dropped += drops  # reading the statistics resets them
        return self._dropped

    def _open(self) -> socket.socket:
        # Protocol 0 receives nothing until bound: the filter is in place before any frame is queued.
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            _attach_filter(sock, _BPF_UDP_DST_PORT_67)
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)  # beyond rmem_max
            except PermissionError:  # without CAP_NET_ADMIN: as much as rmem_max allows
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
            sock.bind((self.iface, ETH_P_IP))
        except OSError:
            sock.close()
            raise
        return sock

    def _serve(self, sock: socket.socket) -> None:
        assert self._deliver is not None
        while True:
            data, address = sock.recvfrom(MAX_FRAME)
            if address[2] == PACKET_OUTGOING:
                continue
            try:
                frame = packets.parse(data)
            except packets.MalformedFrame as exc:
                self.malformed += 1
                LOG.debug("dropped malformed DHCP frame: %s", exc)
                continue
            self._deliver(frame)

    def send(self, frame: bytes) -> None:
        """Hand an answer over to be sent: at once, without waiting for the interface."""
        self.answers.put(frame)

    def _send_now(self, frame: bytes) -> None:
        sock = self.service.sock
        try:
            if sock is None:
                raise OSError("not started")
            sock.send(frame)
        except OSError as exc:  # the interface is going away or coming back: the client asks again
            LOG.warning("DHCP answer not sent on %s: %s", self.iface, exc)
