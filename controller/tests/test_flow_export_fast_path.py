"""The flow collector's fast path against netflume's (DESIGN.md: a byte-level fast path is tested
differentially against the general path).

Datagrams a real Open vSwitch sent (tests/data/ovs_ipfix.json; ovs_ipfix_both_families.json: every
template OVS 3.1 sends, IPv6 and IPv4 TCP, UDP and ICMP records), and streams of datagrams built
byte-exact from those templates, with records of every shape those templates allow (variable-length interface
names short and in the three-byte form, both directions, out-of-range protocols and ports), and
mutated: templates resized, repeated, redefined, withdrawn, turned into options templates, given
enterprise and variable-length fields; truncations, lying lengths, flipped bytes, unknown
templates. One parser reads them with its fast path, one with netflume alone: every datagram must
give the same records or the same error, and leave the same template store and counts.
"""

from __future__ import annotations

import ipaddress
import json
import random
import struct
from collections import Counter
from pathlib import Path

import pytest

from homework_controller.edge.feeds.flow_export import (
    ExportParser,
    FlowRecord,
    MalformedExport,
    RecordReader,
    ipv6_text,
)

FIXTURE = json.loads((Path(__file__).parent / "data" / "ovs_ipfix.json").read_text())
DATAGRAMS = [bytes.fromhex(d) for d in FIXTURE["datagrams"]]
BOTH_FAMILIES = json.loads((Path(__file__).parent / "data" / "ovs_ipfix_both_families.json").read_text())
CAPTURED = [bytes.fromhex(d) for d in BOTH_FAMILIES["datagrams"]]
VARIABLE = 0xFFFF
# Information elements the collector reads: flowDirection, protocol, the addresses (IPv4, IPv6),
# the ports, packet and octet counts, and the flow's start and end (microseconds before export).
DIRECTION, PROTO, SRC4, DST4, SRC6, DST6, SPORT, DPORT, PACKETS, OCTETS, START, END = (
    61, 4, 8, 12, 27, 28, 7, 11, 2, 1, 158, 159,
)  # fmt: skip
READ = (DIRECTION, PROTO, SRC4, DST4, SPORT, DPORT, PACKETS, OCTETS, START, END)
OVS_ENTERPRISE = 6876

Spec = tuple[int, int, int | None]  # information element, length, enterprise


def ovs_templates(datagram: bytes) -> dict[int, list[Spec]]:
    """The templates of a datagram holding one template set, as their wire specifications."""
    templates, off = {}, 20
    while off + 4 <= len(datagram):
        tid, count = struct.unpack_from("!HH", datagram, off)
        off += 4
        specs: list[Spec] = []
        for _ in range(count):
            ie, length = struct.unpack_from("!HH", datagram, off)
            off += 4
            enterprise = None
            if ie & 0x8000:
                ie, enterprise = ie & 0x7FFF, struct.unpack_from("!I", datagram, off)[0]
                off += 4
            specs.append((ie, length, enterprise))
        templates[tid] = specs
    return templates


OVS = ovs_templates(DATAGRAMS[0])
TEMPLATE_SET = 2
# Every layout OVS sent in both captures (89 templates; template ids differ between runs).
LAYOUTS = list(
    {
        tuple(specs): specs
        for datagram in [DATAGRAMS[0], *CAPTURED]
        if struct.unpack_from("!H", datagram, 16)[0] == TEMPLATE_SET
        for specs in ovs_templates(datagram).values()
    }.values()
)
IPV6 = {SRC4: (SRC6, 16), DST4: (DST6, 16)}


def changed(specs: list[Spec], to: dict[int, tuple[int, int]]) -> list[Spec]:
    """`specs` with the standard fields of `to`'s elements made (element, length)."""
    return [(*to[ie], e) if ie in to and e is None else (ie, n, e) for ie, n, e in specs]


def encode_specs(specs: list[Spec]) -> bytes:
    out = b""
    for ie, length, enterprise in specs:
        if enterprise is None:
            out += struct.pack("!HH", ie, length)
        else:
            out += struct.pack("!HHI", ie | 0x8000, length, enterprise)
    return out


def template_set(templates: dict[int, list[Spec]]) -> bytes:
    body = b"".join(struct.pack("!HH", tid, len(specs)) + encode_specs(specs) for tid, specs in templates.items())
    return struct.pack("!HH", TEMPLATE_SET, 4 + len(body)) + body


def options_template_set(tid: int, specs: list[Spec]) -> bytes:
    body = struct.pack("!HHH", tid, len(specs), 1) + encode_specs(specs)
    return struct.pack("!HH", 3, 4 + len(body)) + body


