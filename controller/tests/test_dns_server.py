"""The resolver over real loopback sockets, with a real upstream: what one hostile device can
and cannot do to everyone else's DNS (issue 9 items 1, 2 and 4; rebind protection)."""

from __future__ import annotations

import itertools
import math
import socket
import struct
import threading
import time

import dnslib
import pytest
from dns_upstream import Upstream
from support import PHONE, WWW, WWW_IP, Resolver, free_port, permitted_phone

from homenet.attacks import pointer_chain, raw_query
from homenet.wait import wait_until
from homework_controller.edge.lan import dns_server
from homework_controller.policy import dns_rules


@pytest.fixture
def upstream():
    up = Upstream({WWW: [WWW_IP], "games.example.test": ["198.51.100.81"]})
    yield up
    up.close()


@pytest.fixture
def resolver(router, upstream):
    ip = permitted_phone(router)
    r = Resolver(router, ip, upstream)
    yield r
    r.server.close()


def test_a_name_over_255_octets_costs_only_that_query(router, resolver):
    """Issue 9 item 1: this datagram used to kill the UDP thread, and every device's DNS with it."""
    router.decisions.deny_dns(PHONE, "example.test")
    router.decisions.permit_dns(PHONE, WWW)
    too_long = ".".join(["a" * 60] * 5) + ".example.test"
    reply = resolver.udp(raw_query(too_long))
    assert reply is not None and dnslib.DNSRecord.parse(reply).header.rcode == dnslib.RCODE.FORMERR
    assert resolver.lookup("games.example.test") == ("NXDOMAIN", [])  # blocked, answered
    assert resolver.lookup(WWW) == ("NOERROR", [WWW_IP])  # allowed, relayed
    assert resolver.server.health() == {"udp": "running", "tcp": "running", "restarts": 0}
    assert router.counters["dns_malformed"] == 1 and resolver.server.counters["dns_errors"] == 0


def test_a_label_over_63_octets_is_refused_not_relayed(router, resolver, upstream):
    """RFC 1035 allows 63 octets a label; a longer one (found by the fuzz pass: the length byte of a mutated
    query) was relayed, and an upstream that could not answer it stopped answering anyone."""
    reply = resolver.udp(raw_query("a" * 64 + ".example.test"))
    assert reply is not None and dnslib.DNSRecord.parse(reply).header.rcode == dnslib.RCODE.FORMERR
    assert upstream.asked == []
    # Positive control: 63 octets is a name, relayed and answered.
    assert resolver.lookup("a" * 63 + ".example.test") == ("NXDOMAIN", [])
    assert upstream.asked == ["a" * 63 + ".example.test"]


def test_a_dead_service_thread_is_seen_by_health_and_restarted(router, resolver):
    class Crash(BaseException):  # escapes the per-query catch, as a bug would
        pass

    crash_once = threading.Event()
    verdict = resolver.verdict

    def crashing(client_ip, query):
        if not crash_once.is_set():
            crash_once.set()
            raise Crash()
        return verdict(client_ip, query)

    resolver.server.verdict = crashing
    assert resolver.lookup(WWW)[0] == "TIMEOUT"  # the query that killed the thread
    wait_until("the supervisor to restart dns-udp", lambda: resolver.server.health()["restarts"] == 1, 5)
    assert resolver.server.health() == {"udp": "running", "tcp": "running", "restarts": 1}
    assert resolver.lookup(WWW) == ("NOERROR", [WWW_IP])


def test_hostile_messages_are_refused_before_parsing_and_never_hold_the_lock(router, resolver):
    """Issue 9 item 2: a 64 KB message of pointer chains held the controller's lock for ~19 s."""
    hostile = pointer_chain()
    started = time.monotonic()
    assert resolver.tcp(hostile) is None  # over 4096 octets: the connection ends unread
    assert resolver.udp(pointer_chain(1400)) is not None  # FORMERR: answer records in a query
    assert time.monotonic() - started < 1.0
    # Queries are capped at 512 octets without EDNS and 1232 with it.
    padded = dnslib.DNSRecord.question(WWW)
    padded.add_ar(dnslib.EDNS0(udp_len=1232, opts=[dnslib.EDNSOption(12, bytes(1000))]))  # RFC 7830 padding
    assert resolver.lookup(WWW) == ("NOERROR", [WWW_IP])
    assert dnslib.DNSRecord.parse(resolver.udp(padded.pack())).header.rcode == dnslib.RCODE.NOERROR
    padded.ar[0].rdata[0].data = bytes(1300)
    assert dnslib.DNSRecord.parse(resolver.udp(padded.pack())).header.rcode == dnslib.RCODE.FORMERR
    assert resolver.lock.max_hold_s < 0.05, resolver.lock.max_hold_s
    assert router.counters["dns_malformed"] == 3


