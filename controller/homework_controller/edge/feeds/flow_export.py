"""The switch's own per-connection records: OVS's IPFIX export, read on the router's loopback.

OVS counts every packet it forwards; with bridge-level IPFIX (`sampling=1`) it exports, every
`cache_active_timeout` seconds and when a flow ends, one record per direction of each connection
with its 5-tuple (IPv4 and IPv6), packets and bytes: every connection, however many a device opens
at once (copies of their first packets to the controller would be more than a device's packet-in
meter lets through, issue 26). It is the router's one way of counting connections.

Parsing is netflume's (a kept IPFIX parser; on this OVS's datagrams PyPI's `netflow` 0.12.2 and
scapy raise, see controller/docs/flow-export.md); this module keeps what accounting needs and
bounds what a datagram can cost. netflume decodes every field of a record into a dict (OVS's have
up to 67), most of the collector's time under a flood, so a datagram of data sets alone, each of a
template already known, is read by a fast path instead: a `RecordReader` compiled once per
template unpacks with `struct` only the fields kept here. Anything else (template sets, options,
unknown templates, a template whose kept fields are not plain, anything irregular) goes to
netflume untouched; tests/test_flow_export_fast_path.py checks that both paths agree.

OVS observes every packet twice, where it enters the bridge (flowDirection 0) and where it leaves
(1); only the egress observation is kept, so a record counts what the switch forwarded, once, and
a packet the switch dropped (a blocked device's) counts nothing.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from operator import itemgetter
from typing import Any, NamedTuple, TypeVar

from netflume import TemplateStore, parse_message

from ...flows import FiveTuple
from ...flows.values import unspecified

log = logging.getLogger(__name__)

IPFIX_VERSION = 10
EGRESS = 1  # IPFIX flowDirection
FLOW_START_DELTA_US, FLOW_END_DELTA_US = "ie158", "ie159"  # microseconds before the export time
MAX_TEMPLATES = 256  # OVS 3.1 sends 89 (per address family, protocol, direction, tunnel or not)
MAX_TEMPLATE_FIELDS = 128  # OVS 3.1's longest has 67
MAX_DATAGRAM = 65535
# OVS sends a datagram per record, in bursts when many connections end at once: the kernel's
# default receive buffer (about 200 KB) overflowed with 108 of 373 datagrams lost in an 80-connection
# burst here, so ask for more (as root past net.core.rmem_max).
RECEIVE_BUFFER = 8 * 1024 * 1024
SO_RCVBUFFORCE = 33  # Linux; the socket module does not name it
# Linux: the socket's memory counters, u32 each, SK_MEMINFO_DROPS the datagrams it dropped so far
# (read once a hand-over: the same count SO_RXQ_OVFL would attach to every datagram read).
SO_MEMINFO, SK_MEMINFO_VARS, SK_MEMINFO_DROPS = 55, 9, 8
# Datagrams read in a row before the loop looks at the clock: under a flood the socket never empties.
BURST = 256
# The pause after the socket is emptied, before waiting for it again: a wake-up costs more than a
# datagram's parse (11-12 us a datagram when woken for each, 5-6 us read in batches, docs/flow-
# export.md), so at most 100 wake-ups a second however OVS spaces its datagrams, for a record summed
# at most 10 ms later and the flood's 70 datagrams waiting in the receive buffer meanwhile.
READ_PAUSE_S = 0.01
# Connection directions the collector sums between two hand-overs (a second); beyond, by address.
# A flood of 3,000 new connections a second is 6,000 directions.
MAX_DIRECTIONS = 65536
MAX_OVERFLOW_ADDRESSES = 4096
RESTART_DELAY_S = 0.5
CHILD_NICENESS = 10


class FlowRecord(NamedTuple):
    """One direction of one connection as the switch forwarded it during [start, end] (Unix time).

    Records of a long connection arrive every active timeout, each with the packets and bytes
    (IP bytes: headers and payload, not Ethernet) since the previous one: sum them. A named tuple,
    not a frozen dataclass: one is made for every record, a sixth of the time, and its first five
    fields are its connection direction (`record[:5]`)."""

    proto: int
    saddr: str
    sport: int
    daddr: str
    dport: int
    packets: int
    octets: int
    start: float
    end: float


class MalformedExport(ValueError):
    """A datagram that is not an IPFIX message this collector can read."""


VARIABLE_LENGTH = 0xFFFF  # a template field's length: each record says its own (RFC 7011 7)
# What the fast path reads of a record, by netflume's field names, in the order it hands them on.
READ_FIELDS = (
    "direction", "proto", "src_addr", "src_port", "dst_addr", "dst_port", "packets", "octets",
    FLOW_START_DELTA_US, FLOW_END_DELTA_US,
)  # fmt: skip
# Those netflume's path reads as 0 when a template lacks them (without the others a record is bad).
OPTIONAL_FIELDS = frozenset(("src_port", "dst_port", FLOW_START_DELTA_US, FLOW_END_DELTA_US))
UNSIGNED = {1: "B", 2: "H", 4: "I", 8: "Q"}  # netflume reads these big-endian, as struct's "!" does


def ipv6_text(raw: bytes) -> str:
    """netflume's spelling of an IPv6 address (ipaddress's), at inet_ntop's speed (a fifth of the
    time): both compress as RFC 5952 says, but inet_ntop writes an embedded IPv4 address dotted."""
    text = socket.inet_ntop(socket.AF_INET6, raw)
    return str(ipaddress.IPv6Address(raw)) if "." in text else text


ADDRESSES = {("ipv4", 4): socket.inet_ntoa, ("ipv6", 16): ipv6_text}
# version, length, export time, sequence number, observation domain (RFC 7011 3.1)
MESSAGE_HEADER = struct.Struct("!HHIII")
SET_HEADER = struct.Struct("!HH")

Unpack = Callable[[bytes, int], tuple[Any, ...]]


class RecordReader:
    """One template's records read with `struct`, only the fields the controller keeps, exactly as
    netflume's `parse_data_record` and `ExportParser._record` would read them.

    A record is fixed-length stretches between variable-length fields (OVS sends interface names
    so); a stretch holding read fields is unpacked, the others and the variable-length fields are
    stepped over with netflume's bounds checks. `of` declines (None) a template it cannot read the
    same way: a field it reads missing (but for the optional ones), repeated, variable-length, or of
    a kind or length netflume would decode otherwise, or source and destination of different
    families."""

    __slots__ = ("min_length", "stretches", "pick", "address")

    def __init__(
        self,
        min_length: int,
        stretches: tuple[tuple[Unpack | None, int, bool], ...],
        pick: Callable[[tuple[Any, ...]], tuple[Any, ...]],
        address: Callable[[bytes], str],
    ):
        self.min_length, self.stretches, self.pick, self.address = min_length, stretches, pick, address

    @classmethod
    def of(cls, fields: Sequence[tuple[str, str, int]]) -> RecordReader | None:
        """The reader of a template's (name, kind, length) fields as netflume stores them, or None."""
        names = [name for name, _kind, _length in fields]
        if any(names.count(name) != 1 for name in READ_FIELDS if name not in OPTIONAL_FIELDS):
            return None
        if any(names.count(name) > 1 for name in OPTIONAL_FIELDS):
            return None
        stretches: list[tuple[Unpack | None, int, bool]] = []
        order: list[str] = []  # the read fields in the order the stretches unpack them
        families = set()
        codes, size, reads, min_length = "", 0, False, 0
        for name, kind, length in fields:
            if length == VARIABLE_LENGTH:
                if name in READ_FIELDS:
                    return None
                stretches.append((struct.Struct("!" + codes).unpack_from if reads else None, size, True))
                codes, size, reads, min_length = "", 0, False, min_length + 1
                continue
            size += length
            min_length += length
            if name not in READ_FIELDS:
                codes += f"{length}x" if length else ""
                continue
            if name in ("src_addr", "dst_addr"):
                if (kind, length) not in ADDRESSES:
                    return None
                families.add((kind, length))
                codes += f"{length}s"
            elif kind in ("uint", "auto") and length in UNSIGNED:
                codes += UNSIGNED[length]
            else:
                return None
            order.append(name)
            reads = True
        stretches.append((struct.Struct("!" + codes).unpack_from if reads else None, size, False))
        if len(families) != 1:
            return None
        absent = len(order)  # the index of the 0 `_read` appends to what a record unpacks
        pick = itemgetter(*(order.index(name) if name in order else absent for name in READ_FIELDS))
        return cls(max(min_length, 1), tuple(stretches), pick, ADDRESSES[families.pop()])

    def read_set(self, data: bytes, body: int, set_end: int, exported: float, records: list[FlowRecord]) -> int:
        """Appends to `records` the egress records of the data set data[body:set_end] and returns how
        many were bad, as netflume's path reads them: records while one fits, the set's rest dropped at
        the first that does not."""
        bad = 0
        while set_end - body >= self.min_length:
            read = self._read(data, body, set_end)
            if read is None:
                break
            values, body = read
            direction, proto, saddr, sport, daddr, dport, packets, octets, start_us, end_us = self.pick(values)
            if direction != EGRESS:
                continue
            if proto > 255 or sport > 65535 or dport > 65535:
                bad += 1
                continue
            start, end = exported - start_us / 1e6, exported - end_us / 1e6
            records.append(
                FlowRecord(proto, self.address(saddr), sport, self.address(daddr), dport, packets, octets, start, end)
            )
        return bad

    def _read(self, data: bytes, off: int, set_end: int) -> tuple[tuple[Any, ...], int] | None:
        values: tuple[Any, ...] = ()
        for unpack, size, variable_after in self.stretches:
            if off + size > set_end:
                return None
            if unpack is not None:
                values += unpack(data, off)
            off += size
            if variable_after:
                if off >= set_end:
                    return None
                length = data[off]
                off += 1
                if length == 255:
                    if off + 2 > set_end:
                        return None
                    length = int.from_bytes(data[off : off + 2], "big")
                    off += 2
                if off + length > set_end:
                    return None
                off += length
        return values + (0,), off


