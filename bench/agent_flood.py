#!/usr/bin/env python3
"""An end-host agent floods hwdb; another device's DHCP renewals and DNS lookups, quiet and during the flood.

    bench/agent_flood.py [SECONDS]   the emulated home: writes bench/results/agent_flood.json
                                     (bench/run.py agent_flood)

A quiet device resolves a name every 20 ms (hostile.py's `lookups`) and renews its lease again
and again (a DHCPREQUEST from its own address to its gateway, as dhclient renews), first with
nobody else busy, then while another permitted device's "agent" sends hwdb `insert into AppTuples`
statements about its own address at 120,000 rows a second, one statement a datagram, and never
waits for an answer (`busy:` included): what one address got through before hwdb had a row rate
(issue 20: 173,280 rows in 1.5 s). Each phase reports the controller lock's longest hold in that phase;
the result says how many rows the flood sent and how many hwdb kept.

Each phase also records where a lost packet could have gone (drop counters since the home came
up): the switch's ports, the packet socket through which OVS's userspace datapath reads each
port (`ss`: it overflowed on the air's port during floods, 27 and 499 frames, which any
station's frames may be among), and the kernel's input queues.
"""

from __future__ import annotations

import json
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import dpkt
from common import BENCH, PY, add_client, homenet_up, in_client, longest_lock_hold, sh, summary, write_result

from hwdb_client import MAX_PAYLOAD, REQUEST, Header, encode

HWDB_PORT = 987
ROWS_PER_S = 120_000
RENEW_INTERVAL_S = 0.2  # well inside the device's own packet-in budget (as dhcp_probe.py)
ETH_P_ALL = 0x0003
# Where a lost renewal could have gone: the controller's counters with these prefixes, and the
# switch's drop counters on the air's port and the router's own.
COUNTERS = ("dhcp", "hwdb", "lock", "packet_in", "agent")
SWITCH_PORTS = ("wlan0", "br-lan")


# ---- inside the quiet device


def renew_frames(iface: str, gateway: str, count: int) -> list[tuple[int, bytes]]:
    """`count` DHCPREQUESTs renewing the device's lease (RENEWING, RFC 2131 4.3.2: unicast to the
    server, ciaddr its own address, neither server id nor requested address), built before any is
    timed; (xid, frame) each."""
    from scapy.layers.dhcp import BOOTP, DHCP
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    mac = Path(f"/sys/class/net/{iface}/address").read_text().strip()
    own = re.search(r"inet (\S+)/", _ip("-4", "-o", "addr", "show", "dev", iface)).group(1)
    gateway_mac = _neighbour(gateway, iface)
    rng = random.Random()
    frames = []
    for _ in range(count):
        xid = rng.getrandbits(32)
        frames.append(
            (
                xid,
                bytes(
                    Ether(src=mac, dst=gateway_mac)
                    / IP(src=own, dst=gateway)
                    / UDP(sport=68, dport=67)
                    / BOOTP(op=1, xid=xid, ciaddr=own, chaddr=bytes.fromhex(mac.replace(":", "")))
                    / DHCP(options=[("message-type", "request"), "end"])
                ),
            )
        )
    return frames


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


def _neighbour(address: str, iface: str) -> str:
    """The gateway's MAC (the router answers ARP for every device's gateway)."""
    for _ in range(50):
        found = re.search(r"lladdr (\S+)", _ip("neigh", "show", address, "dev", iface))
        if found:
            return found.group(1)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:  # makes the kernel ask
            sock.sendto(b"", (address, 9))
        time.sleep(0.1)
    raise RuntimeError(f"no ARP answer for the gateway {address}")


def renewals(iface: str, gateway: str, count: int) -> dict:
    """Time each renewal from its REQUEST to the ACK with its xid; how many got none within 2 s."""
    frames = renew_frames(iface, gateway, count)
    acks, lost = [], 0
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)) as sock:
        sock.bind((iface, 0))
        for xid, frame in frames:
            started = time.monotonic()
            sock.send(frame)
            deadline = started + 2.0
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    lost += 1
                    break
                sock.settimeout(left)
                try:
                    data = sock.recv(2048)
                except TimeoutError:
                    continue
                if _is_ack(data, xid):
                    acks.append(time.monotonic() - started)
                    break
            time.sleep(RENEW_INTERVAL_S)
    return {"ack_s": acks, "lost": lost}


