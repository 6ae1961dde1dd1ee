"""The switch's own per-connection records, measured against a real Open vSwitch (issue 26).

A private OVS (isp_flowvisor.testing.PrivateOVS: its own database and namespace, userspace
datapath) with one bridge acting as a plain learning switch; a web server and HOSTS hosts each in
a namespace of its own on veths (TX checksum offload off, as the userspace datapath needs). Every
host fetches a page COUNT times, PARALLEL connections at a time (what a browser does on a busy
page), while tcpdump on the server's veth records what the switch forwarded. OVS exports IPFIX
(`sampling=1`) to a `flow_export.Collector` on the OVS namespace's loopback, as on the router.

Prints, per run, the connections made and reported (both directions, packets and bytes within 1 %
of the capture), when the last one arrived, and the collector's CPU per record and per datagram
(its loop's, idle wake-ups included; its process's start, a new one each run, apart);
`--json` writes them for the bench (bench/results/flow_export.json).

Usage (from the repository root, as root; brings up namespaces, so one at a time):
  flock /tmp/homenet.lock nice -n 19 .venv/bin/python controller/tools/export_burst.py --runs 3 \
      --json bench/results/flow_export.json
The subcommands `serve` and `fetch` are what runs inside the namespaces.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import ctypes
import http.server
import json
import os
import resource
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import dpkt

from homework_controller.edge.feeds.flow_export import Collector, tcp_totals
from homework_controller.flows import FiveTuple

BRIDGE = "fxbr"
SUBNET = "10.77.0"
SERVER_IP = f"{SUBNET}.1"
PAGE_BYTES = 24_000
SERVER_LISTENING = "listening"  # the web server says so on its stdout once its socket is bound
_CLONE_NEWNET = 0x40000000


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the body (this thread only) in network namespace `name`: sockets made here stay in it."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/thread-self/ns/net") as own, open(f"/run/netns/{name}") as target:
        if libc.setns(target.fileno(), _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
        try:
            yield
        finally:
            libc.setns(own.fileno(), _CLONE_NEWNET)


def _sh(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result.stdout


@dataclass
class Connection:
    """One fetch as the client saw it, keyed like the switch's records (client port)."""

    host: str
    sport: int
    ok: bool


@dataclass
class Wire:
    """Per direction of each TCP connection: (saddr, sport, daddr, dport) -> [packets, IP bytes]."""

    counts: dict[tuple[str, int, str, int], list[int]] = field(default_factory=dict)


