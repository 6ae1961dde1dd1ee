"""`make bench`: the slicer beside the same households connected straight to the same switch.

Each of two switches is measured three ways in one run. The switches:

- "real_ovs": the private Open vSwitch of `isp_flowvisor.testing` (userspace datapath, its own
  namespace), a bridge per way; a flow-mod counts once the barrier after it is answered, i.e. once
  OVS has installed it (a refused one fails the bench). This is the baseline of issue 21's goal.
- "null_sink": an emulated switch (cbench-style: answers what a controller asks, counts flow-mods,
  installs nothing): the floor of framing, what relaying costs when the switch costs nothing.

The ways: "direct" = households -> switch; "slicer" = households -> the slicer (`isp-flowvisor`,
plain TCP) -> switch; "floor" = households -> a header-only relay -> switch, the least any relay
that multiplexes households onto one switch connection must do (frame the stream with the slicer's
own framing, give each message a switch-wide xid, route replies back), with no decoding and no
checks: where the slicer's cost lies. The households speak OpenFlow 1.3 through os-ken's codec;
each part is its own process. Results: bench/results/slicer.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from isp_flowvisor import codec, switchside
from isp_flowvisor.relay import _RECENT_LIMIT as RECENT_LIMIT
from isp_flowvisor.relay import read_frame, read_frames
from isp_flowvisor.scheduler import max_min_fair
from isp_flowvisor.testing import PrivateOVS, SlicerProcess, free_port, wait_until

HERE = Path(__file__).resolve().parent
C = codec.CODEC


# --- the emulated switch ----------------------------------------------------------------------


async def switch_session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counts: list[int]) -> None:
    writer.write(codec.hello())
    port = parser.OFPPort(1, "02:00:00:00:00:01", b"uplink", 0, 0, 0, 0, 0, 0, 0, 0)
    try:
        while True:
            frame = await read_frame(reader)
            _, msg_type, _, xid = codec.header(frame)
            if msg_type == ofp.OFPT_FLOW_MOD:
                counts[0] += 1
            elif msg_type == ofp.OFPT_BARRIER_REQUEST:
                writer.write(codec.encode(parser.OFPBarrierReply(C), xid))
            elif msg_type == ofp.OFPT_ECHO_REQUEST:
                writer.write(codec.encode(parser.OFPEchoReply(C, b""), xid))
            elif msg_type == ofp.OFPT_FEATURES_REQUEST:
                writer.write(switchside.features_reply(xid, 0xBE7C4, 254, 0))
            elif msg_type == ofp.OFPT_MULTIPART_REQUEST:
                request = codec.decode_request(frame)
                entries = (
                    switchside.port_desc_entries([port]) if isinstance(request, parser.OFPPortDescStatsRequest) else []
                )
                for part in switchside.multipart_reply(xid, request.type, entries):
                    writer.write(part)
            if writer.transport.get_write_buffer_size() > 1 << 16:
                await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass


async def run_switch(listen_port: int | None, connect_unix: str | None) -> None:
    counts = [0]
    if connect_unix:
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(connect_unix)
                await switch_session(reader, writer, counts)
            except OSError:
                pass
            await asyncio.sleep(0.2)
    server = await asyncio.start_server(lambda r, w: switch_session(r, w, counts), "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


# --- the header-only relay (mode "floor") -----------------------------------------------------


# The requests the bench's households send that the switch answers (in one part).
ANSWERED = {ofp.OFPT_BARRIER_REQUEST, ofp.OFPT_ECHO_REQUEST}


def _renumbered(frame: bytes, xid: int) -> bytes:
    return frame[:4] + struct.pack("!I", xid) + frame[8:]


class HeaderOnlyRelay:
    """Frames, renumbers and routes; never decodes a body or checks anything."""

    def __init__(self) -> None:
        self.switch: asyncio.StreamWriter | None = None
        self.switch_ready = asyncio.Event()
        self.xid = 0
        self.awaiting: dict[int, tuple[asyncio.StreamWriter, int]] = {}
        self.recent: dict[int, tuple[asyncio.StreamWriter, int]] = {}

    async def on_switch(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(codec.hello())
        await read_frame(reader)  # its hello
        self.switch = writer
        self.switch_ready.set()
        unread = bytearray()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                for frame in await read_frames(reader, unread):
                    xid = codec.header(frame)[3]
                    route = self.awaiting.pop(xid, None) or self.recent.pop(xid, None)
                    if route is not None:
                        household, xid = route
                        household.write(_renumbered(frame, xid))

    async def on_household(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(codec.hello())
        unread = bytearray()
        # The bench's "is it listening" probe connects and leaves without a word.
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await read_frame(reader)  # its hello
            while True:
                out = []
                for frame in await read_frames(reader, unread):
                    self.xid = self.xid % 0xFFFFFFFF + 1
                    _, msg_type, _, xid = codec.header(frame)
                    if msg_type in ANSWERED:
                        self.awaiting[self.xid] = (writer, xid)
                    else:  # answered only by an error: kept for as many messages as the slicer keeps
                        self.recent[self.xid] = (writer, xid)
                        self.recent.pop(self.xid - RECENT_LIMIT, None)
                    out.append(_renumbered(frame, self.xid))
                assert self.switch is not None
                self.switch.write(b"".join(out))


async def run_header_only_relay(listen_port: int, switch_socket: str) -> None:
    relay = HeaderOnlyRelay()
    switch_side = await asyncio.start_unix_server(relay.on_switch, switch_socket)
    await relay.switch_ready.wait()  # households are let in once there is a switch to relay to
    household_side = await asyncio.start_server(relay.on_household, "127.0.0.1", listen_port)
    async with switch_side, household_side:
        await asyncio.gather(switch_side.serve_forever(), household_side.serve_forever())


# --- emulated households ----------------------------------------------------------------------


class BenchHousehold:
    def __init__(self, index: int):
        self.index = index
        self.source = f"127.1.{index // 250}.{index % 250 + 1}"
        self.network = f"10.{index // 250}.{index % 250}.0/24"
        host = f"10.{index // 250}.{index % 250}.7"
        rule = parser.OFPFlowMod(
            C,
            priority=10,
            match=parser.OFPMatch(eth_type=0x0800, ipv4_dst=host),
            instructions=[
                parser.OFPInstructionActions(
                    ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionSetQueue(1), parser.OFPActionOutput(ofp.OFPP_NORMAL)]
                )
            ],
        )
        self.flow_mod = codec.encode(rule, 1)
        self.acked = 0
        self.reader: asyncio.StreamReader
        self.writer: asyncio.StreamWriter
        self.xid = 0

    def record(self) -> dict:
        return {
            "name": f"h{self.index}",
            "slot": self.index + 1,
            "addresses": [self.network],
            "source_address": self.source,
            "flow_quota": 100,
            "msg_rate": 1e7,
            "msg_burst": 10**7,
        }

    async def connect(self, target: int | str) -> None:
        """To a TCP port on 127.0.0.1 from the household's own address, or to a Unix socket (OVS's)."""
        if isinstance(target, str):
            self.reader, self.writer = await asyncio.open_unix_connection(target, limit=1 << 20)
        else:
            self.reader, self.writer = await asyncio.open_connection(
                "127.0.0.1", target, local_addr=(self.source, 0), limit=1 << 20
            )
        self.writer.write(codec.hello())
        await read_frame(self.reader)

    async def barrier(self) -> None:
        self.xid += 1
        self.writer.write(codec.encode(parser.OFPBarrierRequest(C), self.xid))
        while True:
            frame = await read_frame(self.reader)
            _, msg_type, _, xid = codec.header(frame)
            if msg_type == ofp.OFPT_ERROR:  # a refused flow-mod must not count as installed
                raise RuntimeError(f"household {self.index}: {codec.decode(frame)}")
            if msg_type == ofp.OFPT_BARRIER_REPLY and xid == self.xid:
                return

    async def window(self, size: int) -> None:
        self.writer.write(self.flow_mod * size)
        await self.barrier()
        self.acked += size

    def close(self) -> None:
        self.writer.close()


async def connect_all(households: list[BenchHousehold], target: int | str) -> None:
    # OVS's Unix listener has a short backlog (a connect beyond it fails at once): one at a time there.
    batch = 1 if isinstance(target, str) else 100
    for start in range(0, len(households), batch):
        await asyncio.gather(*(h.connect(target) for h in households[start : start + batch]))


async def throughput(households: list[BenchHousehold], seconds: float, window: int) -> float:
    stop = time.monotonic() + seconds

    async def run(h: BenchHousehold) -> None:
        while time.monotonic() < stop:
            await h.window(window)

    for h in households:
        h.acked = 0
    start = time.monotonic()
    # A reply the relay lost would otherwise hang the bench.
    await asyncio.wait_for(asyncio.gather(*(run(h) for h in households)), seconds + 60)
    return sum(h.acked for h in households) / (time.monotonic() - start)


async def latency(probe: BenchHousehold, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        await probe.barrier()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def fairness(households: list[BenchHousehold], offered: list[float], seconds: float) -> dict:
    """Each household offers its rate open-loop (what is due by the clock, in windows of at most
    20 plus a barrier), so a slow reply does not lower what it asks for. Served = flow-mods whose
    window was acknowledged inside the measurement interval (after a 2 s warm-up), per second."""
    warmup = 2.0
    begin = time.monotonic() + warmup
    stop = begin + seconds
    counted = [0] * len(households)

    async def run(i: int, h: BenchHousehold, rate: float) -> None:
        start = time.monotonic()
        sent = 0
        while time.monotonic() < stop:
            due = int(rate * (time.monotonic() - start)) - sent
            if due > 0:
                size = min(due, 20)
                issued = time.monotonic()
                await h.window(size)
                sent += size
                if issued >= begin and time.monotonic() <= stop:
                    counted[i] += size
            else:
                await asyncio.sleep(0.01)

    await asyncio.gather(*(run(i, h, r) for i, (h, r) in enumerate(zip(households, offered, strict=True))))
    elapsed = seconds
    served = [n / elapsed for n in counted]
    fair = max_min_fair(offered, sum(served))
    ratios = [s / f for s, f in zip(served, fair, strict=True) if f > 0]
    deviation = max(abs(r - 1) for r in ratios)
    jain = sum(ratios) ** 2 / (len(ratios) * sum(r * r for r in ratios))
    return {
        "households": len(households),
        "offered_total": round(sum(offered)),
        "served_total": round(sum(served)),
        "max_deviation_from_max_min_fair_share": round(deviation, 4),
        "jain_index": round(jain, 4),
        "within_5_percent": sum(abs(r - 1) <= 0.05 for r in ratios),
        "offered": [round(o, 1) for o in offered],
        "served": [round(x, 1) for x in served],
        "fair_share": [round(f, 1) for f in fair],
    }


# --- orchestration ----------------------------------------------------------------------------


class Setup:
    """One way (`mode`) to one switch: households connect to `target` (a TCP port or a Unix socket).

    switch: a started PrivateOVS (a bridge of its own for this way, which `stop` removes) or None for
    the emulated null-sink switch. mode "direct": households connect to the switch itself; "floor":
    to the header-only relay; "slicer": to the slicer, with the bench's households registered."""

    def __init__(self, workdir: Path, mode: str, households: list[BenchHousehold], switch: PrivateOVS | None):
        self.mode = mode
        self.procs: list[subprocess.Popen] = []
        self.slicer: SlicerProcess | None = None
        self.ovs, self.bridge = switch, ""
        self.switch_pid: int | None = None
        me = [sys.executable, str(Path(__file__).resolve())]
        workdir.mkdir(parents=True, exist_ok=True)
        # OVS connects only to Unix sockets in its own run directory; the emulated switch to any.
        socket_dir = switch.dir if switch is not None else workdir
        switch_socket = socket_dir / f"{mode}-switch.sock"
        if mode == "floor":
            port = free_port()
            self.target: int | str = port
            self.procs.append(subprocess.Popen([*me, "floor-relay", str(port), str(switch_socket)]))
            wait_until(switch_socket.exists, 30, "the header-only relay")
        elif mode == "slicer":
            registry = workdir / "households.json"
            registry.write_text(
                json.dumps(
                    {
                        "next_slot": len(households) + 1,
                        "households": {
                            h.record()["name"]: {k: v for k, v in h.record().items() if k != "name"} for h in households
                        },
                    }
                )
            )
            self.slicer = SlicerProcess(
                workdir / "slicer", {"backend": "file", "path": str(registry)}, switch_socket=switch_socket
            ).start()
            self.target = self.slicer.household_port
        if switch is not None:
            self._start_bridge(switch, mode, switch_socket)
        elif mode == "direct":
            port = self.target = free_port()
            self.procs.append(subprocess.Popen([*me, "switch", "--listen", str(port)]))
            wait_until(lambda: _listening(port), 30, "the emulated switch")
            self.switch_pid = self.procs[-1].pid
        else:
            self.procs.append(subprocess.Popen([*me, "switch", "--connect", str(switch_socket)]))
            self.switch_pid = self.procs[-1].pid
        if self.slicer is not None:
            wait_until(self.slicer.switch_connected, 60, "the switch to reach the slicer")
        elif mode == "floor":
            wait_until(lambda: _listening(port), 30, "the switch to reach the header-only relay")

    def _start_bridge(self, switch: PrivateOVS, mode: str, switch_socket: Path) -> None:
        """A bridge of the real OVS for this way. Direct, OVS listens for the households itself
        (a passive controller target: every household is one of its controllers)."""
        self.bridge = f"fvb-{mode[0]}"  # its internal ports' names must fit in 15 characters
        if mode == "direct":
            # OVS listens only on Unix sockets named after the bridge in its run directory.
            self.target = str(switch.dir / f"{self.bridge}.households")
            switch.add_bridge(self.bridge, f"punix:{self.target}")
        else:
            switch.add_bridge(self.bridge, f"unix:{switch_socket}")
        # Idle households (most of the 1,000 while one is timed) answer no echo: OVS must not drop them.
        switch.vsctl("set", "controller", self.bridge, "inactivity_probe=0")
        if mode == "direct":
            wait_until(lambda: Path(str(self.target)).exists(), 30, "OVS to listen for households")
        self.switch_pid = int((switch.dir / "vswitchd.pid").read_text())

    def rules_on_switch(self) -> int | None:
        """The households' rules the real OVS holds (each sets a queue; the slicer's own rules do not)."""
        if self.ovs is None:
            return None
        return sum("set_queue:" in rule for rule in self.ovs.flows(self.bridge))

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.wait(10)
        if self.slicer is not None:
            self.slicer.stop()
        if self.ovs is not None:
            self.ovs.vsctl("--if-exists", "del-br", self.bridge)
            self.ovs.bridges.remove(self.bridge)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# A sample of the Prometheus text format: name, labels, value.
_SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _fast_path_counts(slicer: SlicerProcess) -> dict[str, float]:
    """The slicer's fast-path counters so far, from its /metrics: flow-mods served and taken by the fast
    path (summed over households), and each of its caches' hits and misses ("match hit", ...)."""
    counts: dict[str, float] = {}
    for name, labels, value in _SAMPLE.findall(slicer.metrics()):
        if name in ("isp_flowvisor_household_flow_mods_total", "isp_flowvisor_household_fast_path_total"):
            key = name.removeprefix("isp_flowvisor_household_").removesuffix("_total")
        elif name == "isp_flowvisor_fast_path_cache_lookups_total":
            label = dict(_LABEL.findall(labels))
            key = f"{label['part']} {label['result']}"
        else:
            continue
        counts[key] = counts.get(key, 0) + float(value)
    return counts


def _fast_path_rates(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """Between two readings: the fast path's share of the flow-mods, and each cache's hit rate."""
    spent = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    rates: dict[str, float | None] = {"fast_path_share": _share(spent["fast_path"], spent["flow_mods"])}
    for part in sorted({key.rsplit(" ", 1)[0] for key in spent if key.endswith((" hit", " miss"))}):
        hits, misses = spent[f"{part} hit"], spent[f"{part} miss"]
        rates[f"{part.replace(' ', '_')}_cache_hit_rate"] = _share(hits, hits + misses)
    return rates


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole else None


def _fds_and_rss(pid: int) -> tuple[int, int]:
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return fds, rss_kb


async def measure(
    mode: str, workdir: Path, sizes: list[int], seconds: float, soak: float, switch: PrivateOVS | None
) -> dict:
    largest = max(sizes)
    households = [BenchHousehold(i) for i in range(largest)]
    setup = Setup(workdir / mode, mode, households, switch)
    out: dict = {
        "throughput_msgs_per_s": {},
        "latency_ms": {},
        "relay_cpu_us_per_msg": {},
        "switch_cpu_us_per_msg": {},
        "households_cpu_us_per_msg": {},  # this process: what sending the load costs
    }
    if switch is not None:
        out["rules_on_switch"] = {}
    if setup.slicer is not None:
        # Whether the bench's flow-mods took the fast path, and its caches hit: the CPU per flow-mod
        # beside them says why a run on another machine differs.
        out["fast_path"] = {}
    # CPU per flow-mod of what relays them (the slicer or the header-only relay; the switch itself
    # when direct) and of the switch: less sensitive than messages/s to what else the machine runs.
    relay_pid: int | None
    if setup.slicer is not None and setup.slicer.proc is not None:
        relay_pid = setup.slicer.proc.pid
    elif mode == "floor":
        relay_pid = setup.procs[0].pid
    else:
        relay_pid = setup.switch_pid
    assert relay_pid is not None and setup.switch_pid is not None
    try:
        await connect_all(households[:1], setup.target)
        samples = await latency(households[0], 2000)
        out["latency_ms"]["1"] = {"p50": percentile(samples, 50), "p99": percentile(samples, 99)}
        connected = 1
        for n in sizes:
            if n > connected:
                await connect_all(households[connected:n], setup.target)
                connected = n
            counted = _fast_path_counts(setup.slicer) if setup.slicer is not None else {}
            relay_cpu, switch_cpu = _cpu_seconds(relay_pid), _cpu_seconds(setup.switch_pid)
            households_cpu = time.process_time()
            out["throughput_msgs_per_s"][str(n)] = round(await throughput(households[:n], seconds, 20))
            messages = sum(h.acked for h in households[:n])
            relay_spent = _cpu_seconds(relay_pid) - relay_cpu
            out["households_cpu_us_per_msg"][str(n)] = round((time.process_time() - households_cpu) / messages * 1e6, 1)
            out["relay_cpu_us_per_msg"][str(n)] = round(relay_spent / messages * 1e6, 1)
            out["switch_cpu_us_per_msg"][str(n)] = round(
                (_cpu_seconds(setup.switch_pid) - switch_cpu) / messages * 1e6, 1
            )
            if setup.slicer is not None:
                out["fast_path"][str(n)] = _fast_path_rates(counted, _fast_path_counts(setup.slicer))
            if switch is not None:
                out["rules_on_switch"][str(n)] = setup.rules_on_switch()
        samples = await latency(households[0], 2000)
        out["latency_ms"][str(largest)] = {"p50": percentile(samples, 50), "p99": percentile(samples, 99)}
        for h in households[100:]:
            h.close()
        # Fairness and the soak against the real switch only. The header-only relay serves in
        # arrival order: nothing to be fair with.
        if switch is not None and mode != "floor":
            capacity = out["throughput_msgs_per_s"].get("100") or out["throughput_msgs_per_s"][str(sizes[0])]
            weights = [1 / (i + 1) for i in range(100)]  # Zipf: a few heavy households, many light ones
            offered = [2 * capacity * w / sum(weights) for w in weights]
            out["fairness"] = await fairness(households[:100], offered, 2 * seconds)
            if soak and setup.slicer is not None:
                out["soak"] = await soak_run(setup, households[:100], soak)
    finally:
        for h in households:
            if hasattr(h, "writer"):
                h.close()
        setup.stop()
    return out


async def soak_run(setup: Setup, households: list[BenchHousehold], seconds: float) -> dict:
    """Moderate load with reconnect churn; the slicer's descriptors and memory sampled throughout."""
    assert setup.slicer is not None and setup.slicer.proc is not None
    pid = setup.slicer.proc.pid
    samples = []
    stop = time.monotonic() + seconds
    churned = 0

    async def load(h: BenchHousehold) -> None:
        while time.monotonic() < stop:
            await h.window(5)
            await asyncio.sleep(0.05)

    async def churn() -> None:
        nonlocal churned
        i = 0
        while time.monotonic() < stop:
            await asyncio.sleep(0.5)
            h = households[50 + i % 50]
            i += 1
            h.close()
            await h.connect(setup.target)
            churned += 1

    async def sample() -> None:
        while time.monotonic() < stop:
            samples.append((round(seconds - (stop - time.monotonic())), *_fds_and_rss(pid)))
            await asyncio.sleep(max(1.0, seconds / 60))

    await asyncio.gather(*(load(h) for h in households[:50]), churn(), sample())
    quarter = max(1, len(samples) // 4)
    first = samples[:quarter]
    last = samples[-quarter:]
    return {
        "seconds": seconds,
        "reconnects": churned,
        "fds_first_quarter_max": max(s[1] for s in first),
        "fds_last_quarter_max": max(s[1] for s in last),
        "rss_kb_first_quarter_mean": round(statistics.mean(s[2] for s in first)),
        "rss_kb_last_quarter_mean": round(statistics.mean(s[2] for s in last)),
        "samples": samples,
    }


def main() -> int:
    parser_ = argparse.ArgumentParser(prog="slicer_bench")
    sub = parser_.add_subparsers(dest="command", required=True)
    switch = sub.add_parser("switch", help="run the emulated switch")
    switch.add_argument("--listen", type=int)
    switch.add_argument("--connect")
    floor_relay = sub.add_parser("floor-relay", help="run the header-only relay")
    floor_relay.add_argument("port", type=int, help="households connect here (TCP, 127.0.0.1)")
    floor_relay.add_argument("switch_socket", help="the switch connects here (Unix socket)")
    run = sub.add_parser("run", help="the whole bench")
    run.add_argument("--out", type=Path, default=HERE.parent.parent / "bench" / "results" / "slicer.json")
    run.add_argument("--seconds", type=float, default=10.0, help="length of each throughput/fairness run")
    run.add_argument("--soak", type=float, default=600.0, help="length of the soak, seconds")
    run.add_argument("--sizes", default="1,100,1000")
    args = parser_.parse_args()
    if args.command == "switch":
        asyncio.run(run_switch(args.listen, args.connect))
        return 0
    if args.command == "floor-relay":
        asyncio.run(run_header_only_relay(args.port, args.switch_socket))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.monotonic()
    result: dict = {
        "bench": "isp-flowvisor",
        "machine": {"cores": os.cpu_count(), "load_average_at_start": os.getloadavg()},
        "method": "households -> real OVS (userspace datapath) directly, through a header-only relay "
        "(frames, renumbers, routes; checks nothing) and through the slicer; the same against an emulated "
        "null-sink switch (installs nothing), the floor of framing. Throughput = flow-mods acknowledged by "
        "barrier per second, window 20; each part a process",
    }
    with tempfile.TemporaryDirectory(prefix="fv-bench-") as tmp:
        ovs = PrivateOVS(Path(tmp) / "ovs").start()
        try:
            for name, real in (("real_ovs", ovs), ("null_sink", None)):
                runs = {
                    mode: asyncio.run(
                        measure(mode, Path(tmp) / name, sizes, args.seconds, args.soak if real else 0, real)
                    )
                    for mode in ("direct", "floor", "slicer")
                }
                result[name] = {**runs, **_compared(runs)}
        finally:
            ovs.stop()
    result["duration_s"] = round(time.monotonic() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name in ("real_ovs", "null_sink"):
        runs = result[name]
        print(f"--- {name}")
        for mode in ("direct", "floor", "slicer"):
            print(
                f"{mode:7} flow-mods/s {json.dumps(runs[mode]['throughput_msgs_per_s'])}"
                f"  relay CPU us/flow-mod {json.dumps(runs[mode]['relay_cpu_us_per_msg'])}"
                f"  switch CPU us/flow-mod {json.dumps(runs[mode]['switch_cpu_us_per_msg'])}"
                f"  households CPU us/flow-mod {json.dumps(runs[mode]['households_cpu_us_per_msg'])}"
            )
        print(json.dumps({k: v for k, v in runs.items() if k not in ("direct", "floor", "slicer")}))
        print("fast path (slicer):", json.dumps(runs["slicer"]["fast_path"]))
        if "fairness" in runs["slicer"]:
            print(
                "fairness (slicer):",
                json.dumps(
                    {
                        k: v
                        for k, v in runs["slicer"]["fairness"].items()
                        if k not in ("offered", "served", "fair_share")
                    }
                ),
            )
        if "soak" in runs["slicer"]:
            print("soak:", json.dumps({k: v for k, v in runs["slicer"]["soak"].items() if k != "samples"}))
    return 0


def _compared(runs: dict) -> dict:
    """Relayed beside direct on the same switch: throughput ratios and the latency a relay adds."""
    direct = runs["direct"]

    def ratio_to_direct(run: dict) -> dict:
        return {
            n: round(run["throughput_msgs_per_s"][n] / direct["throughput_msgs_per_s"][n], 3)
            for n in direct["throughput_msgs_per_s"]
        }

    return {
        "throughput_ratio_slicer_over_direct": ratio_to_direct(runs["slicer"]),
        "throughput_ratio_floor_over_direct": ratio_to_direct(runs["floor"]),
        # Beside the ratios, what they hardly depend on: each relay's own CPU per flow-mod (and the
        # fast path's share and cache hit rates, in the slicer's run), so machines can be compared.
        "slicer_cpu_us_per_msg": runs["slicer"]["relay_cpu_us_per_msg"],
        "floor_cpu_us_per_msg": runs["floor"]["relay_cpu_us_per_msg"],
        "added_latency_ms": {
            n: {p: round(runs["slicer"]["latency_ms"][n][p] - direct["latency_ms"][n][p], 3) for p in ("p50", "p99")}
            for n in direct["latency_ms"]
        },
    }


if __name__ == "__main__":
    sys.exit(main())