def test_parsing_a_hostile_message_takes_time_linear_in_its_size():
    """Bounded work, counted as this thread's CPU time: wall time also counts whatever else a loaded machine
    runs meanwhile (a CI run missed 0.2 s by 2 ms), and a pointer chain followed quadratically costs seconds."""
    for message in (pointer_chain(), pointer_chain(4096)):
        started = time.thread_time()
        with pytest.raises(dns_rules.MalformedQuery):
            dns_rules.parse_query(message, over_tcp=True)
        assert time.thread_time() - started < 0.01
    # An upstream answer of chained pointers, within the record cap, is read in bounded time.
    started = time.thread_time()
    assert not dns_rules.inspect_answer(pointer_chain(256 * 16, qr=True), "a").readable
    assert not dns_rules.inspect_answer(pointer_chain(qr=True), "a").readable
    assert time.thread_time() - started < 0.2


def test_tcp_clients_are_capped_per_device_and_in_total_and_slow_ones_dropped(resolver, monkeypatch):
    """Issue 9 item 4: every connection had a thread of its own, without limit or deadline."""
    monkeypatch.setattr(dns_server, "TCP_MESSAGE_S", 0.5)
    idle = [socket.create_connection(("127.0.0.1", resolver.port)) for _ in range(dns_server.MAX_TCP_PER_CLIENT)]
    wait_until(
        "the per-client TCP limit",
        lambda: sum(resolver.server._tcp_clients.values()) == dns_server.MAX_TCP_PER_CLIENT,
        5,
    )
    extra = socket.create_connection(("127.0.0.1", resolver.port), timeout=2)
    assert extra.recv(1) == b""  # one device holds at most MAX_TCP_PER_CLIENT
    # Another device still gets its answer over TCP...
    assert resolver.lookup(WWW, over_tcp=False)[0] == "NOERROR"
    assert resolver.tcp(dnslib.DNSRecord.question(WWW).pack(), source="127.0.0.2") is not None
    # ...and the idle ones are closed at the deadline.
    for conn in idle:
        conn.settimeout(3)
        assert conn.recv(1) == b""
    # A device sending its query a byte at a time is closed too.
    slow = socket.create_connection(("127.0.0.1", resolver.port), timeout=3)
    wire = dnslib.DNSRecord.question(WWW).pack()
    started = time.monotonic()
    with pytest.raises((ConnectionError, BrokenPipeError)):
        for byte in struct.pack("!H", len(wire)) + wire:
            slow.send(bytes([byte]))
            time.sleep(0.1)
        if slow.recv(2) == b"":
            raise ConnectionError("closed")
    assert time.monotonic() - started < 2.5
    assert resolver.server.counters["dns_tcp_refused"] == 1
    assert resolver.server.counters["dns_tcp_closed_slow"] >= dns_server.MAX_TCP_PER_CLIENT + 1
    # In total at most MAX_TCP_CLIENTS, from however many devices.
    held = [
        socket.create_connection(("127.0.0.1", resolver.port), source_address=(f"127.0.1.{i}", 0))
        for i in range(1, dns_server.MAX_TCP_CLIENTS + 1)
    ]
    wait_until(
        "the TCP client limit", lambda: sum(resolver.server._tcp_clients.values()) == dns_server.MAX_TCP_CLIENTS, 5
    )
    late = socket.create_connection(("127.0.0.1", resolver.port), timeout=2, source_address=("127.0.2.1", 0))
    assert late.recv(1) == b""
    for conn in [*held, extra, slow, late]:
        conn.close()


def test_the_resolver_is_bound_to_its_interface(router, upstream):
    resolver = Resolver(router, permitted_phone(router), upstream, interface="lo")
    try:
        for service in resolver.server.services:
            assert service.sock.getsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, 16).rstrip(b"\0") == b"lo"
        assert resolver.lookup(WWW) == ("NOERROR", [WWW_IP])
    finally:
        resolver.server.close()