class BurstHome:
    """The bridge, the server and the hosts; `stop` leaves nothing behind."""

    def __init__(self, switch, workdir: Path, hosts: int = 1):
        self.switch = switch
        self.dir = workdir
        self.tag = f"{os.getpid() % 10000}"
        self.server_ns = f"fx{self.tag}s"
        self.host_ns = [f"fx{self.tag}h{i}" for i in range(hosts)]
        self.host_ips = [f"{SUBNET}.{10 + i}" for i in range(hosts)]
        self.procs: list[subprocess.Popen] = []

    def start(self) -> BurstHome:
        sw = self.switch
        sw.vsctl("add-br", BRIDGE, "--", "set", "bridge", BRIDGE, "datapath_type=netdev", "fail_mode=standalone")
        sw.bridges.append(BRIDGE)
        for n, (ns, ip) in enumerate([(self.server_ns, SERVER_IP), *zip(self.host_ns, self.host_ips, strict=True)]):
            outer, inner = f"fx{self.tag}o{n}", f"fx{self.tag}i{n}"
            _sh("ip", "netns", "add", ns)
            _sh("ip", "-n", sw.netns, "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
            for where, dev in ((sw.netns, outer), (ns, inner)):
                _sh("ip", "netns", "exec", where, "ethtool", "-K", dev, "tx", "off")
                _sh("ip", "-n", where, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            _sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", inner)
            sw.vsctl("add-port", BRIDGE, outer)
        (self.dir / "www").mkdir(exist_ok=True)
        (self.dir / "www" / "page").write_bytes(b"x" * PAGE_BYTES)
        server = self._in(self.server_ns, "serve", "--root", str(self.dir / "www"))
        self.procs.append(server)
        # A burst sent before the server listens is refused (a loaded machine starts Python slowly).
        started, _, _ = select.select([server.stdout], [], [], 60)
        if not started or server.stdout.readline().strip() != SERVER_LISTENING:
            raise RuntimeError(f"the burst's web server did not start listening (exit status {server.poll()})")
        for ns in self.host_ns:  # the switch learns every host before the burst
            _sh("ip", "netns", "exec", ns, "ping", "-c", "1", "-W", "5", SERVER_IP)
        return self

    def _in(self, ns: str, *args: str, **kw) -> subprocess.Popen:
        argv = ["ip", "netns", "exec", ns, sys.executable, __file__, *args]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kw)

    def enable_ipfix(self, port: int, active_timeout: int = 2) -> None:
        self.switch.vsctl(
            "--",
            "set",
            "Bridge",
            BRIDGE,
            "ipfix=@i",
            "--",
            "--id=@i",
            "create",
            "IPFIX",
            f'targets="127.0.0.1:{port}"',
            "sampling=1",
            f"cache_active_timeout={active_timeout}",
            "cache_max_flows=4096",
        )

    def enable_netflow(self, port: int, active_timeout: int = 2) -> None:
        self.switch.vsctl(
            "--",
            "set",
            "Bridge",
            BRIDGE,
            "netflow=@n",
            "--",
            "--id=@n",
            "create",
            "NetFlow",
            f'targets="127.0.0.1:{port}"',
            f"active_timeout={active_timeout}",
        )

    def disable_export(self) -> None:
        self.switch.vsctl("clear", "Bridge", BRIDGE, "ipfix", "netflow")

    @contextlib.contextmanager
    def capture(self) -> Iterator[Wire]:
        """What the switch forwarded, counted per TCP direction where it arrived: tcpdump `-Q in` on
        the server's and every host's veth (a packet a sender retransmits because the switch never
        took it counts once, as the switch forwarded it)."""
        stamp = time.monotonic_ns()
        taps = []
        for n, ns in enumerate([self.server_ns, *self.host_ns]):
            pcap = self.dir / f"cap{stamp}-{n}.pcap"
            argv = ["ip", "netns", "exec", ns, "tcpdump", "-i", f"fx{self.tag}i{n}", "-Q", "in", "-U", "-n"]
            proc = subprocess.Popen([*argv, "-w", str(pcap), "tcp"], stderr=subprocess.PIPE, text=True)
            taps.append((pcap, proc))
        wire = Wire()
        try:
            for pcap, _ in taps:
                _wait_for_file(pcap)
            time.sleep(0.3)
            yield wire
        finally:
            # tcpdump discards what is still in its ring when stopped: wait until it has written all
            _wait_until_still([pcap for pcap, _ in taps])
            errors = []
            for _, proc in taps:
                proc.terminate()
                errors.append(proc.communicate(timeout=10)[1])
        for err in errors:
            if "\n0 packets dropped by kernel" not in err:
                raise RuntimeError(f"tcpdump lost packets: {err.strip()}")
        for pcap, _ in taps:
            with pcap.open("rb") as f:
                for _, frame in dpkt.pcap.Reader(f):
                    ip = dpkt.ethernet.Ethernet(frame).data
                    if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
                        key = (socket.inet_ntoa(ip.src), ip.data.sport, socket.inet_ntoa(ip.dst), ip.data.dport)
                        count = wire.counts.setdefault(key, [0, 0])
                        count[0] += 1
                        count[1] += ip.len

    def burst(self, count: int, parallel: int) -> list[Connection]:
        """Every host fetches the page `count` times, `parallel` at a time, all hosts at once."""
        procs = [self._in(ns, "fetch", "--count", str(count), "--parallel", str(parallel)) for ns in self.host_ns]
        made = []
        for host, proc in zip(self.host_ips, procs, strict=True):
            out, _ = proc.communicate(timeout=120)
            made += [Connection(host, sport, ok) for sport, ok in json.loads(out)]
        return made

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        for ns in [self.server_ns, *self.host_ns]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _wait_until_still(paths: list[Path], quiet: float = 1.0, timeout: float = 20.0) -> None:
    deadline, sizes, since = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < deadline:
        now = [p.stat().st_size for p in paths]
        if now != sizes:
            sizes, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.1)