class ExportParser:
    """Datagram bytes to records, keeping the templates each exporter has sent (bounded).

    `fast=False` reads every datagram with netflume alone (the general path): the differential
    test and tools/export_parse.py measure the fast path against it."""

    def __init__(
        self, max_templates: int = MAX_TEMPLATES, max_template_fields: int = MAX_TEMPLATE_FIELDS, fast: bool = True
    ):
        self.templates = TemplateStore(max_templates=max_templates)
        self.max_template_fields = max_template_fields
        self.bad_records = 0
        self.fast = fast
        # (exporter, domain, template id) -> (the stored fields it was made of, its reader or None)
        self._readers: dict[tuple[str, int, int], tuple[list[tuple[str, str, int]], RecordReader | None]] = {}

    def parse(self, data: bytes, exporter: str) -> list[FlowRecord]:
        """The egress records in `data`; MalformedExport for anything that is not a readable message."""
        if len(data) < MESSAGE_HEADER.size:
            raise MalformedExport("not an IPFIX message")
        version, length, exported, _sequence, domain = MESSAGE_HEADER.unpack_from(data)
        if version != IPFIX_VERSION:
            raise MalformedExport("not an IPFIX message")
        if length != len(data):
            raise MalformedExport("message length is not the datagram's")
        if self.fast:
            records = self._parse_data_sets(data, exporter, domain, float(exported))
            if records is not None:
                return records
        stats: Counter[str] = Counter()
        try:
            header, flows, _options = parse_message(data, exporter, self.templates, stats)
        except Exception as e:  # the parser's own failure on hostile bytes costs only this datagram
            raise MalformedExport(f"unreadable: {type(e).__name__}") from e
        finally:
            if stats["templates_new"]:  # only a template learned or changed can be oversized
                self._drop_oversized_templates()
        if header is None or stats["truncated"]:
            raise MalformedExport("truncated")
        records = []
        for flow in flows:
            record = self._record(flow, float(header["unix_secs"]))
            if record is not None:
                records.append(record)
        return records

    def _parse_data_sets(self, data: bytes, exporter: str, domain: int, exported: float) -> list[FlowRecord] | None:
        """The fast path: the records of a message of data sets alone, each of a template with a
        reader; None (nothing read, nothing changed) for any other message."""
        templates = self.templates.templates
        records: list[FlowRecord] = []
        bad, used, off, end = 0, [], 16, len(data)
        while off < end:
            if end - off < 4:
                return None
            set_id, set_length = SET_HEADER.unpack_from(data, off)
            set_end = off + set_length
            if set_id < 256 or set_length < 4 or set_end > end:
                return None
            key = (exporter, domain, set_id)
            reader = self._reader(key)
            if reader is None:
                return None
            bad += reader.read_set(data, off + 4, set_end, exported, records)
            used.append(key)
            off = set_end
        for key in used:  # as netflume's reading of a data set does: a template in use is not evicted
            templates.move_to_end(key)
        self.bad_records += bad
        return records

    def _reader(self, key: tuple[str, int, int]) -> RecordReader | None:
        fields, options = self.templates.templates.get(key, (None, False))
        if fields is None or options:
            return None
        made = self._readers.get(key)
        if made is not None and made[0] is fields:  # a template sent again is stored anew: read afresh
            return made[1]
        if len(self._readers) >= self.templates.max_templates:  # keys the store evicted stay here
            self._readers.clear()
        reader = RecordReader.of(fields)
        self._readers[key] = (fields, reader)
        return reader

    def _drop_oversized_templates(self) -> None:
        oversized = [
            key for key, (fields, _) in self.templates.templates.items() if len(fields) > self.max_template_fields
        ]
        for key in oversized:
            del self.templates.templates[key]

    def _record(self, flow: dict[str, Any], exported: float) -> FlowRecord | None:
        if flow.get("direction") != EGRESS:
            return None
        try:
            saddr, daddr = flow["src_addr"], flow["dst_addr"]
            if not (isinstance(saddr, str) and isinstance(daddr, str)):
                raise ValueError("addresses")
            if ipaddress.ip_address(saddr).version != ipaddress.ip_address(daddr).version:
                raise ValueError("families")
            values = [flow["proto"], flow.get("src_port", 0), flow.get("dst_port", 0), flow["packets"], flow["octets"]]
            values += [flow.get(FLOW_START_DELTA_US, 0), flow.get(FLOW_END_DELTA_US, 0)]
            if not all(isinstance(v, int) and v >= 0 for v in values):
                raise ValueError("counters")
            proto, sport, dport, packets, octets, start_us, end_us = values
            if proto > 255 or sport > 65535 or dport > 65535:
                raise ValueError("ranges")
        except (KeyError, ValueError):
            self.bad_records += 1
            return None
        return FlowRecord(
            proto, saddr, sport, daddr, dport, packets, octets, exported - start_us / 1e6, exported - end_us / 1e6
        )


