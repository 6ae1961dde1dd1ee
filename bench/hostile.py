#!/usr/bin/env python3
"""Hostile devices; another device's DNS lookups and DHCP, quiet and under each attack, in one run.

    bench/hostile.py [SECONDS]    the emulated home: writes bench/results/hostile.json (make bench runs it)

A quiet (permitted) device resolves a name every 20 ms and completes DHCP handshakes, first alone,
then during each attack (`ATTACKS`), one after another:

- hostile DNS: over-long names, pointer-chain messages (UDP, and 64 KB over TCP), 200 slow TCP
  connections and 1,000 random names a second;
- a held-back device asking for pages as fast as it can (the captive portal's, 8 at once);
- a neighbour discovery flood (`flood.py nd`: solicitations, rogue router adverts, overriding
  neighbour adverts);
- a DHCP storm whose forged MACs complete DISCOVER..ACK (`dhcp_storm_client.handshakes`, round after
  round of 100 new MACs).

Each phase reports the controller lock's longest hold within it (`TimedLock`). `measure_home(seconds)`:
real devices in the emulated home (DHCP: full handshakes with `dhcp_probe.py`), the controller as
homenet runs it. `rows_of` makes the table from the phases (report.py makes it again from the JSON).
"""

from __future__ import annotations

import http.client
import json
import random
import re
import socket
import struct
import sys
import threading
import time

import dnslib
from common import BENCH, PY, add_client, homenet_up, in_client, longest_lock_hold, summary, write_result

from homenet.attacks import pointer_chain, raw_query
from homework_controller.edge.lan import dns_server
from homework_controller.wire import lan

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