def _wait_for_file(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} never appeared")
        time.sleep(0.05)


class Sink:
    """The collector's callback for measurements: every batch's totals summed, and when the last came."""

    def __init__(self) -> None:
        self.summed: dict[FiveTuple, list[int]] = {}
        self.last_arrival = 0.0
        self.lock = threading.Lock()

    def __call__(self, batch: dict[FiveTuple, list[int]]) -> None:
        with self.lock:
            for flow, (pkts, octets) in batch.items():
                total = self.summed.setdefault(flow, [0, 0])
                total[0] += pkts
                total[1] += octets
            self.last_arrival = time.monotonic()

    def totals(self) -> dict[tuple[str, int, str, int], list[int]]:
        """Packets and bytes per TCP direction, summed over active-timeout records."""
        with self.lock:
            return tcp_totals(self.summed)


def both_directions(c: Connection) -> set[tuple[str, int, str, int]]:
    return {(c.host, c.sport, SERVER_IP, 80), (SERVER_IP, 80, c.host, c.sport)}


def await_reports(made: list[Connection], sink: Sink, within: float = 15.0, quiet: float = 3.0) -> None:
    """Wait (at most `within` s) until the switch has reported both directions of every connection
    made, then (at most `within` s more) until no record has come for `quiet` s (longer than the
    active timeout: a connection still open is reported again), so that a capture still running
    holds every packet reported. The quiet wait has its own time: on a loaded machine the reports
    can take most of `within`, and records still coming when the capture stops are counted by the
    switch but not on the wire (seen once as a failure that was the test's, not the switch's)."""
    deadline = time.monotonic() + within
    wanted = set().union(*map(both_directions, made))
    while time.monotonic() < deadline and not wanted <= sink.totals().keys():
        time.sleep(0.2)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and time.monotonic() - sink.last_arrival < quiet:
        time.sleep(0.2)


def unaccounted(made: list[Connection], reported: dict, wire: Wire, tolerance: float = 0.01) -> list[str]:
    """Each direction of a connection the switch did not report within `tolerance` of the wire:
    "saddr:sport>daddr:dport reported [packets, bytes] wire [packets, bytes]"."""
    out = []
    for c in made:
        for key in ((c.host, c.sport, SERVER_IP, 80), (SERVER_IP, 80, c.host, c.sport)):
            got, seen = reported.get(key), wire.counts.get(key)
            if not (got and seen and all(abs(g - s) <= tolerance * s for g, s in zip(got, seen, strict=True))):
                out.append(f"{key[0]}:{key[1]}>{key[2]}:{key[3]} reported {got} wire {seen}")
    return out


def accounted(made: list[Connection], reported: dict, wire: Wire, tolerance: float = 0.01) -> list[Connection]:
    """The connections whose both directions the switch reported, each within `tolerance` of the wire."""
    missing = " ".join(unaccounted(made, reported, wire, tolerance)) + " "
    return [c for c in made if f"{c.host}:{c.sport}>" not in missing and f">{c.host}:{c.sport} " not in missing]


@contextlib.contextmanager
def collector_in(switch, sink: Sink, port: int = 0) -> Iterator[Collector]:
    """A collector on the OVS namespace's loopback, where the switch's exports go."""
    with in_netns(switch.netns):
        collector = Collector(sink, port=port)
    collector.start()
    try:
        yield collector
    finally:
        collector.stop()


