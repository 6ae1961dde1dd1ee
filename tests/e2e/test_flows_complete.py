"""Every connection of a page load is in Flows (issue 26): the switch counts what it forwards.

A page load opens dozens of connections at once, more than copies of their first packets through the
device's packet-in meter (20 a second) could tell the controller of. With the switch's own records
(OVS's IPFIX export on br-lan, read by the controller) every one is counted, with the packets and
bytes the device itself sent and received.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dpkt

from homenet import INTERNET_IP, WaitTimeout, wait_until
from homenet.home import WAN_ROUTER_IP
from homenet.ipv6 import INET6_HOSTS, INTERNET6_HOST
from homenet.load import busy_page

CONNECTIONS = 60
PAGE_BYTES = 24_000

PAGE_LOAD = busy_page(CONNECTIONS, PAGE_BYTES)


def wire_counts(pcap: Path) -> dict[tuple[str, int, str, int], list[int]]:
    """[packets, bytes] per TCP direction, as the device sent and received them (frame bytes, Ethernet
    header included: what Flows rows count, as the switch's rule counters always did)."""
    counts: dict[tuple[str, int, str, int], list[int]] = {}
    with pcap.open("rb") as f:
        for _, frame in dpkt.pcap.Reader(f):
            ip = dpkt.ethernet.Ethernet(frame).data
            if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
                key = (socket.inet_ntoa(ip.src), ip.data.sport, socket.inet_ntoa(ip.dst), ip.data.dport)
                count = counts.setdefault(key, [0, 0])
                count[0] += 1
                count[1] += len(frame)
    return counts


def tcpdump(spawn, iface: str, pcap: Path) -> subprocess.Popen:
    return spawn(
        "tcpdump", "-i", iface, "-U", "-n", "-w", pcap, f"tcp and host {INTERNET_IP}", stderr=subprocess.PIPE, text=True
    )  # fmt: skip


def wait_for_quiet(captures: list[Path], quiet_s: float = 4.0, limit_s: float = 30.0) -> None:
    """Until no capture has grown for quiet_s: the last FINs and ACKs, and the retransmissions of
    segments lost after the switch, which the server sends a backed-off while later (a device's
    ACK to a late one, sent after its capture stopped, was counted by the switch and not by it)."""
    sizes, calm_since, deadline = None, time.monotonic(), time.monotonic() + limit_s
    while time.monotonic() < deadline:
        now_sizes = [path.stat().st_size for path in captures]
        if now_sizes != sizes:
            sizes, calm_since = now_sizes, time.monotonic()
        elif time.monotonic() - calm_since >= quiet_s:
            return
        time.sleep(0.25)
    raise AssertionError(f"the connections were still sending {limit_s:g} s after the page loads")


def load_pages(home, names: list[str], tmp: Path) -> tuple[dict[str, list[int]], dict[str, Path], Path]:
    """Each device loads the page, all at once, while tcpdump records what each sent and received on
    its interface and what the web server sent and received on its own; returns each device's
    connections (their local ports; every fetch succeeded) and the captures."""
    at_device = {name: tmp / f"{name}.pcap" for name in names}
    at_server = tmp / "server.pcap"
    taps = [tcpdump(functools.partial(home.spawn, name), "wlan0", at_device[name]) for name in names]
    taps.append(tcpdump(home.internet_spawn, "eth0", at_server))
    try:
        wait_until("tcpdump to listen", lambda: all(p.exists() for p in [*at_device.values(), at_server]), 10)
        time.sleep(0.3)
        loads = {
            name: home.spawn(name, sys.executable, "-c", PAGE_LOAD, stdout=subprocess.PIPE, text=True) for name in names
        }
        fetched = {name: json.loads(load.communicate(timeout=90)[0]) for name, load in loads.items()}
        wait_for_quiet([*at_device.values(), at_server])
    finally:
        errors = []
        for tap in taps:
            tap.terminate()
            errors.append(tap.communicate(timeout=10)[1])
    assert all("\n0 packets dropped by kernel" in err for err in errors), errors
    for name, done in fetched.items():
        assert len(done) == CONNECTIONS and all(ok for _, ok in done), (name, done)
    return {name: [port for port, _ in done] for name, done in fetched.items()}, at_device, at_server


def flows_of(home, ip: str) -> dict[tuple[str, int, str, int], list[int]]:
    """[packets, bytes] per direction of the device's web connections, summed over Flows rows."""
    out: dict[tuple[str, int, str, int], list[int]] = {}
    for r in home.hwdb("select * from Flows [range 2 minutes]"):
        if r["proto"] == 6 and ip in (r["saddr"], r["daddr"]) and INTERNET_IP in (r["saddr"], r["daddr"]):
            total = out.setdefault((r["saddr"], r["sport"], r["daddr"], r["dport"]), [0, 0])
            total[0] += r["packets"]
            total[1] += r["bytes"]
    return out


def assert_every_connection_counted(home, ip: str, ports: list[int], device: dict, server: dict) -> None:
    """Every connection of the device is in Flows within 15 s; uploads what the device sent (1 %),
    downloads at least what it received and at most what the server sent."""
    uploads = {(ip, port, INTERNET_IP, 80) for port in ports}
    downloads = {(INTERNET_IP, 80, ip, port) for port in ports}
    wanted = uploads | downloads
    assert wanted <= device.keys()
    started = time.monotonic()
    try:
        # The switch reports every 2 s (active timeout) and the controller writes at each poll (5 s).
        wait_until("every connection in Flows", lambda: wanted <= flows_of(home, ip).keys(), 15, 0.5)
    except WaitTimeout:
        missing = {k for k in wanted if k not in flows_of(home, ip)}
        missing_connections = {k[1] if k[0] == ip else k[3] for k in missing}
        raise AssertionError(
            f"{ip}: {len(missing_connections)} of {len(ports)} connections are not (wholly) in Flows: {sorted(missing)}"
        ) from None
    print(f"{ip}: all {len(ports)} connections in Flows {time.monotonic() - started:.1f} s after the page load")
    time.sleep(7)  # a poll later: nothing more arrives for them (each packet counted once)
    logged = flows_of(home, ip)
    # Uploads: what the device sent, all forwarded. Downloads: at least what the device received, at
    # most what the server sent (a segment the switch counted may be lost on its way out, when OVS's
    # send to the port or the downlink shaper's queue is full, and sent again: both are counted).
    wrong = [
        f"{k}: Flows {logged[k]} device {device[k]}"
        for k in sorted(uploads)
        if not all(abs(got - seen) <= 0.01 * seen for got, seen in zip(logged[k], device[k], strict=True))
    ]
    wrong += [
        f"{k}: Flows {logged[k]} device {device[k]} server {server.get(k)}"
        for k in sorted(downloads)
        if not device[k][0] <= logged[k][0] <= sent_by_server(server, device, k, logged[k][0])
    ]
    resent = sum(logged[k][0] > device[k][0] for k in downloads)
    print(f"{ip}: {resent} of {len(ports)} downloads had segments forwarded more than once (lost after the switch)")
    assert wrong == [], f"{len(wrong)} of {len(wanted)} directions counted wrong: {wrong[:4]}"


def sent_by_server(server: dict, device: dict, key: tuple, unknown: int) -> int:
    """How many segments the server sent on the device's connection `key`, or `unknown` where its capture cannot
    tell. After the router's NAT only the port tells connections apart, and the NAT gives a connection another
    port when an earlier one's entry (a connection of the test before, closing) still holds the device's: the
    server's capture then shows, under the device's port, that earlier connection's stragglers, fewer segments
    than the device received (one, in a run that failed on it), which no capture of this connection can."""
    sent = server.get(key)
    return sent[0] if sent is not None and sent[0] >= device[key][0] else unknown


def server_side(pcap: Path, ips: dict[str, str], ports: dict[str, list[int]]) -> dict:
    """What the server sent and received, keyed as the device's side where that is certain: after the
    router's NAT only the port tells devices apart, so a port two devices used is left out."""
    owners: dict[int, list[str]] = {}
    for name, used in ports.items():
        for port in used:
            owners.setdefault(port, []).append(ips[name])
    out = {}
    for (s, sp, d, dp), counts in wire_counts(pcap).items():
        port = dp if d == WAN_ROUTER_IP else sp
        if len(owners.get(port, [])) == 1:
            ip = owners[port][0]
            out[(s, sp, ip, dp) if d == WAN_ROUTER_IP else (ip, sp, d, dp)] = counts
    return out


def test_every_connection_of_a_page_load_is_in_flows_with_its_bytes(home):
    ip = home.join("browser")
    # Negative check beside it: a denied device's attempts are not traffic (the switch drops them).
    home.add("refused")
    refused_ip = home.dhcp("refused").split("/")[0]
    home.deny("refused")
    assert home.fetch("refused", f"http://{INTERNET_IP}/", timeout=2) == "000"
    with tempfile.TemporaryDirectory() as tmp:
        ports, at_device, at_server = load_pages(home, ["browser"], Path(tmp))
        device, server = wire_counts(at_device["browser"]), server_side(at_server, {"browser": ip}, ports)
    assert_every_connection_counted(home, ip, ports["browser"], device, server)
    # ... and the refused device reached nothing on the internet, as Flows says.
    assert flows_of(home, refused_ip) == {}


def test_five_devices_loading_pages_at_once_have_every_connection_counted(home):
    ips = {f"page{n}": home.join(f"page{n}") for n in range(5)}
    with tempfile.TemporaryDirectory() as tmp:
        ports, at_device, at_server = load_pages(home, list(ips), Path(tmp))
        devices = {name: wire_counts(pcap) for name, pcap in at_device.items()}
        server = server_side(at_server, ips, ports)
    for name, ip in ips.items():
        assert_every_connection_counted(home, ip, ports[name], devices[name], server)


def test_an_ipv6_fetch_is_in_flows_with_the_devices_ipv6_address(home):
    from test_ipv6 import delegated_address, own_64

    ip = home.join("v6browser")
    wait_until("a global IPv6 address", lambda: delegated_address(home, "v6browser"), 10, 0.1)
    server = INET6_HOSTS[INTERNET6_HOST]

    def fetch() -> tuple[str, str, int]:
        """(the HTTP status, the device's address, its port) of one fetch over IPv6."""
        status, port, *address = home.exec(
            "v6browser",
            "curl",
            "-6",
            "-sS",
            "-m",
            "5",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{local_port} %{local_ip}",
            f"http://{INTERNET6_HOST}/bulk?bytes={PAGE_BYTES}",
            check=False,
        ).stdout.split()
        return status, "".join(address), int(port)

    wait_until("a page over IPv6", lambda: fetch()[0] == "200", 10)
    status, address, port = fetch()
    assert status == "200" and ipaddress.IPv6Address(address) in own_64(delegated_address(home, "v6browser"))

    def rows() -> dict[str, list[int]]:
        """[packets, bytes] of the fetch's upload and download, summed over Flows rows."""
        out: dict[str, list[int]] = {}
        for r in home.hwdb("select * from Flows [range 2 minutes]"):
            key = (r["proto"], r["saddr"], r["sport"], r["daddr"], r["dport"])
            for name, wanted in (("up", (6, address, port, server, 80)), ("down", (6, server, 80, address, port))):
                if key == wanted:
                    total = out.setdefault(name, [0, 0])
                    total[0] += r["packets"]
                    total[1] += r["bytes"]
        return out

    try:
        wait_until("the fetch's both directions in Flows", lambda: rows().keys() == {"up", "down"}, 15, 0.5)
    except WaitTimeout:
        raise AssertionError(f"Flows has {rows()} of {address}:{port} <-> [{server}]:80") from None
    got = rows()
    print(f"IPv6 fetch in Flows: {got}")
    assert got["down"][1] > PAGE_BYTES and got["up"][0] >= 3  # the page came down; the request went up
    # ... and the same device's IPv4 is still its own rows, under its IPv4 address (positive control).
    assert home.fetch("v6browser", f"http://{INTERNET_IP}/", timeout=5) == "200"
    wait_until("its IPv4 fetch in Flows", lambda: any(k[0] == ip for k in flows_of(home, ip)), 15, 0.5)
