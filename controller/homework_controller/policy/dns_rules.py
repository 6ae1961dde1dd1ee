"""DNS gating: which names a device may resolve, and which addresses those names have.

Pure functions and plain data. A device's rules map a domain to "deny" (block) or "allow";
the longest matching suffix decides, so "deny example.test" with "allow www.example.test"
blocks everything under example.test but www. Names are compared in their IDNA ASCII form,
lower-cased, without the trailing dot.

Every DNS message here is untrusted (queries come from devices, answers from whoever runs
the zone asked about), so parsing is bounded: the 12-byte header's counts and the size are
checked before dnslib sees the bytes, and names are decoded with RFC 1035's limits (255
octets) and a budget of compression pointers, so a message costs time linear in its size.
Callers parse outside the controller's lock and hand the core only the result.
"""

from __future__ import annotations

import bisect
import heapq
import ipaddress
import math
import struct
import time
from collections import OrderedDict
from dataclasses import dataclass

import dnslib
import idna

from ..wire.lan import ROUTER_ADDRESS

DENY, ALLOW = "deny", "allow"
EDE_OPTION = 15  # RFC 8914 Extended DNS Error
EDE_BLOCKED = 15  # "Blocked": the household blocked the name for this device
EDE_FILTERED = 17  # "Filtered": rebind protection dropped the answer
MIN_TTL_S, MAX_TTL_S = 60, 24 * 3600

HEADER = struct.Struct("!HHHHHH")  # id, flags, qdcount, ancount, nscount, arcount
FLAG_QR, FLAG_RD, FLAG_RA, OPCODE_MASK = 0x8000, 0x0100, 0x0080, 0x7800
RCODE_FORMERR = 1
UDP_LIMIT = 512  # a query without EDNS (RFC 1035)
EDNS_UDP_LIMIT = 1232  # with EDNS: the DNS flag day 2020 size, no fragments
TCP_LIMIT = 4096  # a query is one question (and an OPT record): room for cookies and padding
MAX_NAME_OCTETS = 255
MAX_LABEL_OCTETS = 63
POINTERS_PER_RECORD = 8  # names decoded per record (its own, rdata's, pointers followed) before refusing
MAX_ANSWER_RECORDS = 256  # an upstream answer with more is not read (nor passed on)
# What one upstream answer teaches the router (the device gets the whole answer): the names of its CNAME
# chain, the query's first (resolvers give up on longer chains too), and the addresses under them, each
# under every name of the chain. A hostile zone's 127 CNAMEs and 128 addresses taught 16,512 pairs.
MAX_CHAIN_NAMES = 8
MAX_ADDRESSES_PER_ANSWER = 32
MAX_LEARNT_PER_ANSWER = MAX_CHAIN_NAMES * MAX_ADDRESSES_PER_ANSWER
LEARNT_PER_HOLD = 32  # pairs learnt per hold of the controller's lock (`Answer.in_turns`)

# Addresses a public name must not answer with (rebind protection). Not the TEST-NETs:
# the emulated home's "internet" is 198.51.100.0/24.
REBIND_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "::/128",
        "::1/128",
        "fe80::/10",
        "fc00::/7",
    )
)


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
    if any(not label or len(label) > MAX_LABEL_OCTETS for label in ascii_name.split(".")):
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


# ---- parsing, bounded ------------------------------------------------------


class _BoundedBuffer(dnslib.DNSBuffer):
    """dnslib's reader with RFC 1035's limit on names and a budget of compression pointers.

    dnslib follows each pointer by recursing into `decode_name`, so counting calls counts
    pointers: a message of chained pointers (each name pointing at the previous one) would
    otherwise cost time quadratic in its size.
    """

    def __init__(self, data: bytes, pointer_budget: int):
        super().__init__(data)
        self.pointers_left = pointer_budget

    def decode_name(self, last=-1):
        self.pointers_left -= 1
        if self.pointers_left < 0:
            raise dnslib.BufferError("too many compressed names")
        name = super().decode_name(last)
        if sum(len(label) + 1 for label in name.label) + 1 > MAX_NAME_OCTETS:
            raise dnslib.BufferError("name longer than 255 octets")
        # dnslib reads a length byte of 64-191 as a label that long; RFC 1035 allows 63 (the rest are
        # pointers and obsolete label types), and an upstream may not answer such a name at all.
        if any(len(label) > MAX_LABEL_OCTETS for label in name.label):
            raise dnslib.BufferError("label longer than 63 octets")
        return name


