"""A low-rate two-way UDP "call", and the one-way delay and loss each direction sees.

The device's side (`call`) sends 50 packets/s of 160 bytes (64 kbit/s, like a voice or low-rate
video call's media) from one local port to the internet's `reflect`, which sends each packet
straight back: the uplink carries the call's packets out, the downlink carries the reflections in,
so both directions cross the router's queues as a real call's do (and the reply finds its way back
through the router's NAT).

Both sides run in namespaces of one machine, so they share one clock: a packet carries its sequence
number, when it left the device and when the reflector sent it back, and one-way delay is simply
arrival minus departure. Arrival is when the kernel took the packet in (its receive timestamp), not when
this program got round to reading it: on a loaded machine a measuring process waits for a core for tens
of milliseconds, which is no delay of the network's. Each side prints one JSON document when it ends
(after --duration, or on SIGTERM for the reflector): per packet (seq, sent_ns, delay_ms), and its loss.
"""

from __future__ import annotations

import argparse
import json
import select
import signal
import socket
import struct
import sys
import time

PACKET = struct.Struct("!IQQ")  # sequence number, left the device (ns), left the reflector (ns)
# Linux's SO_TIMESTAMPNS (the Python socket module does not name it): each datagram comes with the
# CLOCK_REALTIME it arrived at, a struct timespec.
SO_TIMESTAMPNS = 35
TIMESPEC = struct.Struct("@qq")
SIZE = 160
RATE = 50
PORT = 3478  # STUN/TURN: the port a video call's media uses, so the router's port table names it
LINGER_S = 1.0  # how long the device waits for the last reflections


def _udp(port: int, ipv6: bool, address: str = "") -> socket.socket:
    """A UDP socket on `port`: IPv4, or IPv6 that also takes IPv4 (the reflector answers both); bound to
    `address` if given."""
    if not ipv6:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((address or "0.0.0.0", port))
        return sock
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind((address or "::", port))
    return sock


def _timestamped(sock: socket.socket) -> socket.socket:
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    return sock


def _receive(sock: socket.socket) -> tuple[bytes, tuple, int]:
    """A datagram, where it came from, and when it arrived (ns, the kernel's timestamp)."""
    data, ancillary, _, peer = sock.recvmsg(2048, socket.CMSG_SPACE(TIMESPEC.size))
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= TIMESPEC.size:
            seconds, nanoseconds = TIMESPEC.unpack_from(value)
            return data, peer, seconds * 1_000_000_000 + nanoseconds
    return data, peer, time.time_ns()  # no timestamp came with it: when it was read


def call(to: str, port: int, duration: float, local_port: int = PORT) -> dict:
    """Sends at a steady rate (never in bursts) for `duration` s; returns the downlink's delays."""
    sock = _timestamped(_udp(local_port, ":" in to))  # a call's media keeps one local port: one flow
    padding = bytes(SIZE - PACKET.size)
    start = time.monotonic()
    seq = 0
    down: dict[int, tuple[int, float]] = {}
    while True:
        now = time.monotonic()
        due = start + seq / RATE
        if due >= start + duration and now >= start + duration + LINGER_S:
            break
        if due < start + duration and now >= due:
            try:
                sock.sendto(PACKET.pack(seq, time.time_ns(), 0) + padding, (to, port))
            except OSError:
                pass  # a refused moment is loss, which the other side counts
            seq += 1
            continue
        wait = (due - now) if due < start + duration else (start + duration + LINGER_S - now)
        if select.select([sock], [], [], max(0.0, wait))[0]:
            data, _, arrived = _receive(sock)
            if len(data) >= PACKET.size:
                got, _, reflected = PACKET.unpack_from(data)
                down.setdefault(got, (reflected, (arrived - reflected) / 1e6))
    return _report(down, seq)


def reflect(port: int, duration: float, address: str = "") -> dict:
    """Sends every packet back to where it came from; returns the uplink's delays. `address`: the one the
    call is made to. The internet has several IPv6 addresses on one link, and a reply from an unbound
    socket leaves from whichever the kernel picks: from another than the call's, the router's firewall
    takes it for a new connection from the WAN, and drops it."""
    sock = _timestamped(_udp(port, ipv6=":" in address or not address, address=address))
    sock.settimeout(0.2)
    up: dict[int, tuple[int, float]] = {}
    stopping = False

    def on_term(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    print("ready", file=sys.stderr, flush=True)
    stop = time.monotonic() + duration
    while not stopping and time.monotonic() < stop:
        try:
            data, peer, arrived = _receive(sock)
        except TimeoutError:
            continue
        if len(data) < PACKET.size:
            continue
        seq, sent, _ = PACKET.unpack_from(data)
        up.setdefault(seq, (sent, (arrived - sent) / 1e6))
        sock.sendto(PACKET.pack(seq, sent, time.time_ns()) + data[PACKET.size :], peer)
    return _report(up, max(up, default=-1) + 1)


def _report(packets: dict[int, tuple[int, float]], sent: int) -> dict:
    return {
        "received": len(packets),
        "sent": sent,
        "loss_pct": round(100.0 * (1 - len(packets) / sent), 3) if sent else 0.0,
        "packets": [[seq, at, round(delay, 3)] for seq, (at, delay) in sorted(packets.items())],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("call", help="the device's side: send, and measure the downlink")
    c.add_argument("--to", required=True)
    c.add_argument("--port", type=int, default=PORT)
    c.add_argument("--local-port", type=int, default=PORT)
    c.add_argument("--duration", type=float, required=True)
    r = sub.add_parser("reflect", help="the internet's side: send back, and measure the uplink")
    r.add_argument("--port", type=int, default=PORT)
    r.add_argument("--duration", type=float, default=600)
    r.add_argument("--address", default="", help="answer at this address only (default: every one)")
    args = p.parse_args(argv)
    if args.cmd == "call":
        json.dump(call(args.to, args.port, args.duration, args.local_port), sys.stdout)
    else:
        json.dump(reflect(args.port, args.duration, args.address), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