# A connection direction as the collector's process keys it: FiveTuple's fields in a plain tuple,
# which is equal to and hashes as the FiveTuple, and is made without a call (`record[:5]`).
Direction = tuple[int, str, int, str, int]
AnyDirection = TypeVar("AnyDirection", bound=Direction)  # a Direction or a FiveTuple


def tcp_totals(totals: Mapping[AnyDirection, list[int]]) -> dict[tuple[str, int, str, int], list[int]]:
    """[packets, bytes] per direction of each TCP connection, keyed (saddr, sport, daddr, dport)."""
    return {(saddr, sport, daddr, dport): t for (proto, saddr, sport, daddr, dport), t in totals.items() if proto == 6}


class ConnectionTotals:
    """What the collector sums between two hand-overs, in bounded memory: [packets, bytes] per
    connection direction, at most `max_directions` of them; beyond, a record is counted by its
    source address (the far side unspecified, protocol 0) and again by its destination (the near
    side unspecified), at most `max_addresses` of each, so the controller can count it as its
    device's whole (it knows which end is a device; this process does not). Beyond that, lost and
    counted."""

    def __init__(self, max_directions: int = MAX_DIRECTIONS, max_addresses: int = MAX_OVERFLOW_ADDRESSES):
        self.max_directions, self.max_addresses = max_directions, max_addresses
        self.totals: dict[Direction, list[int]] = {}
        self.by_source: dict[Direction, list[int]] = {}
        self.by_destination: dict[Direction, list[int]] = {}
        self.lost = 0

    def add(self, records: list[FlowRecord]) -> None:
        totals = self.totals
        for r in records:
            flow: Direction = r[:5]
            total = totals.get(flow)
            if total is None and len(totals) < self.max_directions:
                total = totals[flow] = [0, 0]
            if total is not None:
                total[0] += r.packets
                total[1] += r.octets
                continue
            source = (0, r.saddr, 0, unspecified(r.saddr), 0)
            destination = (0, unspecified(r.daddr), 0, r.daddr, 0)
            kept = False
            for table, key in ((self.by_source, source), (self.by_destination, destination)):
                if key in table or len(table) < self.max_addresses:
                    _add(table, key, r)
                    kept = True
            self.lost += not kept

    def take(self) -> dict[Direction, list[int]]:
        """Everything summed since the last take (the overflow keys are protocol 0)."""
        out = self.totals
        out.update(self.by_source)
        out.update(self.by_destination)
        self.totals, self.by_source, self.by_destination = {}, {}, {}
        return out


