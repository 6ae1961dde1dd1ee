"""DNS gating: which names a device may resolve, and which addresses those names have.

Pure functions and plain data. A device's rules map a domain to "deny" or "allow"; the
longest matching suffix decides, so "deny example.test" with "allow www.example.test"
blocks everything under example.test but www. Names are compared in their IDNA ASCII form,
lower-cased, without the trailing dot.
"""
from __future__ import annotations

import time
from collections import OrderedDict

import dnslib
import idna

DENY, ALLOW = "deny", "allow"
EDE_OPTION = 15          # RFC 8914 Extended DNS Error
EDE_BLOCKED = 15         # "Blocked"
MIN_TTL_S, MAX_TTL_S = 60, 24 * 3600


class BadDomain(ValueError):
    pass


class MalformedQuery(ValueError):
    pass


def normalize_domain(text: str) -> str:
    """'Bücher.Example.' -> 'xn--bcher-kva.example'. Raises BadDomain for anything else."""
    name = text.strip().rstrip(".").lower()
    if not name or len(name) > 253:
        raise BadDomain(f"not a domain name: {text!r}")
    try:
        ascii_name = idna.encode(name, uts46=True).decode("ascii")
    except idna.IDNAError as exc:
        raise BadDomain(f"not a domain name: {text!r} ({exc})") from None
    if any(not label or len(label) > 63 for label in ascii_name.split(".")):
        raise BadDomain(f"not a domain name: {text!r}")
    return ascii_name


def matches(name: str, domain: str) -> bool:
    return name == domain or name.endswith("." + domain)


def decide(rules: dict[str, str], name: str) -> str:
    """DENY or ALLOW for a normalised name; no rule means ALLOW."""
    best, verdict = -1, ALLOW
    for domain, action in rules.items():
        if len(domain) > best and matches(name, domain):
            best, verdict = len(domain), action
    return verdict


def parse_query(wire: bytes) -> tuple[dnslib.DNSRecord, str]:
    """The query and its (normalised) first question name. Raises MalformedQuery."""
    try:
        record = dnslib.DNSRecord.parse(wire)
    except Exception as exc:  # dnslib raises DNSError, struct errors, IndexError, UnicodeError...
        raise MalformedQuery(f"{type(exc).__name__}: {exc}") from None
    if record.header.qr or len(record.questions) != 1:
        raise MalformedQuery("not a query with exactly one question")
    qname = str(record.q.qname).rstrip(".").lower()
    return record, qname


def refusal(query: dnslib.DNSRecord) -> bytes:
    """NXDOMAIN, with an Extended DNS Error saying why, so the device gives up at once."""
    reply = query.reply()
    reply.header.rcode = dnslib.RCODE.NXDOMAIN
    reply.header.ra = 1
    reply.add_ar(dnslib.EDNS0(udp_len=1232, opts=[dnslib.EDNSOption(
        EDE_OPTION, EDE_BLOCKED.to_bytes(2, "big") + b"blocked by the household")]))
    return reply.pack()


class AddressBook:
    """Which names each address was last seen answering for, bounded and expiring.

    A CNAME chain (www.example.test -> cdn.net -> A) teaches the address under every
    name in the chain, since the chain's A record names only its last link.
    """

    def __init__(self, capacity: int = 20000, clock=time.time):
        self.capacity = capacity
        self.clock = clock
        self._names: OrderedDict[str, dict[str, float]] = OrderedDict()  # ip -> {name: expiry}

    def learn(self, names: list[str], ip: str, ttl: int) -> bool:
        """Record ip for names; True if that taught something new."""
        expiry = self.clock() + min(max(ttl, MIN_TTL_S), MAX_TTL_S)
        known = self._names.setdefault(ip, {})
        new = any(n not in known or known[n] < self.clock() for n in names)
        for name in names:
            known[name] = max(known.get(name, 0.0), expiry)
        self._names.move_to_end(ip)
        while len(self._names) > self.capacity:
            self._names.popitem(last=False)
        return new

    def blocked_for(self, denied) -> set[str]:
        """Live addresses learnt for any name for which denied(name) is true."""
        now = self.clock()
        return {ip for ip, names in self._names.items()
                if any(expiry > now and denied(name) for name, expiry in names.items())}

    def expire(self) -> bool:
        """Forget what has expired; True if anything was."""
        now = self.clock()
        changed = False
        for ip in list(self._names):
            live = {n: e for n, e in self._names[ip].items() if e > now}
            if len(live) != len(self._names[ip]):
                changed = True
                if live:
                    self._names[ip] = live
                else:
                    del self._names[ip]
        return changed


def learnable(answer: bytes, qname: str) -> list[tuple[list[str], str, int]]:
    """From an answer to qname: (names in the CNAME chain, address, ttl) per A record."""
    try:
        record = dnslib.DNSRecord.parse(answer)
    except Exception:
        return []
    chain = {qname}
    for rr in record.rr:
        if rr.rtype == dnslib.QTYPE.CNAME and str(rr.rname).rstrip(".").lower() in chain:
            chain.add(str(rr.rdata).rstrip(".").lower())
    return [(sorted(chain), str(rr.rdata), rr.ttl) for rr in record.rr
            if rr.rtype == dnslib.QTYPE.A and str(rr.rname).rstrip(".").lower() in chain]
