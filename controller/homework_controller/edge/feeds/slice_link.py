"""The household's connection to its ISP slice (isp-flowvisor), keeping `downlink.py`'s rules there.

One thread connects out to the slicer: TLS with the household's client certificate, the slicer's
certificate checked against the ISP's CA (or plain TCP, for tests: the slicer then knows a household
by its source address). It speaks OpenFlow 1.3 through os-ken's codec (HELLO, FEATURES, ECHO both
ways), and:

- on every (re)connect deletes every rule of ours in the slice (one non-strict delete by our
  cookie: the slicer keeps a departed household's rules, and ours may be stale) and installs the
  wanted set afresh;
- every `poll_s` takes a snapshot of the router's learnt flows, of what it marks ahead and of the
  prefix the ISP delegated (it changes when the ISP renumbers; the `snapshot`, `ahead` and
  `delegated` callables take the controller's lock; nothing else here does) and sends
  the difference between the rules wanted and those installed: an ADD for a new rule or new actions
  (same match and rule priority: it replaces the rule), a DELETE_STRICT for one no longer wanted;
- counts and logs the slicer's errors. A refused ADD is not sent again while it stays wanted in
  this session (no error storm every second); it is retried after a reconnect. A refused ADD that
  was to replace a rule (a changed priority) deletes that rule: the old queue is not what the
  household wants any more, and the flow falls back to the household's Normal share.

A lost connection is retried with exponential backoff. While it is down, the slicer keeps our rules
(its default for a departed household), so downlink priorities hold through a router restart.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable

from os_ken.ofproto import ofproto_parser, ofproto_protocol
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from ... import flows
from ...flows import openflow
from ...policy import downlink

LOG = logging.getLogger("homework.slice")

DATAPATH = ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)  # what os-ken's codec needs of a datapath
HEADER_SIZE = 8
CONNECT_TIMEOUT_S = 10.0
SEND_TIMEOUT_S = 30.0  # the slicer's back-pressure may hold a send this long before we call it gone
FIRST_BACKOFF_S = 0.5


class ProtocolError(Exception):
    """The slicer said something that ends the session (not OpenFlow 1.3, a broken frame)."""


def tls_context(cert: str, key: str, ca: str) -> ssl.SSLContext:
    """The household's side of the slicer's TLS: its client certificate, the slicer's checked against the ISP's CA."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


class _Channel:
    """One OpenFlow session's socket: os-ken messages out, frames in."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""
        self.xid = 0

    def send(self, msg) -> int:
        self.xid = (self.xid + 1) & 0xFFFFFFFF
        msg.datapath, msg.xid = DATAPATH, self.xid
        msg.serialize()
        self.sock.settimeout(SEND_TIMEOUT_S)
        self.sock.sendall(bytes(msg.buf))
        return self.xid

    def read(self, timeout: float) -> bytes | None:
        """The next whole frame, or None if none came within timeout."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buffer) >= HEADER_SIZE:
                length = int.from_bytes(self.buffer[2:4], "big")
                if length < HEADER_SIZE:
                    raise ProtocolError(f"frame of length {length}")
                if len(self.buffer) >= length:
                    frame, self.buffer = self.buffer[:length], self.buffer[length:]
                    return frame
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return None
            if not chunk:
                raise ConnectionError("the slicer closed the connection")
            self.buffer += chunk


