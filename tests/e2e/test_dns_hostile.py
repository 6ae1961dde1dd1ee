"""Hostile DNS from one device, with real clients: it costs that device its own queries and
nobody else anything (issue 9 items 1, 2 and 4)."""

from __future__ import annotations

import re
import sys

from homenet.home import NS_INET, WAN_ROUTER_IP, run

HOSTILE = """
import socket, struct, sys
kind, gateway = sys.argv[1], sys.argv[2]

from homenet.attacks import pointer_chain, raw_query

if kind == "long-name":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(raw_query(".".join(["a" * 60] * 5) + ".games.example.test"), (gateway, 53))
    print("rcode", s.recv(600)[3] & 0xF)
elif kind == "chains":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(pointer_chain(60000), (gateway, 53))  # fragmented UDP
    t = socket.create_connection((gateway, 53), timeout=5)
    message = pointer_chain(65000)
    try:
        t.sendall(struct.pack("!H", len(message)) + message)
        print("closed" if t.recv(2) == b"" else "answered")
    except ConnectionResetError:
        print("closed")
elif kind == "hold":
    import time
    held = [socket.create_connection((gateway, 53), timeout=10) for _ in range(int(sys.argv[3]))]
    start = time.monotonic()
    closed = 0
    for conn in held:
        try:
            closed += conn.recv(1) == b""
        except (ConnectionResetError, TimeoutError):
            closed += 1
    print("closed", closed, "in", round(time.monotonic() - start, 1))
"""


def gateway(home, name):
    return re.search(r"default via (\S+)", home.exec(name, "ip", "route").stdout).group(1)


def dig(home, name, domain, *opts):
    out = home.exec(name, "dig", "+time=2", "+tries=1", domain, *opts, check=False).stdout
    status = re.search(r"status: (\w+)", out)
    millis = re.search(r"Query time: (\d+) msec", out)
    return (status.group(1) if status else "TIMEOUT"), (int(millis.group(1)) if millis else None)


def hostile(home, name, kind, *args, timeout=30):
    return home.exec(name, sys.executable, "-c", HOSTILE, kind, gateway(home, name), *args, timeout=timeout).stdout


def join(home, *names):
    for name in names:
        home.add(name)
        home.dhcp(name)
        home.permit(name)


def test_a_name_over_255_octets_costs_only_that_query(home):
    join(home, "kid", "parent")
    assert home.api("POST", f"deny-dns/{home.mac('kid')}/games.example.test")[0] == 200
    assert hostile(home, "kid", "long-name").split() == ["rcode", "1"]  # FORMERR, not a dead resolver
    assert dig(home, "kid", "games.example.test")[0] == "NXDOMAIN"
    assert dig(home, "kid", "www.example.test")[0] == "NOERROR"
    assert dig(home, "parent", "games.example.test")[0] == "NOERROR"
    resolver = {"udp": "running", "tcp": "running", "udp6": "running", "tcp6": "running", "restarts": 0}
    assert home.api("GET", "health")[1]["resolver"] == resolver  # no socket restarted, IPv6 ones included


def test_pointer_chains_cost_the_sender_nothing_and_the_others_no_time(home):
    join(home, "kid", "parent")
    before = home.api("GET", "counters")[1]["dns_malformed"]
    assert hostile(home, "kid", "chains").strip() == "closed"  # 64 KB over TCP: not even read
    status, millis = dig(home, "parent", "www.example.test")
    assert status == "NOERROR" and millis is not None and millis < 100
    counters = home.api("GET", "counters")[1]
    assert counters["dns_malformed"] >= before + 2 and counters["dns_errors"] == 0


def test_tcp_clients_are_capped_and_idle_ones_dropped_and_the_wan_side_gets_nothing(home):
    join(home, "kid", "parent")
    holder = home.spawn("kid", sys.executable, "-c", HOSTILE, "hold", gateway(home, "kid"), "30", stdout=-1, text=True)
    try:
        # While the kid holds (or tries to hold) 30 connections, the parent's TCP lookups work...
        assert dig(home, "parent", "www.example.test", "+tcp")[0] == "NOERROR"
        out, _ = holder.communicate(timeout=30)
    finally:
        holder.kill()
    # ...and every one of the kid's is closed: at once beyond its share, the rest when idle.
    closed, seconds = re.match(r"closed (\d+) in ([\d.]+)", out).groups()
    assert int(closed) == 30 and float(seconds) < 10
    assert home.api("GET", "counters")[1]["dns_tcp_refused"] >= 26
    # The resolver listens on the LAN interface only: nothing on the WAN side reaches it.
    probe = (
        "import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], 5354), timeout=2)\n"
        "    print('connected')\nexcept OSError as exc:\n    print(type(exc).__name__)"
    )
    assert run(sys.executable, "-c", probe, WAN_ROUTER_IP, ns=NS_INET, check=False).strip() != "connected"