def run_once(home: BurstHome, count: int, parallel: int, settle: float = 15.0) -> dict:
    sink = Sink()
    with collector_in(home.switch, sink) as collector:
        home.enable_ipfix(collector.port)
        time.sleep(1.0)
        with home.capture() as wire:
            started = time.monotonic()
            made = home.burst(count, parallel)
            finished = time.monotonic()
            await_reports(made, sink, within=settle)
        reported = sink.totals()
        done = accounted(made, reported, wire)
        seen = [c for c in made if both_directions(c) <= reported.keys()]
        home.disable_export()
    stats = collector.stats()
    return {
        "hosts": len(home.host_ns),
        "connections_made": len(made),
        "fetches_ok": sum(c.ok for c in made),
        "connections_reported": len(done),
        "connections_seen_any_count": len(seen),
        "completeness": len(done) / len(made) if made else 0.0,
        "burst_seconds": round(finished - started, 3),
        "last_record_after_burst_s": round(max(0.0, sink.last_arrival - finished), 3),
        "datagrams": stats["datagrams"],
        "records": stats["records"],
        "malformed": stats["malformed"],
        "collector_cpu_us_per_record": round(stats["cpu_ns"] / 1000 / max(1, stats["records"]), 2),
        "collector_cpu_us_per_datagram": round(stats["cpu_ns"] / 1000 / max(1, stats["datagrams"]), 2),
        "collector_start_cpu_ms": round(stats["start_cpu_ns"] / 1e6, 1),
    }


def serve(root: str) -> None:
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=root)  # noqa: E731
    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None  # type: ignore[method-assign]
    http.server.ThreadingHTTPServer.request_queue_size = 256  # read when the server starts listening
    server = http.server.ThreadingHTTPServer((SERVER_IP, 80), handler)
    print(SERVER_LISTENING, flush=True)
    server.serve_forever()


def fetch(count: int, parallel: int) -> None:
    """`count` HTTP/1.0 fetches of the page, `parallel` at a time; prints [client port, ok] each."""

    def one(_: int) -> tuple[int, bool]:
        with socket.create_connection((SERVER_IP, 80), timeout=30) as s:
            sport = s.getsockname()[1]
            s.sendall(b"GET /page HTTP/1.0\r\nHost: server\r\n\r\n")
            got = b""
            while chunk := s.recv(65536):
                got += chunk
            return sport, got.startswith(b"HTTP/1.0 200") and got.endswith(b"x" * 100)

    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        print(json.dumps(list(pool.map(one, range(count)))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd")
    s = sub.add_parser("serve")
    s.add_argument("--root", required=True)
    f = sub.add_parser("fetch")
    f.add_argument("--count", type=int, default=80)
    f.add_argument("--parallel", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=80)
    parser.add_argument("--parallel", type=int, default=40)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.cmd == "serve":
        return serve(args.root)
    if args.cmd == "fetch":
        return fetch(args.count, args.parallel)

    from isp_flowvisor.testing import PrivateOVS

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        switch = PrivateOVS(Path(tmp) / "ovs").start()
        try:
            for hosts in (1, 5):
                home = BurstHome(switch, Path(tmp), hosts).start()
                try:
                    for run in range(args.runs):
                        result = {"run": run + 1, **run_once(home, args.count, args.parallel)}
                        print(json.dumps(result), flush=True)
                        results.append(result)
                finally:
                    home.stop()
                    switch.vsctl("--if-exists", "del-br", BRIDGE)
                    switch.bridges.remove(BRIDGE)
        finally:
            switch.stop()
    if args.json:
        summary = {
            "what": "IPFIX from a real OVS (userspace datapath, sampling=1) through flow_export.Collector",
            "burst": f"{args.count} HTTP fetches per host, {args.parallel} at a time",
            "ru_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "runs": results,
        }
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