def _is_ack(data: bytes, xid: int) -> bool:
    try:
        udp = dpkt.ethernet.Ethernet(data).data.data
        if not isinstance(udp, dpkt.udp.UDP) or udp.dport != 68:
            return False
        msg = dpkt.dhcp.DHCP(udp.data)
    except (dpkt.UnpackError, AttributeError):
        return False
    return msg.xid == xid and dict(msg.opts).get(53, b"\x00")[0] == 5


# ---- inside the flooding device


def statements(own: str) -> list[bytes]:
    """Insert statements of AppTuples rows about the device's own address, each as many rows as
    fit one datagram (so each is a whole request), the ports varying."""
    out = []
    for first in range(0, 20_000, 20):
        rows, text = [], b""
        for port in range(first, first + 64):
            rows.append(f"(6, '{own}', {10_000 + port}, '198.51.100.80', 443, 'flood', 'agent')")
            candidate = f"insert into AppTuples values {', '.join(rows)}".encode()
            if len(candidate) > MAX_PAYLOAD:
                break
            text = candidate
        out.append(text)
    return out


def flood(gateway: str, rows_per_s: int) -> None:
    """Send until SIGTERM, then print what was sent (and answered) as JSON."""
    own = re.search(r"src (\S+)", _ip("route", "get", gateway)).group(1)
    payloads = statements(own)
    rows_each = payloads[0].count(b"(6, ")
    per_tick = max(1, round(rows_per_s / rows_each / 100))  # 10 ms ticks
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((gateway, HWDB_PORT))
    sock.setblocking(False)
    conn, seq = random.getrandbits(32), random.getrandbits(31)
    sent = dropped = answers = 0
    started = time.monotonic()
    while not stop.is_set():
        tick = time.monotonic()
        for i in range(per_tick):
            seq = (seq + 1) & 0xFFFFFFFF
            try:
                sock.send(encode(Header(REQUEST, conn, seq), payloads[(sent + i) % len(payloads)]))
                sent += 1
            except (BlockingIOError, ConnectionRefusedError):
                dropped += 1
        try:
            while sock.recv(65535):
                answers += 1
        except (BlockingIOError, ConnectionRefusedError):
            pass
        stop.wait(max(0.0, 0.01 - (time.monotonic() - tick)))
    seconds = time.monotonic() - started
    print(
        json.dumps(
            {
                "address": own,
                "seconds": round(seconds, 2),
                "rows_sent": sent * rows_each,
                "rows_sent_per_s": round(sent * rows_each / seconds),
                "rows_per_datagram": rows_each,
                "datagrams_sent": sent,
                "datagrams_not_sent": dropped,
                "datagrams_answered": answers,
            }
        )
    )


# ---- the emulated home


def switch_drops() -> dict:
    """OVS's drop counters (since the home came up) on the air's port and the router's own."""
    drops = {}
    for port in SWITCH_PORTS:
        stats = sh("ovs-vsctl", "get", "interface", port, "statistics").strip("{}\n")
        counts = dict(item.split("=") for item in stats.split(", "))
        drops[port] = {k: int(v) for k, v in counts.items() if "drop" in k or "error" in k}
    return drops


def switch_socket_drops() -> dict:
    """Frames dropped because the switch's packet socket on a port was full (`ss`'s skmem `d`):
    the userspace datapath reads each port through one, with the kernel's default buffer."""
    drops = {}
    for line in sh("ss", "-0", "-m", "-p", "-n").splitlines():
        port = re.search(r":(\S+)\s", line)
        dropped = re.search(r"skmem:\(.*\bd(\d+)\)", line)
        if "ovs-vswitchd" in line and port and dropped and port.group(1) in SWITCH_PORTS:
            drops[port.group(1)] = drops.get(port.group(1), 0) + int(dropped.group(1))
    return drops


def backlog_drops() -> int:
    """Frames the host's kernel dropped since boot because a CPU's input queue was full
    (/proc/net/softnet_stat's second column; every veth of the emulated home passes it)."""
    lines = Path("/proc/net/softnet_stat").read_text().split("\n")
    return sum(int(line.split()[1], 16) for line in lines if line.strip())