def _parse(wire: bytes, answers_only: bool = False) -> dnslib.DNSRecord:
    """dnslib's DNSRecord.parse through the bounded reader; answers_only stops after the answer
    section (all the router reads of an upstream answer). Raises dnslib's and struct's errors."""
    _, _, qd, an, ns, ar = HEADER.unpack_from(wire)
    if answers_only:
        ns = ar = 0
    buffer = _BoundedBuffer(wire, POINTERS_PER_RECORD * (qd + an + ns + ar))
    header = dnslib.DNSHeader.parse(buffer)
    questions = [dnslib.DNSQuestion.parse(buffer) for _ in range(qd)]
    sections = [[dnslib.RR.parse(buffer) for _ in range(count)] for count in (an, ns, ar)]
    return dnslib.DNSRecord(header, questions, sections[0], auth=sections[1], ar=sections[2])


@dataclass(frozen=True)
class Query:
    """A query that passed the checks: its message and its (normalised) question name."""

    record: dnslib.DNSRecord
    qname: str

    @property
    def edns(self) -> bool:
        return any(rr.rtype == dnslib.QTYPE.OPT for rr in self.record.ar)


def parse_query(wire: bytes, over_tcp: bool = False) -> Query:
    """A device's query, checked before and while parsing. Raises MalformedQuery.

    One question, no answer or authority records, at most one additional record (EDNS's
    OPT); at most 512 octets over UDP without EDNS, 1232 with it, 4096 over TCP.
    """
    if len(wire) < HEADER.size:
        raise MalformedQuery("shorter than a DNS header")
    _, flags, qd, an, ns, ar = HEADER.unpack_from(wire)
    if flags & FLAG_QR or flags & OPCODE_MASK:
        raise MalformedQuery("not a standard query")
    if (qd, an, ns) != (1, 0, 0) or ar > 1:
        raise MalformedQuery(f"a query has one question and no records (counts {qd}/{an}/{ns}/{ar})")
    limit = TCP_LIMIT if over_tcp else EDNS_UDP_LIMIT if ar else UDP_LIMIT
    if len(wire) > limit:
        raise MalformedQuery(f"{len(wire)} octets is more than a query may have ({limit})")
    try:
        record = _parse(wire)
    except Exception as exc:  # dnslib raises DNSError, BufferError, struct errors, UnicodeError...
        raise MalformedQuery(f"{type(exc).__name__}: {exc}") from None
    query = Query(record, str(record.q.qname).rstrip(".").lower())
    if ar and not query.edns:
        raise MalformedQuery("the additional record of a query must be EDNS's OPT")
    if not over_tcp and len(wire) > UDP_LIMIT and not query.edns:
        raise MalformedQuery(f"{len(wire)} octets without EDNS")
    return query


def format_error(wire: bytes) -> bytes | None:
    """FORMERR for a message we could not take, built from its header alone; None if it has none.

    Never to a response (two resolvers would answer each other for ever).
    """
    if len(wire) < HEADER.size:
        return None
    ident, flags = struct.unpack_from("!HH", wire)
    if flags & FLAG_QR:
        return None
    return HEADER.pack(ident, FLAG_QR | (flags & (OPCODE_MASK | FLAG_RD)) | FLAG_RA | RCODE_FORMERR, 0, 0, 0, 0)


def refusal(query: Query, why: str = "blocked by the household", code: int = EDE_BLOCKED) -> bytes:
    """NXDOMAIN, with an Extended DNS Error saying why (if the device speaks EDNS), so it gives up at once."""
    reply = query.record.reply()
    reply.header.rcode = dnslib.RCODE.NXDOMAIN
    reply.header.aa = 0
    if query.edns:
        reply.add_ar(
            dnslib.EDNS0(
                udp_len=EDNS_UDP_LIMIT, opts=[dnslib.EDNSOption(EDE_OPTION, code.to_bytes(2, "big") + why.encode())]
            )
        )
    return reply.pack()


