"""A bounded random-mutation pass over the resolver's query path (run by pytest, so in CI).

Valid queries (and hostile ones: pointer chains, long names, odd counts) are mutated at
random and sent over UDP and TCP for a few seconds; whatever arrives, the resolver must
neither fail unexpectedly (`dns_errors`) nor stop, nor hold the controller's lock, and a
device's ordinary lookup must still be answered afterwards.
"""

from __future__ import annotations

import random
import socket
import struct
import time

import dnslib
from dns_upstream import Upstream
from support import WWW, WWW_IP, Resolver, permitted_phone

from homenet.attacks import pointer_chain, raw_query
from homework_controller.edge.lan import dns_server
from homework_controller.policy import dns_rules

SEED_MESSAGES = [
    dnslib.DNSRecord.question(WWW).pack(),
    dnslib.DNSRecord.question("games.example.test", "AAAA").pack(),
    dnslib.DNSRecord.question("xn--bcher-kva.example", "TXT").pack(),
    raw_query(".".join(["a" * 60] * 5) + ".example.test"),
    pointer_chain(600),
    pointer_chain(600, qr=True),
]
with_edns = dnslib.DNSRecord.question(WWW, "HTTPS")
with_edns.add_ar(dnslib.EDNS0(udp_len=1232, opts=[dnslib.EDNSOption(10, bytes(8))]))
SEED_MESSAGES.append(with_edns.pack())


def mutate(rng: random.Random, message: bytes) -> bytes:
    data = bytearray(message)
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(6)
        if kind == 0 and data:  # flip a byte
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 1:  # a compression pointer anywhere
            at = rng.randrange(len(data) + 1)
            data[at:at] = struct.pack("!H", 0xC000 | rng.randrange(len(data) + 12))
        elif kind == 2 and len(data) > 1:  # truncate
            del data[rng.randrange(len(data)) :]
        elif kind == 3 and len(data) >= 12:  # absurd counts
            struct.pack_into("!H", data, rng.choice((4, 6, 8, 10)), rng.choice((0, 1, 2, 255, 65535)))
        elif kind == 4:  # duplicate a slice
            start = rng.randrange(len(data) + 1)
            data[start:start] = data[start : start + rng.randrange(64)]
        elif kind == 5 and len(data) >= 3:  # header flags: responses, opcodes
            data[2] = rng.randrange(256)
    return bytes(data)


def test_parsers_only_ever_refuse_and_do_so_quickly():
    rng = random.Random(9)
    slowest = 0.0
    for _ in range(20000):
        message = mutate(rng, rng.choice(SEED_MESSAGES))
        started = time.thread_time()  # this thread's CPU: a loaded machine's other work is not the parser's
        try:
            dns_rules.parse_query(message, over_tcp=rng.random() < 0.5)
        except dns_rules.MalformedQuery:
            pass
        answer = dns_rules.inspect_answer(message, WWW, ("home.lan",))
        assert answer.readable or not answer.learnt
        slowest = max(slowest, time.thread_time() - started)
    assert slowest < 0.25, slowest  # (the unbounded parse took seconds of CPU)


def test_the_resolver_survives_a_few_seconds_of_mutated_queries(router, monkeypatch):
    monkeypatch.setattr(dns_server, "DEVICE_QPS", 10**6)  # every message reaches the parser
    monkeypatch.setattr(dns_server, "DEVICE_BURST", 10**6)
    upstream = Upstream({WWW: [WWW_IP]})
    resolver = Resolver(router, permitted_phone(router), upstream)
    try:
        fuzz_for_a_few_seconds(router, resolver)
    finally:
        resolver.server.close()
        upstream.close()


def fuzz_for_a_few_seconds(router, resolver):
    router.decisions.deny_dns("02:00:00:00:00:aa", "games.example.test")
    rng = random.Random(10)
    deadline = time.monotonic() + 3.0
    sent = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        while time.monotonic() < deadline:
            message = mutate(rng, rng.choice(SEED_MESSAGES))
            if rng.random() < 0.9:
                udp.sendto(message[:65507], ("127.0.0.1", resolver.port))
            else:
                try:
                    with socket.create_connection(("127.0.0.1", resolver.port), timeout=0.5) as tcp:
                        tcp.sendall(struct.pack("!H", min(len(message), 65535)) + message[:65535])
                        tcp.recv(65535)
                except OSError:
                    pass
            sent += 1
    assert sent > 500
    assert resolver.lookup(WWW) == ("NOERROR", [WWW_IP])
    assert resolver.lookup("games.example.test", over_tcp=True) == ("NXDOMAIN", [])
    assert resolver.server.health() == {"udp": "running", "tcp": "running", "restarts": 0}
    assert resolver.server.counters["dns_errors"] == 0
    assert resolver.lock.max_hold_s < 0.05, resolver.lock.max_hold_s