def _add(table: dict[Direction, list[int]], key: Direction, r: FlowRecord) -> None:
    total = table.setdefault(key, [0, 0])
    total[0] += r.packets
    total[1] += r.octets


# Every packet (sampling=1); an open connection is reported every 2 s; records for at most 4096
# connections wait in OVS's cache (beyond, it reports the oldest early: nothing is lost).
SWITCH_SETTINGS = ("sampling=1", "cache_active_timeout=2", "cache_max_flows=4096")


def export_to(bridge: str, port: int) -> None:
    """Have Open vSwitch export `bridge`'s records to this collector's port (OSError or
    subprocess.CalledProcessError when it cannot).

    The export is made afresh (cleared, then created), because OVS sends its templates only when
    an export starts and then every 10 minutes (RFC 5101's interval, fixed in OVS): a collector
    that starts after the export would read no record for up to 10 minutes."""
    vsctl = ["ovs-vsctl", "--timeout=5"]
    subprocess.run([*vsctl, "clear", "Bridge", bridge, "ipfix"], check=True, capture_output=True, timeout=10)
    create = ["--", "--id=@i", "create", "IPFIX", f'targets="127.0.0.1:{port}"', *SWITCH_SETTINGS]
    subprocess.run(
        [*vsctl, "--", "set", "Bridge", bridge, "ipfix=@i", *create], check=True, capture_output=True, timeout=10
    )


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=256)  # looked up for every datagram
def _exporter(source: tuple[Any, ...]) -> str | None:
    """The name a sender's templates are kept under ("host:port"), None for a sender not on loopback."""
    return f"{source[0]}:{source[1]}" if _loopback(source[0]) else None


