"""The switch's own per-connection records: OVS's IPFIX export, read on the router's loopback.

OVS counts every packet it forwards; with bridge-level IPFIX (`sampling=1`) it exports, every
`cache_active_timeout` seconds and when a flow ends, one record per direction of each connection
with its 5-tuple (IPv4 and IPv6), packets and bytes. That counts connections the controller's
packet copies miss (a burst of new connections is more than a device's packet-in meter lets
through, issue 26).

Parsing is netflume's (a kept IPFIX parser; on this OVS's datagrams PyPI's `netflow` 0.12.2 and
scapy raise, see controller/docs/flow-export.md); this module keeps what accounting needs and
bounds what a datagram can cost. OVS observes every packet twice, where it enters the bridge
(flowDirection 0) and where it leaves (1); only the egress observation is kept, so a record counts
what the switch forwarded, once, and a packet the switch dropped (a blocked device's) counts
nothing.
"""

from __future__ import annotations

import ipaddress
import logging
import queue
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from netflume import TemplateStore, parse_message

from .flows import FiveTuple

log = logging.getLogger(__name__)

IPFIX_VERSION = 10
EGRESS = 1  # IPFIX flowDirection
FLOW_START_DELTA_US, FLOW_END_DELTA_US = "ie158", "ie159"  # microseconds before the export time
MAX_TEMPLATES = 256  # OVS uses a few dozen (one per address family, protocol and direction)
MAX_TEMPLATE_FIELDS = 128  # OVS's longest has about 60
MAX_DATAGRAM = 65535
# OVS sends a datagram per record, in bursts when many connections end at once: the kernel's
# default receive buffer (about 200 KB) overflowed with 108 of 373 datagrams lost in an 80-connection
# burst here, so ask for more (as root past net.core.rmem_max).
RECEIVE_BUFFER = 8 * 1024 * 1024
SO_RCVBUFFORCE = 33  # Linux; the socket module does not name it
# What the collector parses at most, in datagrams a second (OVS sends about one per record, two
# records per connection direction: ingress and egress). Under the flood bench (3,000 new flows a
# second) OVS sent 6,900 a second; parsing them all took 74 % of a core in the controller's process
# and the second device's DHCP p99 went from 5 to 445 ms. 1,000 a second is about 10 % of a core
# here; a page load of 80 connections is about 370 datagrams, within the allowance's burst.
MAX_DATAGRAMS_PER_S = 1000


@dataclass(frozen=True, slots=True)
class FlowRecord:
    """One direction of one connection as the switch forwarded it during [start, end] (Unix time).

    Records of a long connection arrive every active timeout, each with the packets and bytes
    (IP bytes: headers and payload, not Ethernet) since the previous one: sum them."""

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


class ExportParser:
    """Datagram bytes to records, keeping the templates each exporter has sent (bounded)."""

    def __init__(self, max_templates: int = MAX_TEMPLATES, max_template_fields: int = MAX_TEMPLATE_FIELDS):
        self.templates = TemplateStore(max_templates=max_templates)
        self.max_template_fields = max_template_fields
        self.bad_records = 0

    def parse(self, data: bytes, exporter: str) -> list[FlowRecord]:
        """The egress records in `data`; MalformedExport for anything that is not a readable message."""
        if len(data) < 16 or int.from_bytes(data[:2], "big") != IPFIX_VERSION:
            raise MalformedExport("not an IPFIX message")
        if int.from_bytes(data[2:4], "big") != len(data):
            raise MalformedExport("message length is not the datagram's")
        stats: Counter[str] = Counter()
        try:
            header, flows, _options = parse_message(data, exporter, self.templates, stats)
        except Exception as e:  # the parser's own failure on hostile bytes costs only this datagram
            raise MalformedExport(f"unreadable: {type(e).__name__}") from e
        self._drop_oversized_templates()
        if header is None or stats["truncated"]:
            raise MalformedExport("truncated")
        records = []
        for flow in flows:
            record = self._record(flow, float(header["unix_secs"]))
            if record is not None:
                records.append(record)
        return records

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


def per_connection(records: list[FlowRecord]) -> dict[FiveTuple, list[int]]:
    """[packets, bytes] per direction of each connection: a batch's records (and a long connection's
    active-timeout records) summed."""
    out: dict[FiveTuple, list[int]] = {}
    for r in records:
        total = out.setdefault(FiveTuple(r.proto, r.saddr, r.sport, r.daddr, r.dport), [0, 0])
        total[0] += r.packets
        total[1] += r.octets
    return out