def withdrawal_set(tid: int) -> bytes:
    return struct.pack("!HHHH", TEMPLATE_SET, 8, tid, 0)


def message(sets: list[bytes], export_time: int, domain: int) -> bytes:
    body = b"".join(sets)
    return struct.pack("!HHIII", 10, 16 + len(body), export_time, 1, domain) + body


def value(rng: random.Random, ie: int, length: int) -> bytes:
    if ie == DIRECTION:
        number = rng.choice((0, 1, 1, 1, 2))
    elif ie == PROTO:
        number = rng.choice((6, 6, 17, 1, 0, 255, 256, 300))
    elif ie in (SPORT, DPORT):
        number = rng.choice((rng.randrange(65536), 0, 65535, 65536, 70000))
    elif ie in (SRC6, DST6) and length == 16:
        return ipv6_address(rng)
    elif ie in (START, END, PACKETS, OCTETS):
        number = rng.choice((rng.randrange(1 << 16), rng.randrange(1 << 32), 0))
    else:
        return rng.randbytes(length)
    return (number % (1 << (8 * length))).to_bytes(length, "big") if length else b""


def ipv6_address(rng: random.Random) -> bytes:
    """Random groups, runs of zero groups to compress (one, two of the same length, at either end),
    or an embedded IPv4 address (mapped or compatible: inet_ntop writes those dotted)."""
    kind = rng.randrange(4)
    if kind == 0:
        return rng.randbytes(16)
    if kind == 1:
        return bytes(10) + rng.choice((b"\xff\xff", b"\x00\x00")) + rng.randbytes(4)
    return b"".join(rng.choice((bytes(2), bytes(2), rng.randbytes(2), b"\x00\x01")) for _ in range(8))


def record(rng: random.Random, specs: list[Spec]) -> bytes:
    out = b""
    for ie, length, enterprise in specs:
        if length != VARIABLE:
            out += value(rng, ie if enterprise is None else -1, length)
            continue
        size = rng.choice((0, 3, 16, 254, 255, 300))
        if size < 255 and rng.random() < 0.8:
            out += bytes([size])
        else:  # the three-byte form, which may also carry a short length
            out += b"\xff" + size.to_bytes(2, "big")
        out += rng.randbytes(size)
    return out


def resized(rng: random.Random, specs: list[Spec]) -> list[Spec]:
    """One read field given another length (a plain one, an odd one, a variable one)."""
    index = rng.choice([i for i, (ie, _, e) in enumerate(specs) if ie in READ and e is None])
    ie, _, _ = specs[index]
    return specs[:index] + [(ie, rng.choice((0, 1, 2, 3, 4, 5, 8, 9, 16, VARIABLE)), None)] + specs[index + 1 :]


def variant(rng: random.Random, specs: list[Spec]) -> list[Spec]:
    """OVS's template as sent, or changed in one of the ways an exporter (or a liar) could."""
    kind = rng.randrange(15)
    if kind == 0:
        return changed(specs, IPV6)
    if kind == 1:
        return resized(rng, specs)
    if kind == 2:  # a read field missing
        gone = rng.choice(READ)
        return [s for s in specs if s[0] != gone]
    if kind == 3:  # a field repeated (read or not)
        index = rng.randrange(len(specs))
        return specs[: index + 1] + [specs[index]] + specs[index + 1 :]
    if kind == 4:  # families mixed, or both families' fields
        if rng.random() < 0.5:
            return changed(specs, {SRC4: (SRC6, 16)})
        return specs + [(SRC6, 16, None), (DST6, 16, None)]
    if kind == 5:  # enterprise fields, fixed and variable, or a read field's number under an enterprise
        extra = [(PROTO if rng.random() < 0.5 else 900, rng.choice((1, 4, VARIABLE)), OVS_ENTERPRISE)]
        index = rng.randrange(len(specs) + 1)
        return specs[:index] + extra + specs[index:]
    if kind == 6:  # no variable-length field at all, and a zero-length one
        return [s for s in specs if s[1] != VARIABLE] + [(80, 0, None)]
    if kind == 7:  # protocol and ports wider than their values can be
        return changed(specs, {PROTO: (PROTO, 2), SPORT: (SPORT, 4), DPORT: (DPORT, 4)})
    return specs


def data_datagram(rng: random.Random, sent: dict[int, list[Spec]], export_time: int, domain: int) -> bytes:
    sets = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        tid = rng.choice([*sent, 999]) if sent else 999
        specs = sent.get(tid) or LAYOUTS[0]
        records = b"".join(record(rng, specs) for _ in range(rng.choice((1, 1, 2, 4))))
        records += bytes(rng.choice((0, 0, 0, 1, 3)))  # set padding
        sets.append(struct.pack("!HH", tid, 4 + len(records)) + records)
    return message(sets, export_time, domain)