class Collector:
    """The switch's records, read and summed in a process of its own; the controller gets one batch
    of totals a second.

    Parsing is most of the cost (about 100 us a datagram, and OVS sends about 6,900 a second when a
    device floods new connections): in the controller's process it held the GIL from DHCP. Here the
    UDP socket is bound on loopback when the collector is made (in the caller's network namespace)
    and handed to a child process (`python -m homework_controller.edge.feeds.flow_export`, niced) that reads,
    parses and sums per connection direction (`ConnectionTotals`, bounded), and every
    `interval_s` sends the totals and its counts through a pipe. A thread here calls
    `on_totals(totals)` with each batch ([packets, IP bytes] per `FiveTuple`). The child ends when
    the controller does (its pipe closes, its parent changes); a child that dies is started again
    (`restarts` in `stats`; the socket and what waits in it are kept) and `on_restart()` is called:
    the new child knows no templates, so the controller makes the switch's export afresh (OVS
    would send them again only after 10 minutes, see `export_to`). Only datagrams from loopback
    are read: the exporter is OVS on the router itself.
    """

    def __init__(
        self,
        on_totals: Callable[[dict[FiveTuple, list[int]]], None],
        host: str = "127.0.0.1",
        port: int = 0,
        interval_s: float = 1.0,
        max_directions: int = MAX_DIRECTIONS,
        on_restart: Callable[[], None] | None = None,
    ):
        if not _loopback(host):
            raise ValueError(f"the collector listens on loopback only, not {host!r}")
        self.on_totals, self.on_restart = on_totals, on_restart
        self.interval_s, self.max_directions = interval_s, max_directions
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
        except PermissionError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        self.sock.bind((host, port))
        self.port: int = self.sock.getsockname()[1]
        self.child: subprocess.Popen | None = None
        self._pipe: Connection | None = None
        self.restarts = 0
        self.counts: Counter[str] = Counter()  # the children's counts that ended, and the handing-on's
        self._child_counts: dict[str, int] = {}
        self.dropped_before = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="flow-export", daemon=True)

    def start(self) -> Collector:
        self._spawn()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._end_child()
        self.sock.close()

    def stats(self) -> dict[str, int]:
        """datagrams read, records summed, malformed datagrams, bad records, datagrams dropped at the
        socket (the child behind), records lost (beyond the bounds), foreign senders, callback errors,
        the child's CPU time (ns) in its loop and before it (`start_cpu_ns`: the interpreter and its
        imports, about 0.1 s, which is no datagram's cost) and how often it was restarted."""
        total = self.counts + Counter(self._child_counts)
        names = "datagrams records malformed bad_records lost foreign callback_errors cpu_ns start_cpu_ns".split()
        return dict(
            {name: total[name] for name in names},
            dropped=self._child_counts.get("dropped", self.dropped_before),
            running=int(self.child is not None and self.child.poll() is None),
            restarts=self.restarts,
        )

    def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            args = [str(self.sock.fileno()), str(theirs.fileno()), str(os.getpid()), str(self.interval_s)]
            self.child = subprocess.Popen(
                [sys.executable, "-m", __name__, *args, str(self.max_directions)],
                pass_fds=(self.sock.fileno(), theirs.fileno()),
            )
        self._pipe = Connection(ours.detach())

    def _end_child(self) -> None:
        if self._pipe is not None:
            self._pipe.close()
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()
            try:
                self.child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()
        # the socket's drops are its own total, whichever child read it
        self.dropped_before = self._child_counts.pop("dropped", self.dropped_before)
        self.counts.update(self._child_counts)
        self._child_counts = {}

    def _serve(self) -> None:
        while not self._stopping.is_set():
            assert self._pipe is not None and self.child is not None
            try:
                if not self._pipe.poll(0.5):
                    if self.child.poll() is None:
                        continue
                    raise EOFError
                rows, self._child_counts = self._pipe.recv()
            except (EOFError, OSError):
                if self._stopping.is_set():
                    break
                log.error("the flow collector process ended (%s); starting it again", self.child.poll())
                self._end_child()
                self.restarts += 1
                self._stopping.wait(RESTART_DELAY_S)
                self._spawn()
                if self.on_restart is not None:
                    try:
                        self.on_restart()
                    except Exception:
                        log.exception("flow export: the restart's callback failed")
                continue
            try:
                self.on_totals({FiveTuple(*row[:5]): [row[5], row[6]] for row in rows})
            except Exception:
                self.counts["callback_errors"] += 1
                log.exception("flow export: the totals' callback failed")


