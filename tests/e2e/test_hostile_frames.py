"""What one device's frames cannot do to the others: broadcasts reach only permitted devices,
VLAN tags get nothing through, and a storm of forged MACs is reported once."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from homenet import INTERNET_IP, REPO, wait_until

LISTEN = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
s.bind(("0.0.0.0", 5999))
mreq = socket.inet_aton("224.0.0.251") + socket.inet_aton("0.0.0.0")
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
print("listening", flush=True)
while True:
    data, sender = s.recvfrom(2048)
    print(data.decode(), flush=True)
"""

ANNOUNCE = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
for n in range(5):
    s.sendto(f"broadcast-{n}".encode(), ("255.255.255.255", 5999))
    s.sendto(f"multicast-{n}".encode(), ("224.0.0.251", 5999))
"""


def test_broadcast_and_multicast_reach_permitted_devices_only(home):
    for name in ("speaker", "friend"):
        home.add(name)
        home.dhcp(name)
        home.permit(name)
    home.add("stranger")
    home.dhcp("stranger")  # pending: on the same radio, waiting for the household
    with tempfile.TemporaryDirectory() as tmp:
        heard = {name: Path(tmp) / f"{name}.txt" for name in ("friend", "stranger")}
        listeners = []
        for name, out in heard.items():
            with out.open("w") as f:
                listeners.append(home.spawn(name, sys.executable, "-c", LISTEN, stdout=f))
        try:
            wait_until("the listeners", lambda: all("listening" in p.read_text() for p in heard.values()), 10)
            home.exec("speaker", sys.executable, "-c", ANNOUNCE)
            wait_until(
                "the permitted friend to hear everything",
                lambda: all(f"{kind}-4" in heard["friend"].read_text() for kind in ("broadcast", "multicast")),
                5,
            )
        finally:
            for listener in listeners:
                listener.kill()
        assert heard["stranger"].read_text().split() == ["listening"], "a pending device heard it"


def test_vlan_tagged_frames_get_nothing_through_and_untagged_ones_do(home):
    home.add("tagger")
    home.dhcp("tagger")
    home.permit("tagger")
    home.dhcp("tagger")
    mac, ip = home.mac("tagger"), home.address("tagger")
    with home.internet_capture("udp port 7777") as captured:
        send = (
            "from scapy.all import Ether, Dot1Q, IP, UDP, sendp\n"
            f"base = IP(src='{ip}', dst='{INTERNET_IP}') / UDP(sport=7777, dport=7777)\n"
            f"sendp(Ether(src='{mac}', dst='02:48:57:00:00:01') / Dot1Q(vlan=5) / base / b'tagged',"
            " iface='wlan0', count=5, verbose=False)\n"
            f"sendp(Ether(src='{mac}', dst='02:48:57:00:00:01') / base / b'plain', iface='wlan0',"
            " verbose=False)\n"
        )
        home.exec("tagger", sys.executable, "-c", send)
        # Positive control: the untagged datagram, sent after the tagged ones, arrives.
        wait_until("the untagged datagram", captured, 5)
        lines = captured()
    assert len(lines) == 1, "a tagged frame got through:\n" + "\n".join(lines)


def events_since(home, since_ns: int) -> list[dict]:
    return [e for e in home.hwdb("select * from Events [range 2 minutes]") if e["tstamp"] >= since_ns]


def test_a_storm_of_forged_macs_is_reported_once_and_a_real_newcomer_stays_on_the_board(home):
    home.add("visitor")
    visitor = home.mac("visitor")
    home.dhcp("visitor")  # a real newcomer, waiting for the household to look
    home.add("storm")
    since = time.time_ns()  # this storm's events only: an earlier test's flood may be in the last 2 minutes
    storm = home.spawn(
        "storm", sys.executable, REPO / "bench" / "flood.py", "dhcp", "wlan0", "1000", "8", stdout=subprocess.DEVNULL
    )
    try:
        wait_until("forged MACs evicted", lambda: home.api("GET", "counters")[1]["pending_evicted"] > 300, 30)
    finally:
        storm.wait(timeout=30)
    status, body = home.api("GET", f"status/{visitor}")
    assert status == 200 and body["state"] == "pending"
    assert home.dhcp("visitor").startswith("10.2.")  # and it is served as before
    storms = wait_until(
        "the storm event",
        lambda: [e for e in events_since(home, since) if e["kind"] == "newcomer-storm"],
        10,
        0.5,
    )
    assert len(storms) == 1
    new_devices = [e for e in events_since(home, since) if e["kind"] == "new-device"]
    assert len(new_devices) < 60  # not one per forged MAC