def mutated(rng: random.Random, data: bytes) -> bytes:
    """Truncations, lying lengths, flipped bytes, trailing bytes; the message length kept true
    mostly, so the datagram reaches the parsers."""
    base = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0 and len(base) > 16:
        del base[rng.randrange(16, len(base)) :]
    elif kind == 1 and len(base) > 20:  # the first set's length
        base[18:20] = rng.choice((0, 3, 4, 5, rng.randrange(65536), len(base) - 16 + 1)).to_bytes(2, "big")
    elif kind == 2 and len(base) > 16:
        for _ in range(rng.randint(1, 6)):
            base[rng.randrange(16, len(base))] = rng.randrange(256)
    elif kind == 3:
        base += rng.randbytes(rng.choice((1, 2, 3, 4, 9)))
    elif kind == 4 and len(base) > 22:  # a variable length's byte, or a template's field count
        position = rng.randrange(20, len(base))
        base[position] = rng.choice((0, 1, 254, 255))
    if rng.random() < 0.95:
        base[2:4] = (len(base) % 65536).to_bytes(2, "big")
    return bytes(base)


def stream(seed: int, count: int) -> list[tuple[str, bytes]]:
    """(exporter, datagram) pairs: two exporters, two observation domains, templates sent now and
    then (as sent, changed, withdrawn, as options), data for the templates each believes it sent,
    a fifth of the datagrams mutated."""
    rng = random.Random(seed)
    sent: dict[tuple[str, int], dict[int, list[Spec]]] = {}
    out = []
    for _ in range(count):
        exporter, domain = rng.choice(("127.0.0.1:4739", "127.0.0.1:5000")), rng.choice((0, 0, 0, 7))
        known = sent.setdefault((exporter, domain), {})
        export_time = rng.choice((1_795_635_606, 0, 1 << 31))
        roll = rng.random()
        if roll < 0.1 or not known:
            templates = {rng.randrange(279, 286): variant(rng, rng.choice(LAYOUTS)) for _ in range(rng.randint(1, 3))}
            known.update(templates)
            sets = [template_set(templates)]
            if rng.random() < 0.2:
                sets.append(data_datagram(rng, known, export_time, domain)[16:])  # data behind its template
            data = message(sets, export_time, domain)
        elif roll < 0.13:
            tid = rng.choice(list(known))
            if rng.random() < 0.5:  # the same fields, now describing the exporter: not flows
                sets = [options_template_set(tid, known[tid])]
            else:
                sets = [withdrawal_set(tid)]
                known.pop(tid)
            data = message(sets, export_time, domain)
        else:
            data = data_datagram(rng, known, export_time, domain)
        out.append((exporter, mutated(rng, data) if rng.random() < 0.2 else data))
    return out


def outcome(parser: ExportParser, data: bytes, exporter: str) -> list[FlowRecord] | str:
    try:
        return parser.parse(data, exporter)
    except MalformedExport as e:
        return f"malformed: {e}"


def state(parser: ExportParser) -> tuple:
    store = parser.templates
    return list(store.templates.items()), store.learned, store.evicted, parser.bad_records


class FastPathCount:
    """How many datagrams a parser's fast path read (rather than declined)."""

    def __init__(self, parser: ExportParser):
        self.read = self.declined = 0
        self._parse = parser._parse_data_sets
        parser._parse_data_sets = self  # type: ignore[method-assign]

    def __call__(self, data: bytes, exporter: str, domain: int, exported: float) -> list[FlowRecord] | None:
        records = self._parse(data, exporter, domain, exported)
        if records is None:
            self.declined += 1
        else:
            self.read += 1
        return records


# A store of 4 templates evicts all the time: its data sets mostly meet templates forgotten.
@pytest.mark.parametrize("seed,max_templates,least_read", [(36, 256, 800), (3600, 4, 150), (7, 256, 800)])
def test_the_fast_path_reads_every_datagram_as_netflume_does(seed, max_templates, least_read):
    fast, general = ExportParser(max_templates=max_templates), ExportParser(max_templates=max_templates, fast=False)
    fast_path = FastPathCount(fast)
    counts = {parser: Counter[str]() for parser in (fast, general)}
    for n, (exporter, data) in enumerate(stream(seed, 3000)):
        results = []
        for parser in (fast, general):
            result = outcome(parser, data, exporter)
            malformed = isinstance(result, str)
            counts[parser].update(datagrams=1, malformed=malformed, records=0 if malformed else len(result))
            results.append(result)
        assert results[0] == results[1], (n, data.hex())
        assert state(fast) == state(general), (n, data.hex())
    assert counts[fast] == counts[general]
    # positive controls: the fast path read most datagrams, with records in them, and declined some
    assert fast_path.read > least_read and fast_path.declined > 300, vars(fast_path)
    assert counts[fast]["records"] > least_read and counts[fast]["malformed"] > 50 and fast.bad_records > 50


