"""The controller's per-message DHCP cost, measured in-process: a DHCP storm without the network.

Drives the path a frame takes from the packet socket to the answer (`DhcpPort._serve`'s per-frame
work -> `FairServer.on_dhcp` -> the fair queue -> `serve_one_turn`: `router.joining.on_dhcp` under the lock,
its effects carried out -> the answer handed to the socket's `send`) for COUNT fresh MACs: a burst
of DISCOVERs, then a REQUEST for each OFFER, built as bench/dhcp_storm_client.py builds them (scapy).
Only the socket (a stand-in that hands out the frames and keeps the answers) and the switch
connection (a stand-in that serialises each OpenFlow message with os-ken, as a datapath does, and
counts them) are replaced. Each round is a fresh router with an empty store, as each round of the
`dhcp_storm` bench is; logging goes through the controller's log writer at INFO (to /dev/null),
and hwdb rows through a real `HwdbLog` whose client sends nothing.

What it prints, per message, medians (and minimums) over the rounds:
  DISCOVER / REQUEST   CPU time of the serving thread, recvfrom to send, in one burst (one thread
                       reads the burst, then serves it: CPU time, unlike wall time, does not count
                       what this shared machine gives other processes)
  held rules           the rule and meter changes the answers brought, sent once the storm is quiet
                       (os-ken encoding), per newcomer
  cpu, all threads     the process's CPU time over the whole round (the store's, hwdb's and the log's
                       writers and the held rules included), per message
--threads: the same storms with the controller's own two threads (the socket's, and fair serving's worker
fed through the fair queue): wall time from a burst's first frame to its last answer, and every
thread's CPU time over the two bursts. --profile: a cProfile breakdown of the serving thread.

Usage (from the repository root):
  .venv/bin/python controller/tools/dhcp_path.py [--devices 100] [--rounds 30] [--threads] [--profile] [--json F]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import logging
import os
import pstats
import queue
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import dpkt
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser
from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from homework_controller.api.server import TimedLock
from homework_controller.config import CONFIG
from homework_controller.core.router import HomeRouter
from homework_controller.edge.feeds import log_writer
from homework_controller.edge.feeds.hwdb_log import BATCH_SECONDS, HwdbLog
from homework_controller.edge.lan.dhcp_port import ETH_P_IP, MAX_WAITING_ANSWERS, DhcpPort
from homework_controller.edge.lan.lan_addresses import LanAddresses
from homework_controller.edge.outbox import Outbox
from homework_controller.edge.supervised import SocketService
from homework_controller.edge.switch.fair_serving import FairServer
from homework_controller.edge.switch.held import ANSWER
from homework_controller.edge.switch.sink import EdgeSink
from homework_controller.edge.switch.switch_connection import SwitchConnection
from homework_controller.policy import dhcp
from homework_controller.radio.hostapd_ctrl import Authenticator
from homework_controller.store import DeviceStore
from homework_controller.wire import dhcp_wire

WLAN_PORT, ROUTER_MAC = 1, "02:00:00:00:00:01"
PACKET_HOST = 0  # linux/if_packet.h: a frame addressed to this host (what the socket reads from devices)


def client_frame(mac: str, xid: int, msg_type: str, options=()) -> bytes:
    """As the storm client builds them (bench/dhcp_storm_client.py `frame`)."""
    return bytes(
        Ether(src=mac, dst="ff:ff:ff:ff:ff:ff")
        / IP(src="0.0.0.0", dst="255.255.255.255")
        / UDP(sport=68, dport=67)
        / BOOTP(op=1, xid=xid, chaddr=bytes.fromhex(mac.replace(":", "")))
        / DHCP(options=[("message-type", msg_type), ("hostname", f"storm-{xid & 0xffff}"), *options, "end"])
    )


def request_for(offer: bytes, mac: str) -> bytes:
    """The REQUEST the storm client sends for an OFFER (server id and offered address filled in)."""
    msg = dpkt.dhcp.DHCP(dpkt.ethernet.Ethernet(offer).data.data.data)
    server, addr = (
        socket.inet_ntoa(dict(msg.opts)[dhcp_wire.OPT_SERVER_ID]),
        socket.inet_ntoa(msg.yiaddr.to_bytes(4, "big")),
    )
    data = bytearray(client_frame(mac, msg.xid, "request", [("server_id", server), ("requested_addr", addr)]))
    data[40:42] = b"\x00\x00"  # the storm client sends no UDP checksum
    return bytes(data)


class Drained(Exception):
    """The socket stand-in has handed out every frame: ends `DhcpPort._serve`'s loop."""


