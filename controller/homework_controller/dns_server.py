"""The router's resolver: DNS from devices, over UDP and TCP, gated per device.

The router's stack redirects every DNS packet arriving from the LAN (whatever address
the device sent it to) to this server, so a device that ignores the DHCP-given resolver
is still answered here. What to do with each query is the router core's decision
(`verdict(client_ip, query)`); this module only moves bytes: it answers, relays to the
upstream resolver, and reports relayed answers (`learn(qname, answer)`) so the core can
block the addresses of denied names.
"""
from __future__ import annotations

import logging
import socket
import socketserver
import struct
import subprocess
import threading

LOG = logging.getLogger(__name__)

UPSTREAM_TIMEOUT_S = 3.0
MAX_MESSAGE = 65535
MAX_IN_FLIGHT = 64
NFT_TABLE = "homework_dns"
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)  # Linux's value; Python defines the name from 3.12
PKTINFO = struct.Struct("=I4s4s")  # struct in_pktinfo: ifindex, spec_dst (source to use), addr (header dst)


def redirect_lan_dns(lan_iface: str, port: int) -> None:
    """Send every DNS packet from the LAN to this server (nftables, replaced atomically)."""
    ruleset = f"""
table ip {NFT_TABLE}
flush table ip {NFT_TABLE}
table ip {NFT_TABLE} {{
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname "{lan_iface}" udp dport 53 redirect to :{port}
    iifname "{lan_iface}" tcp dport 53 redirect to :{port}
  }}
}}
"""
    proc = subprocess.run(["nft", "-f", "-"], input=ruleset, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"could not redirect LAN DNS to port {port}: {proc.stderr.strip()}")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("peer closed")
        data += chunk
    return data


class DnsServer:
    def __init__(self, port: int, upstream: str, verdict, learn):
        self.upstream = upstream
        self.verdict, self.learn = verdict, learn
        self.slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)
        self.overloaded = 0
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # The redirect rewrote each query's destination to one address of the LAN interface;
        # the answer must leave from that same address or conntrack cannot undo the rewrite.
        self.udp.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
        self.udp.bind(("0.0.0.0", port))
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                server._serve_tcp(self.request, self.client_address[0])

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.tcp = socketserver.ThreadingTCPServer(("0.0.0.0", port), Handler)
        self.tcp.daemon_threads = True

    def start(self) -> None:
        threading.Thread(target=self._serve_udp, name="dns-udp", daemon=True).start()
        threading.Thread(target=self.tcp.serve_forever, name="dns-tcp", daemon=True).start()

    # -- UDP: one thread reads; relays run on their own threads, bounded

    def _serve_udp(self):
        while True:
            query, ancillary, _, client = self.udp.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(PKTINFO.size))
            local = next((data[:PKTINFO.size] for level, kind, data in ancillary
                          if level == socket.IPPROTO_IP and kind == IP_PKTINFO), None)
            if local is None:
                continue
            reply_from = PKTINFO.pack(0, PKTINFO.unpack(local)[2], b"\0\0\0\0")
            decision = self.verdict(client[0], query)
            if decision.action == "answer":
                self._send_udp(decision.reply, client, reply_from)
            elif decision.action == "forward":
                if self.slots.acquire(blocking=False):
                    threading.Thread(target=self._relay_udp, daemon=True,
                                     args=(query, decision.qname, client, reply_from)).start()
                else:
                    self.overloaded += 1

    def _send_udp(self, data: bytes, client, reply_from: bytes):
        try:
            self.udp.sendmsg([data], [(socket.IPPROTO_IP, IP_PKTINFO, reply_from)], 0, client)
        except OSError as exc:
            LOG.debug("answer to %s lost: %s", client[0], exc)

    def _relay_udp(self, query: bytes, qname: str, client, reply_from: bytes):
        try:
            answer = self.ask_upstream_udp(query)
            if answer is not None:
                self._send_udp(answer, client, reply_from)
                self.learn(qname, answer)
        finally:
            self.slots.release()

    def ask_upstream_udp(self, query: bytes) -> bytes | None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(UPSTREAM_TIMEOUT_S)
            try:
                sock.connect((self.upstream, 53))
                sock.send(query)
                while True:
                    answer = sock.recv(MAX_MESSAGE)
                    if answer[:2] == query[:2]:  # the answer to this query, not a stray one
                        return answer
            except OSError as exc:
                LOG.info("upstream resolver %s: %s", self.upstream, exc)
                return None

    # -- TCP: length-prefixed messages, relayed over TCP (answers too big for UDP)

    def _serve_tcp(self, conn: socket.socket, client_ip: str):
        conn.settimeout(10)
        try:
            while True:
                (length,) = struct.unpack("!H", _recv_exact(conn, 2))
                query = _recv_exact(conn, length)
                decision = self.verdict(client_ip, query)
                if decision.action == "drop":
                    return
                answer = decision.reply if decision.action == "answer" else self._ask_upstream_tcp(query)
                if answer is None:
                    return
                conn.sendall(struct.pack("!H", len(answer)) + answer)
                if decision.action == "forward":
                    self.learn(decision.qname, answer)
        except (OSError, ConnectionError, struct.error):
            return

    def _ask_upstream_tcp(self, query: bytes) -> bytes | None:
        try:
            with socket.create_connection((self.upstream, 53), timeout=UPSTREAM_TIMEOUT_S) as up:
                up.sendall(struct.pack("!H", len(query)) + query)
                (length,) = struct.unpack("!H", _recv_exact(up, 2))
                return _recv_exact(up, length)
        except (OSError, ConnectionError, struct.error) as exc:
            LOG.info("upstream resolver %s over TCP: %s", self.upstream, exc)
            return None