class SliceLink:
    def __init__(
        self,
        host: str,
        port: int,
        snapshot: Callable[[], Iterable[downlink.Connection]],
        public_addresses: Iterable[str],
        tls: ssl.SSLContext | None,
        *,
        ahead: Callable[[], Iterable[downlink.Ahead]] = lambda: (),
        delegated: Callable[[], ipaddress.IPv6Network | None] = lambda: None,
        source_address: str | None = None,
        poll_s: float = 1.0,
        echo_s: float = 5.0,
        max_backoff_s: float = 16.0,
    ):
        self.host, self.port = host, port
        self.snapshot, self.ahead, self.delegated = snapshot, ahead, delegated
        self.public_addresses = tuple(public_addresses)
        self.tls = tls
        self.source_address = source_address  # plain TCP: the slicer knows a household by it
        self.poll_s, self.echo_s, self.max_backoff_s = poll_s, echo_s, max_backoff_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.connected = False
        self.connects = 0
        self.errors = 0
        self.last_error = ""  # the slicer's last OpenFlow error
        self.last_failure = ""  # why the last connection failed or ended
        self.datapath_id: int | None = None
        # This session's rules: (table, rule priority, match) -> the rule sent; ADDs the slicer has
        # refused; ADDs not yet confirmed by a barrier (xid -> the rule and the one it replaces), to
        # tell which one an error is about and what is left on the slicer then.
        self.installed: dict[tuple, flows.FlowRule] = {}
        self.refused: set[flows.FlowRule] = set()
        self.unconfirmed: dict[int, tuple[flows.FlowRule, flows.FlowRule | None]] = {}

    def start(self) -> SliceLink:
        self._thread = threading.Thread(target=self.run_forever, name="slice-link", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=SEND_TIMEOUT_S)

    def health(self) -> dict:
        return {
            "slicer": f"{self.host}:{self.port}",
            "tls": self.tls is not None,
            "connected": self.connected,
            "connects": self.connects,
            "datapath_id": self.datapath_id,
            "rules_installed": len(self.installed),
            "rules_refused": len(self.refused),
            "errors": self.errors,
            "last_error": self.last_error,
            "last_failure": self.last_failure,
        }

    # ---- the connection

    def run_forever(self) -> None:
        backoff = FIRST_BACKOFF_S
        while not self._stop.is_set():
            try:
                with self._connect() as sock:
                    channel = _Channel(sock)
                    self._handshake(channel)
                    backoff = FIRST_BACKOFF_S  # it worked: the next outage starts from a short wait again
                    self._serve(channel)
            except (OSError, ProtocolError) as exc:  # ssl.SSLError and socket timeouts are OSErrors
                failure = str(exc) or type(exc).__name__
                # Said once, not at every retry of a long outage.
                log = LOG.warning if failure != self.last_failure else LOG.debug
                log("slice %s:%d: %s; retrying in %.1f s", self.host, self.port, failure, backoff)
                self.last_failure = failure
            except Exception as exc:  # a bug here must not end downlink priorities for good: start afresh
                LOG.exception("slice %s:%d: the link failed", self.host, self.port)
                self.last_failure = repr(exc)
            finally:
                self.connected = False
            self._stop.wait(backoff)
            backoff = min(backoff * 2, self.max_backoff_s)

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(
            (self.host, self.port),
            timeout=CONNECT_TIMEOUT_S,
            source_address=(self.source_address, 0) if self.source_address else None,
        )
        if self.tls is None:
            return sock
        try:
            return self.tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise

    def _handshake(self, channel: _Channel) -> None:
        channel.send(parser.OFPHello(DATAPATH))
        hello = self._wait_for(channel, ofp.OFPT_HELLO)
        # The slicer offers 1.3 in its HELLO's header (with or without a version bitmap).
        if ofproto_parser.header(hello)[0] < ofp.OFP_VERSION:
            raise ProtocolError(f"the slicer speaks OpenFlow version {ofproto_parser.header(hello)[0]}, not 1.3")
        channel.send(parser.OFPFeaturesRequest(DATAPATH))
        self.datapath_id = _decode(self._wait_for(channel, ofp.OFPT_FEATURES_REPLY)).datapath_id
        # A fresh start: whatever an earlier session left goes, then the wanted set goes in.
        self.installed, self.refused, self.unconfirmed = {}, set(), {}
        channel.send(openflow.delete_cookie(downlink.SLICE_COOKIE))
        self.connected = True
        self.connects += 1
        LOG.info("slice %s:%d connected (datapath %016x)", self.host, self.port, self.datapath_id)

    def _wait_for(self, channel: _Channel, msg_type: int) -> bytes:
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while time.monotonic() < deadline:
            frame = channel.read(deadline - time.monotonic())
            if frame is None:
                break
            if ofproto_parser.header(frame)[1] == msg_type:
                return frame
            self._handle(channel, frame)
        raise ProtocolError(f"no {ofp.ofp_msg_type_to_str(msg_type)} from the slicer")

    def _serve(self, channel: _Channel) -> None:
        last_heard = time.monotonic()
        echo_sent = False
        while not self._stop.is_set():
            wanted = downlink.wanted_rules(self.snapshot(), self.public_addresses, self.ahead(), self.delegated())
            self._reconcile(channel, wanted)
            next_poll = time.monotonic() + self.poll_s
            while (left := next_poll - time.monotonic()) > 0:
                frame = channel.read(left)
                if frame is None:
                    break
                last_heard, echo_sent = time.monotonic(), False
                self._handle(channel, frame)
            silent = time.monotonic() - last_heard
            if silent > 3 * self.echo_s:
                raise TimeoutError(f"the slicer has been silent for {silent:.0f} s")
            if silent > self.echo_s and not echo_sent:
                channel.send(parser.OFPEchoRequest(DATAPATH))
                echo_sent = True

    # ---- rules

    def _reconcile(self, channel: _Channel, wanted: frozenset[flows.FlowRule]) -> None:
        self.refused &= wanted  # a refused rule that is wanted again later is tried again
        wanted_keys = {_key(rule) for rule in wanted}
        sent = False
        for key in [k for k in self.installed if k not in wanted_keys]:
            channel.send(openflow.delete_strict(self.installed.pop(key)))
            sent = True
        for rule in sorted(wanted - self.refused, key=repr):
            if self.installed.get(_key(rule)) != rule:
                replaced = self.installed.get(_key(rule))
                self.unconfirmed[channel.send(openflow.flow_mod(rule))] = (rule, replaced)
                self.installed[_key(rule)] = rule
                sent = True
        if sent:
            # Errors for what came before a barrier arrive before its reply: then the ADDs are settled.
            channel.send(parser.OFPBarrierRequest(DATAPATH))

    def _handle(self, channel: _Channel, frame: bytes) -> None:
        _, msg_type, _, xid = ofproto_parser.header(frame)
        if msg_type == ofp.OFPT_ECHO_REQUEST:
            channel.send(parser.OFPEchoReply(DATAPATH, data=frame[HEADER_SIZE:]))
        elif msg_type == ofp.OFPT_ERROR:
            self._on_error(channel, xid, _decode(frame))
        elif msg_type == ofp.OFPT_BARRIER_REPLY:
            self.unconfirmed = {x: sent for x, sent in self.unconfirmed.items() if x > xid}
        # Anything else (echo replies, port status) says only that the slicer is there.

    def _on_error(self, channel: _Channel, xid: int, error) -> None:
        self.errors += 1
        rule, replaced = self.unconfirmed.pop(xid, (None, None))
        what = f"refused {rule}" if rule is not None else f"error for message {xid}"
        self.last_error = (
            f"{what}: {ofp.ofp_error_type_to_str(error.type)}/" f"{ofp.ofp_error_code_to_str(error.type, error.code)}"
        )
        LOG.error("slice %s:%d %s", self.host, self.port, self.last_error)
        if rule is not None:
            self.refused.add(rule)
            if self.installed.get(_key(rule)) == rule:
                del self.installed[_key(rule)]
                if replaced is not None:
                    channel.send(openflow.delete_strict(replaced))


def _key(rule: flows.FlowRule) -> tuple:
    return rule.table, rule.priority, rule.match


def _decode(frame: bytes):
    """os-ken's message for a frame of fixed layout (ERROR, FEATURES_REPLY); nothing with lists in it
    is decoded, so a garbled list cannot send os-ken's parsers round in circles."""
    try:
        return ofproto_parser.msg(DATAPATH, *ofproto_parser.header(frame), frame)
    except Exception as exc:  # os-ken raises anything from struct.error to KeyError on garbage
        raise ProtocolError(f"undecodable message from the slicer: {exc!r}") from None