class PacketSocket:
    """The LAN interface's packet socket: hands out the frames queued in `incoming`, keeps what is sent."""

    def __init__(self):
        self.incoming: deque[bytes] = deque()
        self.sent: list[bytes] = []

    def recvfrom(self, _size: int):
        if not self.incoming:
            raise Drained()
        return self.incoming.popleft(), ("lan", ETH_P_IP, PACKET_HOST, 1, b"")

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        return len(data)


class ThreadedPacketSocket(PacketSocket):
    """The same, for `DhcpPort._serve` on a thread of its own: recvfrom waits for a frame (None: the end),
    and `answered` is set once `expected` answers have been sent."""

    def __init__(self):
        super().__init__()
        self.frames: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.expected = 0
        self.answered = threading.Event()

    def recvfrom(self, _size: int):
        data = self.frames.get()
        if data is None:
            raise Drained()
        return data, ("lan", ETH_P_IP, PACKET_HOST, 1, b"")

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        if len(self.sent) >= self.expected:
            self.answered.set()
        return len(data)


class Datapath:
    """The switch as `SwitchConnection` uses os-ken's: messages are serialised by os-ken's codec before they
    reach it, and each buffer written to it is counted in OpenFlow messages (a change's messages come as one
    buffer)."""

    ofproto, ofproto_parser, id = ofproto_v1_3, ofproto_v1_3_parser, 1
    send_q = None  # no socket writer to wait for

    def __init__(self):
        self.sent = 0

    def set_xid(self, msg) -> None:
        msg.set_xid(0)

    def send_msg(self, msg) -> None:
        self.set_xid(msg)
        msg.serialize()
        self.send(msg.buf)

    def send(self, data: bytes) -> None:
        at = 0
        while at < len(data):  # an OpenFlow header's length field says where the next message begins
            at += int.from_bytes(data[at + 2 : at + 4], "big")
            self.sent += 1


class QuietHwdb:
    def query(self, _statement: str) -> None:
        pass


def controller(store_path: str, sock: PacketSocket, hwdb: HwdbLog) -> tuple[FairServer, DhcpPort, Datapath]:
    """The controller's fair serving over a fresh router, its DHCP path wired as the edge wires it (`assembly.Edge`),
    and the switch connected; none of its other services (API, resolver, netlink, supervisor threads) started."""
    router = HomeRouter(
        DeviceStore(store_path),
        dhcp.LeasePolicy(CONFIG.pending_lease, CONFIG.permitted_lease),
        max_pending=CONFIG.max_pending,
    )
    port = DhcpPort.__new__(DhcpPort)
    port.iface, port.malformed = "lan", 0
    port.answers = Outbox(port._send_now, "dhcp-answers", MAX_WAITING_ANSWERS)
    port.service = SocketService("socket", lambda: sock, port._serve)
    port.service.sock = sock  # type: ignore[assignment]
    switch = SwitchConnection()
    switch.datapath = datapath = Datapath()
    sink = EdgeSink(
        switch,
        port,
        LanAddresses("lan", ipv6=False),  # its queue fills; no thread adds them
        Authenticator("", "", list),  # no hostapd to tell
        hwdb,
        ipv6=False,
    )
    fair = FairServer(router, TimedLock(), switch, sink.carry_out, per_device_queue=CONFIG.per_device_queue)
    port._deliver = fair.on_dhcp
    fair.apply(router.switch_ready(WLAN_PORT, ROUTER_MAC))
    return fair, port, datapath


PROFILED = ("discover", "request", "held")  # the phases on the serving thread