def socket_drops(sock: socket.socket) -> int:
    """How many datagrams the socket has dropped so far (its receive buffer full), as Linux counts them."""
    counters = sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 4 * SK_MEMINFO_VARS)
    return int.from_bytes(counters[4 * SK_MEMINFO_DROPS : 4 * (SK_MEMINFO_DROPS + 1)], sys.byteorder)


def collect(sock: socket.socket, pipe: Connection, parent: int, interval_s: float, max_directions: int) -> None:
    """The child's loop: read, parse, sum; every interval_s hand the totals and counts on. Ends when
    the pipe breaks or the parent is gone.

    It waits for the socket, reads every datagram waiting (BURST at a time) without blocking, and
    once the socket is empty pauses (READ_PAUSE_S) before it waits again: a wake-up costs more than
    a datagram's parse, and a blocking read with a timeout would poll before every read."""
    parser, totals = ExportParser(), ConnectionTotals(max_directions)
    counts = {"start_cpu_ns": (started := time.process_time_ns())}
    sock.setblocking(False)
    readable = select.poll()
    readable.register(sock, select.POLLIN)
    wait_ms = min(200, round(interval_s * 1000))
    datagrams = records = malformed = foreign = 0
    due = time.monotonic() + interval_s
    while True:
        readable.poll(wait_ms)
        for _ in range(BURST):
            try:
                data, source = sock.recvfrom(MAX_DATAGRAM)
            except BlockingIOError:  # all read: let the next ones gather rather than wake for each
                time.sleep(READ_PAUSE_S)
                break
            exporter = _exporter(source)
            if exporter is None:
                foreign += 1
                continue
            datagrams += 1
            try:
                read = parser.parse(data, exporter)
            except MalformedExport as e:
                malformed += 1
                log.debug("flow export from %s: %s", exporter, e)
            else:
                records += len(read)
                totals.add(read)
        if time.monotonic() < due:
            continue
        due = time.monotonic() + interval_s
        if os.getppid() != parent:
            return
        counts.update(datagrams=datagrams, records=records, malformed=malformed, foreign=foreign)
        counts["dropped"] = socket_drops(sock)  # the socket's total so far, whichever child read it
        counts.update(bad_records=parser.bad_records, lost=totals.lost, cpu_ns=time.process_time_ns() - started)
        rows = [(*flow, packets, octets) for flow, (packets, octets) in totals.take().items()]
        try:
            pipe.send((rows, counts))
        except OSError:
            return


def main(argv: list[str]) -> None:
    sock_fd, pipe_fd, parent, interval_s, max_directions = argv
    os.nice(CHILD_NICENESS)  # DHCP and the controller come first when the cores are busy
    with socket.socket(fileno=int(sock_fd)) as sock, Connection(int(pipe_fd)) as pipe:
        collect(sock, pipe, int(parent), float(interval_s), int(max_directions))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        pass
