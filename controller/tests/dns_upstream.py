"""A real upstream resolver on loopback for the resolver's tests and the hostile bench.

UDP and TCP on one random port of 127.0.0.1. `names` maps a name to its A (or AAAA)
addresses; `raw` maps a name to the exact bytes to answer (hostile answers, with the
query's id patched in); anything else is NXDOMAIN.
"""

from __future__ import annotations

import socket
import struct
import threading

import dnslib


class Upstream:
    def __init__(self, names: dict[str, list[str]] | None = None, raw: dict[str, bytes] | None = None):
        self.names = dict(names or {})
        self.raw = dict(raw or {})
        self.asked: list[str] = []
        while True:  # a port free for both
            self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.udp.bind(("127.0.0.1", 0))
            self.port = self.udp.getsockname()[1]
            self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                self.tcp.bind(("127.0.0.1", self.port))
                break
            except OSError:
                self.udp.close()
                self.tcp.close()
        self.tcp.listen(64)
        self.address = ("127.0.0.1", self.port)
        for target in (self._serve_udp, self._serve_tcp):
            threading.Thread(target=target, daemon=True).start()

    def close(self):
        for sock in (self.udp, self.tcp):
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked on it, so the port is free again
            except OSError:
                pass
            sock.close()

    def answer(self, wire: bytes) -> bytes:
        query = dnslib.DNSRecord.parse(wire)
        name = str(query.q.qname).rstrip(".").lower()
        self.asked.append(name)
        if name in self.raw:
            return wire[:2] + self.raw[name][2:]
        reply = query.reply()
        if name not in self.names:
            reply.header.rcode = dnslib.RCODE.NXDOMAIN
        for address in self.names.get(name, []):
            rdata = dnslib.AAAA(address) if ":" in address else dnslib.A(address)
            reply.add_answer(
                dnslib.RR(name, dnslib.QTYPE.AAAA if ":" in address else dnslib.QTYPE.A, rdata=rdata, ttl=300)
            )
        return reply.pack()

    def _serve_udp(self):
        while True:
            try:
                wire, client = self.udp.recvfrom(65535)
                if not wire:  # shut down
                    return
            except OSError:
                return
            try:
                answer = self.answer(wire)
            except Exception:  # a query it cannot read goes unanswered, as a real resolver's; the others do not
                continue
            try:
                self.udp.sendto(answer, client)
            except OSError:
                return

    def _serve_tcp(self):
        while True:
            try:
                conn, _ = self.tcp.accept()
            except OSError:
                return
            threading.Thread(target=self._serve_tcp_client, args=(conn,), daemon=True).start()

    def _serve_tcp_client(self, conn):
        with conn:
            try:
                (length,) = struct.unpack("!H", conn.recv(2, socket.MSG_WAITALL))
                reply = self.answer(conn.recv(length, socket.MSG_WAITALL))
                conn.sendall(struct.pack("!H", len(reply)) + reply)
            except (OSError, struct.error):
                pass