def test_the_real_datagrams_take_the_fast_path_and_give_the_wire_records():
    fast, general = ExportParser(), ExportParser(fast=False)
    fast_path = FastPathCount(fast)
    for parser in (fast, general):
        parser.parse(DATAGRAMS[0], "127.0.0.1:4739")
    records = [[r for d in DATAGRAMS[1:] for r in parser.parse(d, "127.0.0.1:4739")] for parser in (fast, general)]
    assert records[0] == records[1] and len(records[0]) == len(FIXTURE["wire"])
    assert fast_path.read == len(DATAGRAMS) - 1 and fast_path.declined == 1  # the template datagram


def test_real_datagrams_of_both_families_are_read_alike_and_their_data_by_the_fast_path():
    fast, general = ExportParser(), ExportParser(fast=False)
    fast_path = FastPathCount(fast)
    records = []
    for data in CAPTURED:
        result = outcome(fast, data, "127.0.0.1:4739")
        assert result == outcome(general, data, "127.0.0.1:4739") and state(fast) == state(general)
        records += result
    assert len(fast.templates) == 89
    # declined: the 18 datagrams of templates, the options template and its one record, and 5 of
    # non-IP frames (ARP: templates 256 and 257 have no addresses; netflume's path counts the 3
    # egress records bad)
    assert fast_path.declined == 25 and fast_path.read == len(CAPTURED) - 25 and fast.bad_records == 3
    seen = {(r.proto, r.saddr, r.daddr) for r in records}
    for proto in (6, 17, 58):  # TCP, UDP, ICMPv6
        assert {(proto, "fd78::1", "fd78::2"), (proto, "fd78::2", "fd78::1")} <= seen, proto
    for proto in (6, 17, 1):
        assert {(proto, "10.78.0.1", "10.78.0.2"), (proto, "10.78.0.2", "10.78.0.1")} <= seen, proto


def test_a_reader_is_made_for_ovs_templates_and_refused_for_fields_it_cannot_read_as_netflume_does():
    parser = ExportParser(fast=False)
    for tid, specs in OVS.items():
        variants = {
            "as sent": specs,
            "IPv6": changed(specs, IPV6),
            "ports 4 bytes": changed(specs, {SPORT: (SPORT, 4), DPORT: (DPORT, 4)}),
            "proto 3 bytes": changed(specs, {PROTO: (PROTO, 3)}),
            "direction variable": changed(specs, {DIRECTION: (DIRECTION, VARIABLE)}),
            "no direction": [s for s in specs if s[0] != DIRECTION],
            "IPv4 to IPv6": changed(specs, {DST4: (DST6, 16)}),
        }
        readable = {}
        for name, variant_specs in variants.items():
            parser.parse(message([template_set({tid: variant_specs})], 0, 0), "x")
            readable[name] = RecordReader.of(parser.templates.get("x", 0, tid)[0]) is not None
        assert readable == {
            "as sent": True,
            "IPv6": True,
            "ports 4 bytes": True,
            "proto 3 bytes": False,
            "direction variable": False,
            "no direction": False,
            "IPv4 to IPv6": False,
        }, tid


def test_an_ipv6_address_is_spelt_as_netflume_spells_it():
    rng = random.Random(6)
    # every pattern of zero and non-zero groups, and embedded IPv4 addresses
    patterns = [
        b"".join(bytes(2) if mask >> g & 1 else rng.choice((b"\x00\x01", rng.randbytes(2))) for g in range(8))
        for mask in range(256)
        for _ in range(8)
    ]
    patterns += [ipv6_address(rng) for _ in range(4000)]
    spelt = {raw: ipv6_text(raw) for raw in patterns}
    assert spelt == {raw: str(ipaddress.IPv6Address(raw)) for raw in patterns}
    # positive control: the patterns hold the spellings that differ between the two ways
    assert {"::", "::1"} <= set(spelt.values()) and any(":0:0:" in text for text in spelt.values())
    assert any(text.startswith("::ffff:") for text in spelt.values())