def test_rebind_protection_refuses_public_names_answering_private_addresses(router, upstream):
    upstream.names.update(
        {
            "evil.example": ["10.2.0.1"],
            "evil6.example": ["::ffff:c0a8:101"],
            "loop.example": ["127.0.0.1"],
            "cgnat.example": ["100.64.0.9"],
            "nas.home.lan": ["192.168.1.10"],
            "mixed.example": ["198.51.100.9", "169.254.1.1"],
        }
    )
    resolver = Resolver(router, permitted_phone(router), upstream, rebind_allowed=("home.lan",))
    try:
        for name in ("evil.example", "evil6.example", "loop.example", "cgnat.example", "mixed.example"):
            query = dnslib.DNSRecord.question(name, "AAAA" if "6" in name else "A")
            query.add_ar(dnslib.EDNS0(udp_len=1232))
            reply = dnslib.DNSRecord.parse(resolver.udp(query.pack()))
            assert reply.header.rcode == dnslib.RCODE.NXDOMAIN and not reply.rr, name
            assert reply.ar[0].rdata[0].data[:2] == dns_rules.EDE_FILTERED.to_bytes(2, "big")
            assert dnslib.RCODE.get(dnslib.DNSRecord.parse(resolver.tcp(query.pack())).header.rcode) == "NXDOMAIN"
        # The household's own names pass, and so do public ones (TEST-NET-2 is the emulated internet).
        assert resolver.lookup("nas.home.lan") == ("NOERROR", ["192.168.1.10"])
        assert resolver.lookup(WWW) == ("NOERROR", [WWW_IP])
        assert resolver.server.counters["dns_rebind_blocked"] == 10
        assert {name for name, _, _ in resolver.learnt} == {"nas.home.lan", WWW}  # a refused answer teaches nothing
    finally:
        resolver.server.close()


def test_an_upstream_answer_the_router_cannot_read_is_not_passed_on(router, upstream):
    upstream.raw["chains.example"] = pointer_chain(256 * 16, qr=True)
    resolver = Resolver(router, permitted_phone(router), upstream)
    try:
        assert resolver.lookup("chains.example")[0] == "SERVFAIL"
        assert resolver.lookup(WWW) == ("NOERROR", [WWW_IP])
        assert resolver.server.counters["dns_upstream_unreadable"] == 1
    finally:
        resolver.server.close()


def test_a_blocked_name_over_tcp_and_the_routers_own_lookup(router, resolver):
    router.decisions.deny_dns(PHONE, "games.example.test")
    assert resolver.lookup("games.example.test", over_tcp=True) == ("NXDOMAIN", [])
    assert resolver.lookup(WWW, over_tcp=True) == ("NOERROR", [WWW_IP])
    assert resolver.server.resolve("games.example.test").learnt == (("games.example.test", "198.51.100.81", 300),)


def test_a_device_flooding_queries_loses_its_own_excess_only(resolver):
    wire = dnslib.DNSRecord.question(WWW).pack()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as flood:
        flood.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        started = time.monotonic()
        for _ in range(12):  # 1,000 queries a second for 0.6 s (longer on a loaded machine)
            for _ in range(50):
                flood.sendto(wire, ("127.0.0.1", resolver.port))
            time.sleep(0.05)
        answered, last_answer = 0, started
        flood.settimeout(2)  # a loaded machine's answers can pause that long; no answer comes after it
        try:
            while flood.recv(4096):
                answered, last_answer = answered + 1, time.monotonic()
        except TimeoutError:
            pass
    # Its burst, and what its allowance refilled while the flood was being answered: from the first query
    # to the last answer (measured: on a loaded machine the queries wait in the socket's buffer and are
    # answered after the last was sent, and the allowance refills for as long as that really took).
    lasted = last_answer - started
    most = dns_server.DEVICE_BURST + math.ceil(dns_server.DEVICE_QPS * lasted) + 1
    # Within its burst a query is answered, or dropped because the device already has its most relays waiting
    # for upstream at once (its own excess too: on a loaded machine the upstream answers slowly).
    overloaded = resolver.server.counters["dns_overload_dropped"]
    assert answered + overloaded >= dns_server.DEVICE_BURST and answered <= most
    assert resolver.server.counters["dns_rate_limited"] >= 600 - most
    # Another device is answered at once...
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
        other.bind(("127.0.0.2", 0))
        other.settimeout(1)
        other.sendto(wire, ("127.0.0.1", resolver.port))
        assert dnslib.DNSRecord.parse(other.recv(4096)).rr
    # ...and the flooder again once its allowance refills.
    wait_until("the allowance to refill", lambda: resolver.lookup(WWW) == ("NOERROR", [WWW_IP]), 5)