def tcp_totals(records: list[FlowRecord]) -> dict[tuple[str, int, str, int], list[int]]:
    """[packets, bytes] per direction of each TCP connection, keyed (saddr, sport, daddr, dport)."""
    return {(f.saddr, f.sport, f.daddr, f.dport): t for f, t in per_connection(records).items() if f.proto == 6}


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


class Collector:
    """A UDP socket on loopback that hands `on_records` batches of the switch's records.

    The socket is bound when the collector is made (in the caller's network namespace); `start`
    runs a reader thread (datagrams into a bounded queue: when the worker is behind, new ones are
    dropped and counted) and a worker thread (parse, then one callback per batch). Only datagrams
    from loopback are read: the exporter is OVS on the router itself. `stop` ends both threads.
    """

    def __init__(
        self,
        on_records: Callable[[list[FlowRecord]], None],
        host: str = "127.0.0.1",
        port: int = 0,
        queue_size: int = 4096,
        batch_datagrams: int = 64,
        max_rate: float = MAX_DATAGRAMS_PER_S,
    ):
        if not _loopback(host):
            raise ValueError(f"the collector listens on loopback only, not {host!r}")
        self.on_records = on_records
        self.parser = ExportParser()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
        except PermissionError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        self.sock.bind((host, port))
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.queue: queue.Queue[tuple[bytes, str]] = queue.Queue(maxsize=queue_size)
        self.batch_datagrams = batch_datagrams
        self.max_rate = max_rate
        self.counts: Counter[str] = Counter()
        self._cpu_ns: dict[str, int] = {}
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._read, name="flow-export-reader", daemon=True),
            threading.Thread(target=self._work, name="flow-export-worker", daemon=True),
        ]

    def start(self) -> Collector:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=5)
        self.sock.close()

    def stats(self) -> dict[str, int]:
        """datagrams read, records handed on, malformed and dropped datagrams, foreign senders, the
        threads' CPU time (ns)."""
        return {
            "datagrams": self.counts["datagrams"],
            "records": self.counts["records"],
            "malformed": self.counts["malformed"],
            "bad_records": self.parser.bad_records,
            "dropped": self.counts["dropped"],
            "foreign": self.counts["foreign"],
            "callback_errors": self.counts["callback_errors"],
            "cpu_ns": sum(self._cpu_ns.values()),
        }

    def _read(self) -> None:
        while not self._stopping.is_set():
            try:
                data, source = self.sock.recvfrom(MAX_DATAGRAM)
            except TimeoutError:
                continue
            except OSError:
                break
            if not _loopback(source[0]):
                self.counts["foreign"] += 1
                continue
            try:
                self.queue.put_nowait((data, f"{source[0]}:{source[1]}"))
            except queue.Full:
                self.counts["dropped"] += 1
            self._cpu_ns["reader"] = time.thread_time_ns()

    def _work(self) -> None:
        # Parsing runs in the controller's process (its GIL): at most max_rate datagrams a second, a
        # queue's worth at once; beyond, the queue fills and the reader drops (counted).
        allowance, last = float(self.queue.maxsize), time.monotonic()
        while not self._stopping.is_set():
            now = time.monotonic()
            allowance, last = min(float(self.queue.maxsize), allowance + (now - last) * self.max_rate), now
            if allowance < self.batch_datagrams:
                self._stopping.wait((self.batch_datagrams - allowance) / self.max_rate)
                continue
            try:
                batch = [self.queue.get(timeout=0.2)]
            except queue.Empty:
                continue
            while len(batch) < self.batch_datagrams:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            allowance -= len(batch)
            self._deliver(batch)
            self._cpu_ns["worker"] = time.thread_time_ns()

    def _deliver(self, batch: list[tuple[bytes, str]]) -> None:
        records: list[FlowRecord] = []
        for data, exporter in batch:
            self.counts["datagrams"] += 1
            try:
                records += self.parser.parse(data, exporter)
            except MalformedExport as e:
                self.counts["malformed"] += 1
                log.debug("flow export from %s: %s", exporter, e)
        if not records:
            return
        self.counts["records"] += len(records)
        try:
            self.on_records(records)
        except Exception:
            self.counts["callback_errors"] += 1
            log.exception("flow export: the records' callback failed")