# ---- upstream answers ------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What an upstream answer to a device's query means for it.

    learnt: (name, address, ttl) for each A record of the query's CNAME chain, under every
    name of the chain (the A record names only the chain's last link): the chain's first
    MAX_CHAIN_NAMES names and the first MAX_ADDRESSES_PER_ANSWER addresses under them. readable:
    False if the router could not read it (it cannot then tell whether it rebinds, so it is not
    passed on). rebinds: a name outside the allow-list answered with a private address.
    """

    learnt: tuple[tuple[str, str, int], ...] = ()
    readable: bool = True
    rebinds: bool = False

    def in_turns(self) -> list[tuple[tuple[str, str, int], ...]]:
        """What it taught in parts the router learns each under its lock in turn with everything else
        (another device's DHCP and DNS wait for one part at most, not the whole answer)."""
        return [self.learnt[i : i + LEARNT_PER_HOLD] for i in range(0, len(self.learnt), LEARNT_PER_HOLD)]


def _private(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return any(ip in net for net in REBIND_NETWORKS if net.version == ip.version)


def inspect_answer(answer: bytes, qname: str, rebind_allowed: tuple[str, ...] = ()) -> Answer:
    """Read an upstream answer to qname: its header first, then the answer section, bounded."""
    try:
        _, flags, qd, an, _, _ = HEADER.unpack_from(answer)
        if not flags & FLAG_QR or qd > 1 or an > MAX_ANSWER_RECORDS:
            return Answer(readable=False)
        record = _parse(answer, answers_only=True)
        addresses = [rr for rr in record.rr if rr.rtype in (dnslib.QTYPE.A, dnslib.QTYPE.AAAA)]
        if not any(matches(qname, domain) for domain in rebind_allowed) and any(
            _private(str(rr.rdata)) for rr in addresses
        ):
            return Answer(rebinds=True)
    except Exception:  # any failure to read an untrusted message means "unreadable"
        return Answer(readable=False)
    chain = [qname]
    for rr in record.rr:
        if len(chain) == MAX_CHAIN_NAMES:
            break
        target = str(rr.rdata).rstrip(".").lower() if rr.rtype == dnslib.QTYPE.CNAME else None
        if target is not None and target not in chain and str(rr.rname).rstrip(".").lower() in chain:
            chain.append(target)
    under_chain = [rr for rr in addresses if str(rr.rname).rstrip(".").lower() in chain]
    return Answer(
        learnt=tuple((name, str(rr.rdata), rr.ttl) for rr in under_chain[:MAX_ADDRESSES_PER_ANSWER] for name in chain)
    )


# ---- the address book ------------------------------------------------------


class AddressBook:
    """Which (name, address) pairs answers taught, each until its TTL runs out; bounded.

    Bounded by entries and by (estimated) bytes: beyond either, the pair learnt (or
    re-learnt) longest ago is forgotten first. Pairs that block something for some device
    are kept apart (`keep`, up to a quarter of the book) and forgotten only after every
    other pair, so a device resolving random names cannot push a block out. Expiry is kept
    in 10-second buckets, so forgetting what expired costs time in what expired, not in the
    size of the book; and the pairs are indexed by reversed name, so finding those under a
    domain costs time in what is found.
    """

    ENTRY_BYTES = 500  # an entry's share of the dicts, index and tuples, besides its strings (measured: ~530 in all)
    BUCKET_S = 10

    def __init__(self, max_entries: int = 20000, max_bytes: int = 12 << 20, clock=time.time):
        self.max_entries, self.max_bytes, self.max_kept = max_entries, max_bytes, max_entries // 4
        self.clock = clock
        self._expiry: dict[tuple[str, str], float] = {}
        self._ordinary: OrderedDict[tuple[str, str], None] = OrderedDict()  # least recently learnt first
        self._kept: OrderedDict[tuple[str, str], None] = OrderedDict()  # the same, for pairs that block
        self._due: dict[int, set[tuple[str, str]]] = {}  # bucket -> entries expiring in it
        self._buckets: list[int] = []  # heap of the keys of _due
        self._by_suffix: list[tuple[str, str, str]] = []  # sorted (reversed name, name, address)
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._expiry)

    def __iter__(self):
        return iter(self._expiry)

    def learn(self, name: str, ip: str, ttl: int, keep: bool = False) -> tuple[bool, list[tuple[str, str]]]:
        """Remember ip for name (keep: it blocks something). (True if the pair is new, the pairs
        forgotten to make room)."""
        entry = (name, ip)
        expiry = self.clock() + min(max(ttl, MIN_TTL_S), MAX_TTL_S)
        old = self._expiry.get(entry)
        if old is not None:
            if keep:
                self.keep(entry)
            (self._kept if entry in self._kept else self._ordinary).move_to_end(entry)
            if expiry > old:
                self._unschedule(entry, old)
                self._schedule(entry, expiry)
                self._expiry[entry] = expiry
            return False, []
        self._expiry[entry] = expiry
        (self._kept if keep else self._ordinary)[entry] = None
        bisect.insort(self._by_suffix, (_reversed(name), name, ip))
        self._schedule(entry, expiry)
        self.bytes += self._size(entry)
        evicted = []
        while len(self._expiry) > self.max_entries or self.bytes > self.max_bytes:
            pool = self._kept if len(self._kept) > self.max_kept or not self._ordinary else self._ordinary
            evicted.append(self._forget(next(iter(pool))))
        return True, evicted

    def under(self, domain: str):
        """The pairs whose name is domain or under it."""
        key = _reversed(domain)
        at = bisect.bisect_left(self._by_suffix, (key,))
        while at < len(self._by_suffix) and self._by_suffix[at][0] == key:
            yield self._by_suffix[at][1:]
            at += 1
        at = bisect.bisect_left(self._by_suffix, (key + ".",))
        while at < len(self._by_suffix) and self._by_suffix[at][0].startswith(key + "."):
            yield self._by_suffix[at][1:]
            at += 1

    def keep(self, entry: tuple[str, str]) -> None:
        """The pair blocks something now: forget it only after every pair that does not."""
        if entry in self._ordinary:
            del self._ordinary[entry]
            self._kept[entry] = None

    def expire(self) -> list[tuple[str, str]]:
        """Forget what has expired; the pairs forgotten."""
        now = self.clock()
        expired = []
        while self._buckets and (self._buckets[0] + 1) * self.BUCKET_S <= now:
            # Every entry of a bucket whose end has passed has expired (by up to BUCKET_S late).
            expired += [self._forget(entry) for entry in list(self._due.pop(heapq.heappop(self._buckets)))]
        return expired

    def _forget(self, entry):
        self._unschedule(entry, self._expiry.pop(entry))
        (self._kept if entry in self._kept else self._ordinary).pop(entry)
        del self._by_suffix[bisect.bisect_left(self._by_suffix, (_reversed(entry[0]), *entry))]
        self.bytes -= self._size(entry)
        return entry

    def _schedule(self, entry, expiry: float) -> None:
        bucket = math.floor(expiry / self.BUCKET_S)
        if bucket not in self._due:
            self._due[bucket] = set()
            heapq.heappush(self._buckets, bucket)
        self._due[bucket].add(entry)

    def _unschedule(self, entry, expiry: float) -> None:
        self._due.get(math.floor(expiry / self.BUCKET_S), set()).discard(entry)

    def _size(self, entry) -> int:
        return self.ENTRY_BYTES + len(entry[0]) + len(entry[1])


def _reversed(name: str) -> str:
    """'www.example.test' -> 'test.example.www': the names under a domain sort together."""
    return ".".join(reversed(name.split(".")))


# The names operating systems look up to tell whether they are behind a captive portal.
PROBE_NAMES = frozenset(
    {
        # Android (and ChromeOS): http://connectivitycheck.gstatic.com/generate_204 and older names.
        "connectivitycheck.gstatic.com",
        "connectivitycheck.android.com",
        "clients1.google.com",
        "clients3.google.com",
        "www.google.com",
        # iOS, iPadOS, macOS: http://captive.apple.com/hotspot-detect.html
        "captive.apple.com",
        "www.apple.com",
        "www.appleiphonecell.com",
        # Windows: http://www.msftconnecttest.com/connecttest.txt (and the older NCSI name).
        "www.msftconnecttest.com",
        "www.msftncsi.com",
        # Firefox's own check.
        "detectportal.firefox.com",
    }
)
# How long a device may keep the router's address for a probe name: once it may go online, its next
# probe must find the real one.
PROBE_TTL_S = 1


def is_probe(qname: str) -> bool:
    """Whether a (normalised, lower-case) question name is one an OS probes for a captive portal."""
    return qname.rstrip(".") in PROBE_NAMES


def probe_answer(record: dnslib.DNSRecord) -> bytes:
    """The resolver's answer to a held-back device's query for a probe name: the router's address
    (A), or no address of that type (NOERROR, empty: an NXDOMAIN would tell the device that the name
    does not exist at all), good for PROBE_TTL_S."""
    reply = record.reply()
    reply.header.aa = 0
    if record.q.qtype == dnslib.QTYPE.A:
        reply.add_answer(dnslib.RR(record.q.qname, dnslib.QTYPE.A, rdata=dnslib.A(ROUTER_ADDRESS), ttl=PROBE_TTL_S))
    return reply.pack()