def measure_home(seconds: float = 10.0, renew_samples: int = 50, rows_per_s: int = ROWS_PER_S) -> dict:
    home = homenet_up()
    try:
        for name in ("quiet", "agent"):
            add_client(home, name, permit=True)
        gateways = {
            name: re.search(r"default via (\S+)", in_client(home, name, "ip", "route")).group(1)
            for name in ("quiet", "agent")
        }

        def quiet_device() -> dict:
            with longest_lock_hold(home) as hold:
                dns = json.loads(
                    in_client(home, "quiet", PY, BENCH / "hostile.py", "lookups", gateways["quiet"], seconds)
                )
                dhcp = json.loads(
                    in_client(home, "quiet", PY, __file__, "renewals", "wlan0", gateways["quiet"], renew_samples)
                )
            return {
                "dns_lookup": summary(dns["latencies_s"]),
                "dns_lost": dns["lost"],
                "dhcp_renewal": summary(dhcp["ack_s"]),
                "dhcp_lost": dhcp["lost"],
                "lock_max_hold_ms": hold.ms,
                "lock_max_hold_by": hold.by,
                "counters": {k: v for k, v in home.api("GET", "counters")[1].items() if k.startswith(COUNTERS)},
                "switch_drops": switch_drops(),
                "kernel_backlog_drops": backlog_drops(),
                "switch_receive_socket_drops": switch_socket_drops(),
            }

        quiet = quiet_device()
        flooder = home.spawn("agent", PY, __file__, "flood", gateways["agent"], rows_per_s, stdout=subprocess.PIPE)
        try:
            time.sleep(3)  # the flood at full strength before measuring
            flooded = quiet_device()
        finally:
            flooder.terminate()
            sent = json.loads(flooder.communicate(timeout=30)[0] or "{}")
        kept = home.hwdb(f"select count(*) as n from AppTuples where saddr = '{sent.get('address', '')}'")
        sent["rows_kept_by_hwdb"] = kept[0]["n"] if kept else None
    finally:
        home.down()
    return {
        "what": f"an end-host agent floods hwdb from its device (insert into AppTuples about its own address, "
        f"{rows_per_s:,} rows/s asked, one statement a datagram, never waiting for an answer) while another "
        "device resolves a name every 20 ms and renews its DHCP lease again and again; the same measured with "
        "no flood first, in the same run",
        "where": "the emulated home: two real permitted devices, hwdb and the controller as homenet runs them",
        "seconds_of_lookups": seconds,
        "dhcp_renewals": renew_samples,
        "flood": sent,
        "phases": {"quiet": quiet, "flood": flooded},
        "rows": [
            [
                f"other device's {label} {stat[:-3]} during an agent's flood of hwdb",
                f"{flooded[key][stat]} ms (lost {flooded[lost]})",
                f"{quiet[key][stat]} ms quiet (lost {quiet[lost]})",
                f"{flooded[key][stat] / quiet[key][stat]:.2f}x",
                "< 2x quiet, nothing lost" if stat == "p99_ms" else "",
            ]
            for label, key, lost in (
                ("DNS lookup", "dns_lookup", "dns_lost"),
                ("DHCP renewal", "dhcp_renewal", "dhcp_lost"),
            )
            for stat in ("p99_ms", "median_ms")
        ]
        + [
            [
                "controller lock, longest hold in the phase",
                f"{flooded['lock_max_hold_ms']} ms",
                f"{quiet['lock_max_hold_ms']} ms quiet",
                "",
                "report",
            ],
            [
                "the flood's rows kept by hwdb",
                f"{sent.get('rows_kept_by_hwdb')} of {sent.get('rows_sent', 0):,} sent "
                f"({sent.get('rows_sent_per_s', 0):,} rows/s for {sent.get('seconds')} s)",
                "",
                "",
                "hwdb's row rate: 200 rows/s after a burst of 2,000",
            ],
        ],
    }


def main(argv: list[str]) -> None:
    """agent_flood.py [SECONDS]: the emulated home. Inside a device:
    agent_flood.py renewals IFACE GATEWAY COUNT, agent_flood.py flood GATEWAY ROWS_PER_S."""
    if argv and argv[0] == "renewals":
        print(json.dumps(renewals(argv[1], argv[2], int(argv[3]))))
    elif argv and argv[0] == "flood":
        flood(argv[1], int(argv[2]))
    else:
        write_result("agent_flood", measure_home(float(argv[0]) if argv else 10.0))


if __name__ == "__main__":
    main(sys.argv[1:])