class Clocks:
    """CPU time per phase on this thread, and the process's (every thread's) over the phases measured;
    `profile`, if given, sees the serving thread's phases only (not the client building frames)."""

    def __init__(self, profile: cProfile.Profile | None = None):
        self.thread: dict[str, float] = {}
        self.cpu = 0.0
        self.profile = profile

    @contextlib.contextmanager
    def phase(self, name: str):
        cpu, start = time.process_time(), time.thread_time()
        profiled = self.profile is not None and name in PROFILED
        if profiled:
            self.profile.enable()
        try:
            yield
        finally:
            if profiled:
                self.profile.disable()
            self.thread[name] = time.thread_time() - start
            self.cpu += time.process_time() - cpu


def wait_for(count: Callable[[], int], expected: int, timeout_s: float = 10) -> int:
    """`count()` once it reaches `expected` (what an outbox's thread sends comes a moment later), or at the timeout."""
    deadline = time.monotonic() + timeout_s
    while (got := count()) < expected and time.monotonic() < deadline:
        time.sleep(0.001)
    return got


def burst(fair: FairServer, port: DhcpPort, sock: PacketSocket, frames: list[bytes]) -> None:
    """One burst through the path: every frame read and queued, then served turn by turn until only
    held rule changes are left (the devices are not quiet yet)."""
    sock.incoming.extend(frames)
    answered = len(sock.sent)
    serve_until_drained(port, sock)
    while fair.serve_one_turn() == ANSWER:
        pass
    assert wait_for(lambda: len(sock.sent) - answered, len(frames)) == len(frames), "every frame answered"


def storm_round(
    devices: int, workdir: str, round_no: int, hwdb: HwdbLog, profile: cProfile.Profile | None = None
) -> dict[str, float]:
    """One storm against a fresh router: per message, seconds (see the module's doc)."""
    sock = PacketSocket()
    fair, port, switch = controller(os.path.join(workdir, f"round-{round_no}.sqlite"), sock, hwdb)
    macs = [f"02:{round_no & 0xff:02x}:00:00:{i >> 8:02x}:{i & 0xff:02x}" for i in range(devices)]
    discovers = [client_frame(mac, (round_no << 16) | i, "discover") for i, mac in enumerate(macs)]
    clocks = Clocks(profile)
    switch_setup = switch.sent
    with clocks.phase("discover"):
        burst(fair, port, sock, discovers)
    requests = [request_for(offer, mac) for offer, mac in zip(sock.sent[-devices:], macs, strict=True)]
    with clocks.phase("request"):
        burst(fair, port, sock, requests)
    with clocks.phase("held"), fair.lock:
        fair.send_held_rules()
    # All of them now, unless the machine stalled the burst for longer than a change may be held (held.py):
    # then some left at its end, between answers, as they would in the controller.
    # A newcomer's own budget (four rules and a meter), its router and neighbour solicitations' two (IPv6 on, as
    # shipped) and, pending with a live lease, the portal's six rules and its meter.
    sent = wait_for(lambda: switch.sent - switch_setup, 14 * devices)  # the switch's outbox thread sends them
    assert sent == 14 * devices, "four rules, two meters, two ND and six portal rules each"
    with clocks.phase("other threads"):  # what the store's and hwdb's writers still have to do
        fair.router.store.flush()
        while hwdb.rows.qsize():
            time.sleep(0.01)
        time.sleep(2 * BATCH_SECONDS)  # the hwdb writer's last batch
    fair.router.store.close()
    return {
        "discover": clocks.thread["discover"] / devices,
        "request": clocks.thread["request"] / devices,
        "held": clocks.thread["held"] / devices,
        "cpu": clocks.cpu / (2 * devices),
    }


def serve_until_drained(port: DhcpPort, sock: PacketSocket) -> None:
    with contextlib.suppress(Drained):
        port._serve(sock)  # type: ignore[arg-type]