def test_over_ipv6_a_device_is_answered_and_gated_as_over_ipv4(router, upstream):
    """The resolver's IPv6 sockets (each device's /64's ::1 on the router; loopback here): a blocked name
    is refused over UDP and TCP, an allowed one relayed, and the verdict is asked with the IPv6 source."""
    phone = permitted_phone(router)
    router.decisions.deny_dns(PHONE, "games.example.test")
    asked = []

    def verdict(client_ip, query):
        asked.append(client_ip)
        return router.dns_query(phone, query)

    port = free_port()
    server = dns_server.DnsServer(
        ("127.0.0.1", port), upstream.address, verdict, lambda *_: None, listen6=("::1", port)
    )
    server.start()
    try:
        assert server.health() == {
            "udp": "running",
            "tcp": "running",
            "udp6": "running",
            "tcp6": "running",
            "restarts": 0,
        }

        def ask(name, over_tcp):
            wire = dnslib.DNSRecord.question(name, "AAAA").pack()
            if over_tcp:
                with socket.create_connection(("::1", port), timeout=2) as s:
                    s.sendall(struct.pack("!H", len(wire)) + wire)
                    head = s.recv(2, socket.MSG_WAITALL)
                    reply = s.recv(struct.unpack("!H", head)[0], socket.MSG_WAITALL)
            else:
                with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
                    s.settimeout(2)
                    s.sendto(wire, ("::1", port))
                    reply = s.recv(65535)
            return dnslib.RCODE.get(dnslib.DNSRecord.parse(reply).header.rcode)

        for over_tcp in (False, True):
            assert ask("games.example.test", over_tcp) == "NXDOMAIN"
            assert ask(WWW, over_tcp) == "NOERROR"  # positive control: relayed upstream
        assert set(asked) == {"::1"}
    finally:
        server.close()


def test_an_ipv6_device_is_its_64_for_the_per_device_limits():
    """A device may send from any address of its /64: all of them share its query budget and connections."""
    assert dns_server.client_key("2001:db8:100:1::aa") == dns_server.client_key("2001:db8:100:1:1234::1")
    assert dns_server.client_key("2001:db8:100:1::aa") != dns_server.client_key("2001:db8:100:2::aa")
    assert dns_server.client_key("fe80::aa%br-lan") == "fe80::/64"
    assert dns_server.client_key("10.0.0.6") == "10.0.0.6"


def chained_answer(qname: str, links: int, addresses: int, under_first: bool = False) -> bytes:
    """An answer from a zone the asking device controls: a CNAME chain of `links` more names, and
    `addresses` A records under its last one (or its first), so every name of the chain has every address."""
    reply = dnslib.DNSRecord.question(qname).reply()
    names = [qname] + [f"c{i}.evil.test" for i in range(links)]
    for name, target in itertools.pairwise(names):
        reply.add_answer(dnslib.RR(name, dnslib.QTYPE.CNAME, rdata=dnslib.CNAME(target), ttl=300))
    for n in range(addresses):
        address = f"198.18.{n // 250}.{n % 250 + 1}"
        reply.add_answer(dnslib.RR(names[0 if under_first else -1], dnslib.QTYPE.A, rdata=dnslib.A(address), ttl=300))
    return reply.pack()


def test_a_hostile_answer_teaches_a_bounded_number_of_pairs_a_few_at_a_time(router, upstream):
    """Issue 39 finding 3: 127 CNAMEs and 128 addresses (256 records, the most an answer may have) taught
    16,512 (name, address) pairs, all learnt in one hold of the controller's lock (337 ms at worst with
    the rest of the path). What one answer teaches is bounded, and learnt a few pairs per hold, so
    another device's DHCP and DNS wait for one small part at most. Work is asserted, not time (the
    longest hold is printed: run with -s)."""
    upstream.raw["www.evil.test"] = chained_answer("www.evil.test", 127, 128)
    upstream.raw["ftp.evil.test"] = chained_answer("ftp.evil.test", 127, 128, under_first=True)
    # Positive control: an ordinary answer (a CNAME chain to a CDN, four addresses) is learnt whole.
    upstream.raw["www.shop.test"] = chained_answer("www.shop.test", 2, 4)
    resolver = Resolver(router, permitted_phone(router), upstream)
    try:
        for name in ("www.evil.test", "ftp.evil.test"):
            for over_tcp in (False, True):
                rcode, addresses = resolver.lookup(name, over_tcp)
                assert (rcode, len(addresses)) == ("NOERROR", 255), over_tcp  # the device gets the answer as it was
        print(f"\nlongest hold of the lock, hostile answers: {resolver.lock.max_hold_s * 1000:.2f} ms")
        assert len(resolver.learnt) <= 4 * dns_rules.MAX_LEARNT_PER_ANSWER
        assert max(resolver.holds) <= dns_rules.LEARNT_PER_HOLD
        # What the router learns starts from the name asked: the addresses under the chain's first names.
        assert ("ftp.evil.test", "198.18.0.1", 300) in resolver.learnt
        resolver.learnt.clear()
        assert resolver.lookup("www.shop.test")[0] == "NOERROR"
        names = ("www.shop.test", "c0.evil.test", "c1.evil.test")
        assert sorted(resolver.learnt) == sorted((n, f"198.18.0.{i}", 300) for n in names for i in range(1, 5))
    finally:
        resolver.server.close()