def page_requests(seconds: float, connections: int = 8) -> int:
    """A held-back device asking for pages as fast as it can, `connections` at once (each request is the
    captive portal's, which asks the controller about the device): how many it got answered."""
    deadline = time.monotonic() + seconds
    answered = [0] * connections

    def asker(n: int) -> None:
        conn = http.client.HTTPConnection(lan.ROUTER_ADDRESS, 80, timeout=2)
        while time.monotonic() < deadline:
            try:
                conn.request("GET", "/", headers={"Host": "www.example.test"})
                conn.getresponse().read()
                answered[n] += 1
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection(lan.ROUTER_ADDRESS, 80, timeout=2)
                time.sleep(0.01)

    threads = [threading.Thread(target=asker, args=(n,), daemon=True) for n in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(answered)


def forged_leases(iface: str, seconds: float, per_round: int = 100) -> int:
    """Forged MACs completing DISCOVER..ACK, round after round of `per_round` new ones: how many got an ACK."""
    from dhcp_storm_client import handshakes  # beside this script

    rng, acked = random.Random(), 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        macs = [":".join(f"{b:02x}" for b in bytes([0x02]) + rng.randbytes(5)) for _ in range(per_round)]
        acked += handshakes(iface, macs, timeout=1.0)["acked"]
    return acked


# Each attack: (what the table calls it, the device that attacks, its command inside the device given the
# device's gateway and how long to go on). The held-back device is never permitted.
ATTACKS = {
    "hostile_dns": ("hostile DNS", "hostile", lambda gateway, s: (PY, __file__, "attack", gateway, s)),
    "held_back_pages": ("a held-back device's page requests", "heldback", lambda _, s: (PY, __file__, "pages", s)),
    "nd_flood": ("an ND/RA flood", "hostile", lambda _, s: (PY, BENCH / "flood.py", "nd", "wlan0", 2000, s)),
    "dhcp_storm": ("a lease-completing DHCP storm", "hostile", lambda _, s: (PY, __file__, "leases", "wlan0", s)),
}


def measure_home(seconds: float = 10.0, dhcp_samples: int = 60) -> dict:
    """Every phase in the emulated home: real devices, the real redirect, the controller as it runs. dhcp_samples:
    handshakes per phase (with 40, their p99 was simply the slowest one)."""
    home = homenet_up()
    try:
        for name in ("quiet", "hostile"):
            add_client(home, name, permit=True)
        add_client(home, "heldback")
        gateways = {
            name: re.search(r"default via (\S+)", in_client(home, name, "ip", "route")).group(1)
            for name in ("quiet", "hostile", "heldback")
        }

        def quiet_device_at_home():
            with longest_lock_hold(home) as hold:
                dns = json.loads(in_client(home, "quiet", PY, __file__, "lookups", gateways["quiet"], seconds))
                dhcp = json.loads(in_client(home, "quiet", PY, BENCH / "dhcp_probe.py", "wlan0", dhcp_samples))
            return {
                "dns_lookup": summary(dns["latencies_s"]),
                "dns_lost": dns["lost"],
                "dhcp_handshake": summary(dhcp["ack_s"]),
                "dhcp_lost": dhcp["lost"],
                "lock_max_hold_ms": hold.ms,
                "lock_max_hold_by": hold.by,
            }

        phases = {"quiet": quiet_device_at_home()}
        for phase, (_, attacker, command) in ATTACKS.items():
            # Long enough for the whole measurement; it stops by itself, and is killed once measured.
            attack = home.spawn(attacker, *command(gateways[attacker], seconds + dhcp_samples + 30))
            try:
                time.sleep(3)  # the attack at full strength before measuring
                phases[phase] = quiet_device_at_home()
            finally:
                attack.kill()
                attack.wait()
            time.sleep(2)  # what the attack left queued is served before the next phase
        counters, health = home.api("GET", "counters")[1], home.api("GET", "health")[1]
    finally:
        home.down()
    result = {
        "what": "another (permitted) device resolves a name every 20 ms and runs DHCP handshakes, quiet and then "
        "under each attack in turn: " + "; ".join(label for label, _, _ in ATTACKS.values()),
        "where": "the emulated home: real devices, the controller as homenet runs it",
        "seconds_of_lookups": seconds,
        "dhcp_handshakes": dhcp_samples,
        "phases": phases,
        "resolver": health.get("resolver"),
        "counters": {k: v for k, v in counters.items() if k.startswith(("dns", "lock", "pending"))},
    }
    return {**result, "rows": rows_of(result)}


MEASURES = (("DNS lookup", "dns_lookup", "dns_lost"), ("DHCP handshake", "dhcp_handshake", "dhcp_lost"))


def rows_of(result: dict) -> list[list[str]]:
    """The table: per attack, the other device's DNS and DHCP p99 against quiet's, and the lock's longest hold."""
    phases = result["phases"]
    quiet = phases["quiet"]
    rows = []
    for phase, (label, _, _) in ATTACKS.items():
        attacked = phases.get(phase)
        if attacked is None:  # a result from before this attack was measured
            continue
        for what, key, lost in MEASURES:
            answered = "p99_ms" in attacked[key]  # none at all: every one of them lost
            rows.append(
                [
                    f"other device's {what} p99 under {label}",
                    f"{attacked[key]['p99_ms']} ms (lost {attacked[lost]})"
                    if answered
                    else f"none (lost {attacked[lost]})",
                    f"{quiet[key]['p99_ms']} ms quiet (lost {quiet[lost]})",
                    f"{attacked[key]['p99_ms'] / quiet[key]['p99_ms']:.2f}x" if answered else "",
                    "within 2x of quiet, nothing lost",
                ]
            )
        rows.append(
            [
                f"controller lock, longest hold under {label}",
                f"{attacked['lock_max_hold_ms']} ms"
                + (f" ({attacked['lock_max_hold_by']})" if attacked.get("lock_max_hold_by") else ""),
                f"{quiet['lock_max_hold_ms']} ms quiet",
                "",
                "< 10 ms",
            ]
        )
    return rows


def main(argv: list[str]) -> None:
    """hostile.py [SECONDS]: the emulated home. Inside a device: hostile.py lookups GATEWAY SECONDS,
    hostile.py attack GATEWAY SECONDS, hostile.py pages SECONDS, hostile.py leases IFACE SECONDS."""
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
    elif argv and argv[0] == "pages":
        print(page_requests(float(argv[1])))
    elif argv and argv[0] == "leases":
        print(forged_leases(argv[1], float(argv[2])))
    else:
        write_result("hostile", measure_home(float(argv[0]) if argv else 10.0))


if __name__ == "__main__":
    main(sys.argv[1:])
