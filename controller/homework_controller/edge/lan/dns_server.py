"""The router's resolver: DNS from devices, over UDP and TCP, gated per device.

The router's stack redirects every DNS packet arriving from the LAN (whatever address
the device sent it to), over IPv4 and IPv6, to this server, so a device that ignores the
DHCP-given (or advertised) resolver is still answered here. The server listens on the LAN
interface only, with a socket per family. An IPv6 device is its /64 (it may use any address
there): its limits below are its /64's. What to do with
each query is the router core's decision (`verdict(client_ip, query)`, a cheap call under
the controller's lock); everything that touches untrusted bytes happens here, outside that
lock: the size and header checks and the parse (`dns_rules.parse_query`), building the
answer, relaying it upstream, and reading the upstream answer (`dns_rules.inspect_answer`:
rebind protection, and the addresses it teaches, reported with `learn(learnt, client_ip)`).

Nothing one message does may stop the service: every failure costs that query only (it is
counted, logged at most every few seconds, and answered FORMERR where a reply can be
built), and a supervisor restarts a service thread that dies anyway (`health()`).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import struct
import threading
import time
from collections import Counter

import dnslib

from ...policy import dns_rules
from ..supervised import SocketService, Supervisor

LOG = logging.getLogger(__name__)

UPSTREAM_TIMEOUT_S = 3.0
MAX_MESSAGE = 65535
MAX_IN_FLIGHT = 64  # relays waiting for upstream at once...
MAX_IN_FLIGHT_PER_CLIENT = 16  # ...of which one device may hold this many
MAX_TCP_CLIENTS = 20  # connections at once (dnsmasq's limit)...
MAX_TCP_PER_CLIENT = 4  # ...of which one device may hold this many
DEVICE_QPS, DEVICE_BURST = 100, 200  # queries a second one device may send (UDP and TCP together), and at once
TCP_MESSAGE_S = 5.0  # a connection must deliver each whole query within this (idle or slow: closed)
POLL_S = 0.5  # service loops wake this often to notice close()
ERROR_LOG_EVERY_S = 10.0
RCODE_SERVFAIL = 2
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)  # Linux's value; Python defines the name from 3.12
PKTINFO = struct.Struct("=I4s4s")  # struct in_pktinfo: ifindex, spec_dst (source to use), addr (header dst)
PKTINFO6 = struct.Struct("=16sI")  # struct in6_pktinfo: addr (header dst; the source to use), ifindex
LENGTH = struct.Struct("!H")


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    """n bytes, all before deadline (a monotonic time): a slow sender is as bad as a silent one."""
    data = b""
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("too slow")
        sock.settimeout(left)
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("peer closed")
        data += chunk
    return data


def client_key(client_ip: str) -> str:
    """Whose query it is, for the per-device limits: an IPv4 address, or an IPv6 address's /64 (a device
    has a /64 of its own: each of its addresses is not another device)."""
    try:
        address = ipaddress.ip_address(client_ip.split("%")[0])
    except ValueError:
        return client_ip
    if address.version == 6:
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return client_ip


def _reply_from(ancillary) -> tuple[int, int, bytes] | None:
    """The control message that sends an answer from the address its query was sent to (see `_open_udp`)."""
    for level, kind, data in ancillary:
        if level == socket.IPPROTO_IP and kind == IP_PKTINFO:
            return level, kind, PKTINFO.pack(0, PKTINFO.unpack(data[: PKTINFO.size])[2], bytes(4))
        if level == socket.IPPROTO_IPV6 and kind == socket.IPV6_PKTINFO:
            return level, kind, data[: PKTINFO6.size]  # that address, out of the interface it came in on
    return None


def _error_reply(wire: bytes, rcode: int) -> bytes | None:
    """The header of the query with QR set and rcode (SERVFAIL when upstream gave nothing usable)."""
    formerr = dns_rules.format_error(wire)
    return None if formerr is None else formerr[:3] + bytes([formerr[3] & 0xF0 | rcode]) + formerr[4:]


class DnsServer:
    """The resolver's sockets. `listen` is (address, port), `listen6` the same over IPv6 (None: no
    IPv6 sockets); `interface` (the LAN's) confines them to packets that arrived there
    (SO_BINDTODEVICE), whatever address they were sent to."""

    def __init__(
        self,
        listen: tuple[str, int],
        upstream: tuple[str, int],
        verdict,
        learn,
        *,
        interface: str | None = None,
        rebind_allowed: tuple[str, ...] = (),
        listen6: tuple[str, int] | None = None,
    ):
        self.listen, self.listen6, self.upstream, self.interface = listen, listen6, upstream, interface
        self.verdict, self.learn = verdict, learn
        self.rebind_allowed = rebind_allowed
        self.counters = Counter(
            {
                name: 0
                for name in (
                    "dns_errors",
                    "dns_overload_dropped",
                    "dns_tcp_refused",
                    "dns_tcp_closed_slow",
                    "dns_rebind_blocked",
                    "dns_upstream_failed",
                    "dns_upstream_unreadable",
                    "dns_rate_limited",
                )
            }
        )
        self._guard = threading.Lock()  # this server's own bookkeeping, never the controller's lock
        self._relays: Counter[str] = Counter()
        self._tcp_clients: Counter[str] = Counter()
        self._allowance: dict[str, tuple[float, float]] = {}  # client -> (queries it may still send, when)
        self._last_error_log = 0.0
        services = [
            SocketService("udp", lambda: self._open_udp(socket.AF_INET), self._serve_udp),
            SocketService("tcp", lambda: self._open_tcp(socket.AF_INET), self._serve_tcp),
        ]
        if listen6 is not None:
            services += [
                SocketService("udp6", lambda: self._open_udp(socket.AF_INET6), self._serve_udp),
                SocketService("tcp6", lambda: self._open_tcp(socket.AF_INET6), self._serve_tcp),
            ]
        self.supervisor = Supervisor("resolver", services)
        self.services = self.supervisor.services

    # -- lifecycle

    def start(self) -> None:
        self.supervisor.start()

    def close(self) -> None:
        self.supervisor.stop(join_s=POLL_S * 4)

    def health(self) -> dict:
        """E.g. {"udp": "running", "tcp": "running", "restarts": 0} (and "udp6", "tcp6" with IPv6)."""
        return self.supervisor.health()

    def _bound(self, family: int, kind: int) -> socket.socket:
        sock = socket.socket(family, kind)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self.interface:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, self.interface.encode())
            address = self.listen
            if family == socket.AF_INET6:
                assert self.listen6 is not None, "IPv6 sockets only with an IPv6 address to listen on"
                address = self.listen6
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # IPv4 is the other socket's
            sock.bind(address)
            sock.settimeout(POLL_S)
        except OSError:
            sock.close()
            raise
        return sock

    def _failed(self, what: str, client_ip: str) -> None:
        """A query failed in a way no check foresaw: count it, and log now and then (a device can repeat it)."""
        self.counters["dns_errors"] += 1
        now = time.monotonic()
        if now - self._last_error_log >= ERROR_LOG_EVERY_S:
            self._last_error_log = now
            LOG.warning(
                "resolver: %s from %s failed (%d so far)", what, client_ip, self.counters["dns_errors"], exc_info=True
            )

    def _within_rate(self, client_ip: str) -> bool:
        """A token bucket per device: a flood of queries (random names, garbage) costs the device
        its own excess, before any parsing, relaying or locking."""
        client = client_key(client_ip)
        now = time.monotonic()
        with self._guard:
            tokens, then = self._allowance.get(client, (DEVICE_BURST, now))
            tokens = min(DEVICE_BURST, tokens + (now - then) * DEVICE_QPS)
            if len(self._allowance) > 4096:  # forget devices that have been quiet long enough to be full
                self._allowance = {
                    c: (t, w) for c, (t, w) in self._allowance.items() if t + (now - w) * DEVICE_QPS < DEVICE_BURST
                }
            if tokens < 1:
                self._allowance[client] = (tokens, now)
                self.counters["dns_rate_limited"] += 1
                return False
            self._allowance[client] = (tokens - 1, now)
            return True

    def _decide(self, client_ip: str, wire: bytes, over_tcp: bool):
        """Parse (here, outside the controller's lock), then ask the core. (verdict, query or None)."""
        try:
            query = dns_rules.parse_query(wire, over_tcp)
        except dns_rules.MalformedQuery as exc:
            LOG.debug("malformed query from %s: %s", client_ip, exc)
            query = None
        return self.verdict(client_ip, query), query

    def _answer(self, verdict, query: dns_rules.Query | None, wire: bytes) -> bytes | None:
        """The reply the server gives itself, without asking upstream (None: no reply)."""
        if verdict.action == "malformed":
            return dns_rules.format_error(wire)
        if verdict.action == "block":
            assert query is not None, "only a parsed query can be blocked"
            return dns_rules.refusal(query)
        if verdict.action == "portal":
            assert query is not None, "only a parsed query names a probe"
            return dns_rules.probe_answer(query.record)
        return None

    def _read_upstream(self, answer: bytes | None, query: dns_rules.Query, wire: bytes, client_ip: str) -> bytes | None:
        """What the device gets for an upstream answer: it as is, a refusal if it rebinds, SERVFAIL if unusable."""
        if answer is None:
            self.counters["dns_upstream_failed"] += 1
            return _error_reply(wire, RCODE_SERVFAIL)
        inspected = dns_rules.inspect_answer(answer, query.qname, self.rebind_allowed)
        if not inspected.readable:
            self.counters["dns_upstream_unreadable"] += 1
            return _error_reply(wire, RCODE_SERVFAIL)
        if inspected.rebinds:
            self.counters["dns_rebind_blocked"] += 1
            LOG.info("rebind protection: %s answered with a private address; refused", query.qname)
            return dns_rules.refusal(
                query, "private address for a public name (rebind protection)", dns_rules.EDE_FILTERED
            )
        for part in inspected.in_turns():
            self.learn(part, client_ip)
        return answer

    # -- UDP: one thread reads and answers; relays run on their own threads, bounded

    def _open_udp(self, family: int) -> socket.socket:
        sock = self._bound(family, socket.SOCK_DGRAM)
        # The redirect rewrote each query's destination to one address of the LAN interface;
        # the answer must leave from that same address or conntrack cannot undo the rewrite.
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
        else:
            sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
        # Room for bursts (a household's devices all waking up): the rate limit, not the kernel, drops a flood.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        return sock

    def _serve_udp(self, sock: socket.socket):
        while not self.supervisor.stopping:
            try:
                wire, ancillary, _, client = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(PKTINFO6.size))
            except TimeoutError:
                continue
            reply_from = _reply_from(ancillary)
            if reply_from is None:
                continue
            if not self._within_rate(client[0]):
                continue
            verdict = None
            try:
                verdict, query = self._decide(client[0], wire, over_tcp=False)
                if verdict.action == "allow":
                    self._relay_udp_later(sock, wire, query, client, reply_from)
                else:
                    self._send_udp(sock, self._answer(verdict, query, wire), client, reply_from)
            except Exception:  # whatever one query does costs that query only
                self._failed("a query over UDP", client[0])
                if verdict is not None and verdict.action != "drop":
                    self._send_udp(sock, dns_rules.format_error(wire), client, reply_from)

    @staticmethod
    def _send_udp(sock, data: bytes | None, client, reply_from: tuple[int, int, bytes]):
        if data is None:
            return
        try:
            sock.sendmsg([data], [reply_from], 0, client)
        except OSError as exc:
            LOG.debug("answer to %s lost: %s", client[0], exc)

    def _relay_udp_later(self, sock, wire: bytes, query: dns_rules.Query, client, reply_from: tuple[int, int, bytes]):
        device = client_key(client[0])
        with self._guard:
            if sum(self._relays.values()) >= MAX_IN_FLIGHT or self._relays[device] >= MAX_IN_FLIGHT_PER_CLIENT:
                self.counters["dns_overload_dropped"] += 1
                return
            self._relays[device] += 1
        try:
            threading.Thread(target=self._relay_udp, args=(sock, wire, query, client, reply_from), daemon=True).start()
        except RuntimeError:  # no thread to be had: the slot goes back, the query fails
            self._relay_done(device)
            raise

    def _relay_udp(self, sock, wire: bytes, query: dns_rules.Query, client, reply_from: tuple[int, int, bytes]):
        try:
            self._send_udp(
                sock, self._read_upstream(self.ask_upstream_udp(wire), query, wire, client[0]), client, reply_from
            )
        except Exception:
            self._failed("relaying a query", client[0])
            self._send_udp(sock, _error_reply(wire, RCODE_SERVFAIL), client, reply_from)
        finally:
            self._relay_done(client_key(client[0]))

    def _relay_done(self, device: str) -> None:
        with self._guard:
            self._relays[device] -= 1
            if not self._relays[device]:
                del self._relays[device]

    def ask_upstream_udp(self, wire: bytes) -> bytes | None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            deadline = time.monotonic() + UPSTREAM_TIMEOUT_S
            try:
                sock.connect(self.upstream)
                sock.send(wire)
                while (left := deadline - time.monotonic()) > 0:
                    sock.settimeout(left)
                    answer = sock.recv(MAX_MESSAGE)
                    if answer[:2] == wire[:2]:  # the answer to this query, not a stray one
                        return answer
            except OSError as exc:
                LOG.info("upstream resolver %s: %s", self.upstream[0], exc)
            return None

    def resolve(self, domain: str, qtype: str = "A") -> dns_rules.Answer:
        """The router's own lookup (a name just blocked): what upstream says, read like any answer."""
        query = dnslib.DNSRecord.question(domain, qtype).pack()
        answer = self.ask_upstream_udp(query)
        return dns_rules.Answer() if answer is None else dns_rules.inspect_answer(answer, domain, self.rebind_allowed)

    # -- TCP: length-prefixed messages, relayed over TCP (answers too big for UDP); connections capped

    def _open_tcp(self, family: int) -> socket.socket:
        sock = self._bound(family, socket.SOCK_STREAM)
        sock.listen(MAX_TCP_CLIENTS)
        return sock

    def _serve_tcp(self, listener: socket.socket):
        while not self.supervisor.stopping:
            try:
                conn, (client_ip, *_) = listener.accept()
            except TimeoutError:
                continue
            device = client_key(client_ip)
            with self._guard:
                admitted = (
                    sum(self._tcp_clients.values()) < MAX_TCP_CLIENTS and self._tcp_clients[device] < MAX_TCP_PER_CLIENT
                )
                if admitted:
                    self._tcp_clients[device] += 1
                else:
                    self.counters["dns_tcp_refused"] += 1
            if not admitted:
                conn.close()
                continue
            threading.Thread(target=self._serve_tcp_client, args=(conn, client_ip), daemon=True).start()

    def _serve_tcp_client(self, conn: socket.socket, client_ip: str):
        try:
            with conn:
                while self._serve_tcp_query(conn, client_ip):
                    pass
        except TimeoutError:
            self.counters["dns_tcp_closed_slow"] += 1
        except (OSError, ConnectionError):
            pass
        except Exception:
            self._failed("a query over TCP", client_ip)
        finally:
            device = client_key(client_ip)
            with self._guard:
                self._tcp_clients[device] -= 1
                if not self._tcp_clients[device]:
                    del self._tcp_clients[device]

    def _serve_tcp_query(self, conn: socket.socket, client_ip: str) -> bool:
        """Read, decide and answer one query; False when the connection should end."""
        deadline = time.monotonic() + TCP_MESSAGE_S
        try:
            (length,) = LENGTH.unpack(_recv_exact(conn, LENGTH.size, deadline))
        except ConnectionError:
            return False  # the device is done
        if length > dns_rules.TCP_LIMIT:
            self.verdict(client_ip, None)  # counted as malformed; not worth reading
            return False
        wire = _recv_exact(conn, length, deadline)
        if not self._within_rate(client_ip):
            return False
        verdict, query = self._decide(client_ip, wire, over_tcp=True)
        if verdict.action == "drop":
            return False
        if verdict.action == "allow":
            reply = self._read_upstream(self._ask_upstream_tcp(wire), query, wire, client_ip)
        else:
            reply = self._answer(verdict, query, wire)
        if reply is None:
            return False
        conn.settimeout(TCP_MESSAGE_S)  # a device that does not read its answers is as slow as one that does not send
        conn.sendall(LENGTH.pack(len(reply)) + reply)
        return verdict.action != "malformed"

    def _ask_upstream_tcp(self, wire: bytes) -> bytes | None:
        deadline = time.monotonic() + UPSTREAM_TIMEOUT_S
        try:
            with socket.create_connection(self.upstream, timeout=UPSTREAM_TIMEOUT_S) as up:
                up.sendall(LENGTH.pack(len(wire)) + wire)
                (length,) = LENGTH.unpack(_recv_exact(up, LENGTH.size, deadline))
                return _recv_exact(up, length, deadline)
        except (OSError, ConnectionError) as exc:
            LOG.info("upstream resolver %s over TCP: %s", self.upstream[0], exc)
            return None