def threaded_round(devices: int, workdir: str, round_no: int, hwdb: HwdbLog) -> dict[str, float]:
    """One storm with the controller's own threads: the socket's (`DhcpPort._serve`) and fair serving's worker
    (`serve_from_devices`), handing frames over through the fair queue as they do in the controller. Wall
    time from a burst's first frame to its last answer, and the CPU time of every thread over both bursts,
    per message. (Each round leaves its worker thread waiting: it serves for ever.)"""
    sock = ThreadedPacketSocket()
    fair, port, switch = controller(os.path.join(workdir, f"threaded-{round_no}.sqlite"), sock, hwdb)
    macs = [f"02:{round_no & 0xff:02x}:00:01:{i >> 8:02x}:{i & 0xff:02x}" for i in range(devices)]
    frames = [client_frame(mac, (round_no << 16) | i, "discover") for i, mac in enumerate(macs)]
    threading.Thread(target=serve_until_drained, args=(port, sock), daemon=True).start()
    threading.Thread(target=fair.serve_from_devices, daemon=True).start()
    switch_setup, wall, cpu = switch.sent, {}, 0.0
    for phase in ("discover", "request"):
        sock.expected, answered = len(sock.sent) + devices, len(sock.sent)
        sock.answered.clear()
        start_cpu, start = time.process_time(), time.perf_counter()
        for frame in frames:
            sock.frames.put(frame)
        if not sock.answered.wait(10):
            raise RuntimeError(f"{phase}: {len(sock.sent) - answered} of {devices} answered")
        wall[phase] = time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        frames = [request_for(offer, mac) for offer, mac in zip(sock.sent[-devices:], macs, strict=True)]
    wait_for(lambda: switch.sent - switch_setup, 5 * devices)  # held rules, once quiet
    sock.frames.put(None)
    fair.router.store.close()
    return {"discover": wall["discover"] / devices, "request": wall["request"] / devices, "cpu": cpu / (2 * devices)}


def report(title: str, results: list[dict[str, float]], labels: dict[str, str]) -> dict[str, dict[str, float]]:
    """Prints each figure's median (and minimum) over the rounds, in us; returns them by key."""
    print(f"{title}; per message, median (min) over rounds:")
    figures = {}
    for key, label in labels.items():
        values = [r[key] * 1e6 for r in results]
        figures[key] = {"median_us": round(statistics.median(values), 1), "min_us": round(min(values), 1)}
        print(f"  {label:32} {figures[key]['median_us']:8.1f} us  ({figures[key]['min_us']:.1f})")
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--devices", type=int, default=100)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--profile", action="store_true", help="a cProfile breakdown of the serving path too")
    p.add_argument(
        "--threads",
        action="store_true",
        help="also with the controller's threads: wall time per burst (noisy on a shared machine)",
    )
    p.add_argument("--json", type=Path, help="also write the serving thread's figures here (make bench's dhcp_storm)")
    args = p.parse_args()
    # As the controller runs (__main__): INFO through its log writer, and its GIL switch interval.
    log_writer.configure(logging.INFO, open(os.devnull, "w"))  # noqa: SIM115 (open as long as the run)
    sys.setswitchinterval(0.0005)
    hwdb = HwdbLog("hwdb:987", client_factory=QuietHwdb)
    with tempfile.TemporaryDirectory(prefix="dhcp-path-") as workdir:
        storm_round(args.devices, workdir, 0, hwdb)  # warm-up: imports, caches
        results = [storm_round(args.devices, workdir, n, hwdb) for n in range(1, args.rounds + 1)]
        serving = report(
            f"{args.devices} devices, {args.rounds} rounds, serving thread",
            results,
            {
                "discover": "DISCOVER, recvfrom to send",
                "request": "REQUEST, recvfrom to send",
                "held": "held rules, per newcomer",
                "cpu": "cpu, all threads",
            },
        )
        if args.json:
            args.json.write_text(json.dumps({"devices": args.devices, "rounds": args.rounds, **serving}, indent=2))
        if args.threads:
            report(
                "with the controller's threads",
                [threaded_round(args.devices, workdir, n, hwdb) for n in range(1, args.rounds + 1)],
                {
                    "discover": "DISCOVER burst, wall",
                    "request": "REQUEST burst, wall",
                    "cpu": "cpu, all threads, bursts",
                },
            )
        if args.profile:
            profile = cProfile.Profile()
            for n in range(args.rounds + 1, 2 * args.rounds + 1):
                storm_round(args.devices, workdir, n, hwdb, profile)
            stats = pstats.Stats(profile)
            stats.sort_stats("cumulative").print_stats("homework_controller", 30)
            stats.sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
