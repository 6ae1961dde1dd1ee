#!/usr/bin/env python3
"""Hostile DNS from one device; another device's DNS lookups and DHCP, quiet and under attack.

    bench/hostile.py [SECONDS]    the emulated home: writes bench/results/hostile.json (make bench runs it)

A quiet device resolves a name every 20 ms and renews (or completes) its DHCP lease, first
alone, then while a hostile device sends over-long names, pointer-chain messages (UDP, and
64 KB over TCP), holds 200 slow TCP connections and asks for 1,000 random names a second.
Each run reports the controller lock's longest hold (`TimedLock`).

`measure_home(seconds)`: real devices in the emulated home (DHCP: full handshakes with
`dhcp_probe.py`), the controller as homenet runs it.
"""

from __future__ import annotations

import json
import random
import re
import socket
import struct
import sys
import threading
import time

import dnslib
from common import BENCH, PY, add_client, homenet_up, in_client, lock_longest_hold_ms, summary, write_result

from homenet.attacks import pointer_chain, raw_query
from homework_controller import dns_server

WWW, WWW_IP = "www.example.test", "198.51.100.80"
INTERVAL_S = 0.02


def lookups(target, source: str, seconds: float, between=lambda: None) -> tuple[list[float], int]:
    """A device resolving a name every 20 ms (calling between() after each): latencies, and how many got no answer."""
    latencies, lost = [], 0
    query = dnslib.DNSRecord.question(WWW).pack()
    deadline = time.monotonic() + seconds
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((source, 0))
        sock.settimeout(1.0)
        while time.monotonic() < deadline:
            started = time.monotonic()
            sock.sendto(query, target)
            try:
                sock.recv(4096)
                latencies.append(time.monotonic() - started)
            except TimeoutError:
                lost += 1
            between()
            time.sleep(INTERVAL_S)
    return latencies, lost


def hostile_device(target, source: str, stop: threading.Event) -> list[threading.Thread]:
    """Over-long names, pointer chains (UDP, and 64 KB over TCP), 1,000 random names a second
    and 200 slow TCP connections, from source to target, until stop is set."""

    def udp_floods():
        rng = random.Random(1)
        long_name = raw_query(".".join(["a" * 60] * 5) + ".rand.test")
        chains = pointer_chain(1400)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind((source, 0))
            sock.setblocking(False)
            while not stop.is_set():
                started = time.monotonic()
                for _ in range(10):  # 1,000 random names a second, and the odd malformed message
                    name = f"{rng.getrandbits(48):x}.rand.test"
                    sock.sendto(dnslib.DNSRecord.question(name).pack(), target)
                sock.sendto(long_name, target)
                sock.sendto(chains, target)
                try:
                    while sock.recv(4096):
                        pass
                except BlockingIOError:
                    pass
                time.sleep(max(0.0, 0.01 - (time.monotonic() - started)))

    def tcp_chains():
        message = pointer_chain(65000)
        while not stop.is_set():
            try:
                with socket.create_connection(target, timeout=2, source_address=(source, 0)) as conn:
                    conn.sendall(struct.pack("!H", len(message)) + message)
                    conn.recv(2)
            except OSError:
                pass
            time.sleep(0.05)

    def slow_connections():
        while not stop.is_set():
            held = []
            for _ in range(200):
                try:
                    held.append(socket.create_connection(target, timeout=2, source_address=(source, 0)))
                except OSError:
                    pass
            for conn in held:  # one byte of a length, then nothing
                try:
                    conn.send(b"\x00")
                except OSError:
                    pass
            stop.wait(dns_server.TCP_MESSAGE_S + 1)
            for conn in held:
                conn.close()

    threads = [threading.Thread(target=t, daemon=True) for t in (udp_floods, tcp_chains, slow_connections)]
    for thread in threads:
        thread.start()
    return threads


def measure_home(seconds: float = 10.0, dhcp_samples: int = 40) -> dict:
    """The same in the emulated home: real devices, the real redirect, the controller as it runs."""
    home = homenet_up()
    try:
        for name in ("quiet", "hostile"):
            add_client(home, name, permit=True)
        gateways = {
            name: re.search(r"default via (\S+)", in_client(home, name, "ip", "route")).group(1)
            for name in ("quiet", "hostile")
        }

        def quiet_device_at_home():
            started = time.monotonic()
            dns = json.loads(in_client(home, "quiet", PY, __file__, "lookups", gateways["quiet"], seconds))
            dhcp = json.loads(in_client(home, "quiet", PY, BENCH / "dhcp_probe.py", "wlan0", dhcp_samples))
            return {
                "dns_lookup": summary(dns["latencies_s"]),
                "dns_lost": dns["lost"],
                "dhcp_handshake": summary(dhcp["ack_s"]),
                "dhcp_lost": dhcp["lost"],
                "lock_max_hold_ms": lock_longest_hold_ms(home, started),
            }

        quiet = quiet_device_at_home()
        attacker = home.spawn("hostile", PY, __file__, "attack", gateways["hostile"], seconds + dhcp_samples + 30)
        try:
            time.sleep(3)  # the attack at full strength before measuring
            under_attack = quiet_device_at_home()
        finally:
            attacker.kill()
        counters, health = home.api("GET", "counters")[1], home.api("GET", "health")[1]
    finally:
        home.down()
    return {
        "what": "hostile DNS from one device (over-long names, pointer chains over UDP and TCP, 200 slow TCP "
        "connections, 1,000 random names a second) while another device resolves a name every 20 ms and "
        "runs DHCP handshakes; the same measured quiet first",
        "where": "the emulated home: two real devices, the controller as homenet runs it",
        "seconds_of_lookups": seconds,
        "dhcp_handshakes": dhcp_samples,
        "phases": {"quiet": quiet, "hostile": under_attack},
        "rows": [
            [
                f"other device's {label} p99 under hostile DNS",
                f"{under_attack[key]['p99_ms']} ms (lost " f"{under_attack[lost]})",
                f"{quiet[key]['p99_ms']} ms quiet (lost {quiet[lost]})",
                f"{under_attack[key]['p99_ms'] / quiet[key]['p99_ms']:.2f}x",
                "< 100 ms, nothing lost",
            ]
            for label, key, lost in (
                ("DNS lookup", "dns_lookup", "dns_lost"),
                ("DHCP handshake", "dhcp_handshake", "dhcp_lost"),
            )
        ]
        + [
            [
                "controller lock, longest hold",
                f"{under_attack['lock_max_hold_ms']} ms",
                f"{quiet['lock_max_hold_ms']} ms quiet",
                "",
                "report",
            ]
        ],
        "resolver": health.get("resolver"),
        "counters": {k: v for k, v in counters.items() if k.startswith(("dns", "lock"))},
    }


def main(argv: list[str]) -> None:
    """hostile.py [SECONDS]: the emulated home.
    Inside a device: hostile.py lookups GATEWAY SECONDS, hostile.py attack GATEWAY SECONDS."""
    if argv and argv[0] in ("lookups", "attack"):
        target, seconds = (argv[1], 53), float(argv[2])
        if argv[0] == "lookups":
            latencies, lost = lookups(target, "0.0.0.0", seconds)
            print(json.dumps({"latencies_s": latencies, "lost": lost}))
        else:
            stop = threading.Event()
            hostile_device(target, "0.0.0.0", stop)
            stop.wait(seconds)
            stop.set()
    else:
        write_result("hostile", measure_home(float(argv[0]) if argv else 10.0))


if __name__ == "__main__":
    main(sys.argv[1:])
