"""IPv6 for every device, each in its own /64 (issue 22), with the devices' own kernels doing SLAAC from the
controller's unicast router adverts, real curl over IPv6 by name, through real Open vSwitch."""

from __future__ import annotations

import ipaddress
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from homenet import wait_until
from homenet.downloads import paced_download
from homenet.home import NS_INET, ROUTER_MAC
from homenet.ipv6 import (
    DELEGATED_PREFIX,
    INET6_DNS_IP,
    INET6_HOSTS,
    INTERNET6_HOST,
    PD_PREFERRED_S,
    PD_VALID_S,
    WAN6_INET_IP,
    delegate,
)
from homenet.load import CALL_APP, UP, call_under_load, set_priority

WWW6 = f"http://{INTERNET6_HOST}/"
DELEGATED = ipaddress.IPv6Network(DELEGATED_PREFIX)
ULA = ipaddress.IPv6Network("fc00::/7")


def global_addresses(home, name) -> list[ipaddress.IPv6Address]:
    """The device's usable global IPv6 addresses (configured by SLAAC, duplicate-address detection done)."""
    out = home.exec(name, "ip", "-json", "-6", "addr", "show", "dev", "wlan0", "scope", "global").stdout
    info = json.loads(out or "[]")
    return [
        ipaddress.IPv6Address(a["local"])
        for a in (info[0].get("addr_info", []) if info else [])
        if "local" in a and not a.get("tentative") and not a.get("dadfailed")
    ]


def delegated_address(home, name) -> ipaddress.IPv6Address | None:
    found = [a for a in global_addresses(home, name) if a in DELEGATED]
    return found[0] if found else None


def own_64(address: ipaddress.IPv6Address) -> ipaddress.IPv6Network:
    return ipaddress.IPv6Network((address, 64), strict=False)


def fetch6(home, name, url=WWW6, source: str | None = None, timeout: float = 5) -> str:
    """The HTTP status over IPv6 ('000' when nothing answers); source: bind to that address."""
    cmd = ["curl", "-6", "-sS", "-m", timeout, "-o", "/dev/null", "-w", "%{http_code}"]
    if source:
        cmd += ["--interface", source]
    return home.exec(name, *cmd, url, check=False).stdout.strip()


def joined(home, name, permit=True) -> float:
    """A device joins; permitted, returns when the household said yes (time.monotonic())."""
    home.add(name)
    home.dhcp(name)
    if not permit:
        return 0.0
    permitted_at = time.monotonic()
    home.permit(name)
    home.dhcp(name)
    return permitted_at


def test_pending_gets_no_global_address_and_permitted_its_own_64_and_the_ipv6_internet_by_name(home):
    joined(home, "v6phone", permit=False)
    # It solicits (the kernel does at link up, and again); the answer has router lifetime 0 and no prefix.
    home.exec("v6phone", "ip", "link", "set", "wlan0", "down")
    home.exec("v6phone", "ip", "link", "set", "wlan0", "up")
    time.sleep(3)  # what a device would configure in that time, if it were told a prefix
    assert global_addresses(home, "v6phone") == []
    assert "default" not in home.exec("v6phone", "ip", "-6", "route").stdout
    assert fetch6(home, "v6phone", timeout=3) == "000"
    # Permitted: its own /64 within seconds, and an IPv6-only name by name.
    permitted_at = time.monotonic()
    home.permit("v6phone")
    home.dhcp("v6phone")
    wait_until("a global address", lambda: delegated_address(home, "v6phone"), 10, 0.1)
    print(f"permit -> usable global IPv6 address: {time.monotonic() - permitted_at:.2f} s")
    phone = delegated_address(home, "v6phone")
    assert phone is not None
    assert own_64(phone).subnet_of(DELEGATED)
    wait_until("a page over IPv6 by name", lambda: fetch6(home, "v6phone") == "200", 10)
    # A second device's /64 is its own.
    joined(home, "v6laptop")
    wait_until("the laptop's global address", lambda: delegated_address(home, "v6laptop"), 10, 0.1)
    laptop = delegated_address(home, "v6laptop")
    assert laptop is not None and own_64(laptop) != own_64(phone)
    assert fetch6(home, "v6laptop") == "200"


def test_a_devices_global_address_lasts_no_longer_than_the_isps_delegation(home):
    joined(home, "v6clock")
    wait_until("its global and ULA addresses", lambda: len(global_addresses(home, "v6clock")) == 2, 10, 0.1)
    [delegated] = [a for a in global_addresses(home, "v6clock") if a in DELEGATED]
    [ula] = [a for a in global_addresses(home, "v6clock") if a in ULA]
    # Kea's delegation (preferred 5 min, valid 10 min, renewed every 3 s) bounds the adverts' lifetimes.
    kernel = address_flags(home, "v6clock", delegated)
    assert kernel["valid_life_time"] <= PD_VALID_S and kernel["preferred_life_time"] <= PD_PREFERRED_S, kernel
    # Positive control: the ULA /64 is the router's own, advertised with its own longer lifetimes.
    kernel = address_flags(home, "v6clock", ula)
    assert kernel["valid_life_time"] > PD_VALID_S and kernel["preferred_life_time"] > PD_PREFERRED_S, kernel


def test_a_forged_source_reaches_nothing_while_its_own_address_does(home):
    for name in ("v6alice", "v6bob"):
        joined(home, name)
    for name in ("v6alice", "v6bob"):
        wait_until(f"{name}'s global address", lambda n=name: delegated_address(home, n), 10, 0.1)
    alice, bob = delegated_address(home, "v6alice"), delegated_address(home, "v6bob")
    assert alice is not None and bob is not None
    forged_from_bob = own_64(bob).network_address + 0x99
    outside = next(n for n in DELEGATED.subnets(new_prefix=64) if n not in (own_64(alice), own_64(bob)))
    forged_outside = outside.network_address + 0x99
    for forged in (forged_from_bob, forged_outside):
        home.exec("v6alice", "ip", "-6", "addr", "add", f"{forged}/128", "dev", "wlan0", "nodad")
        assert fetch6(home, "v6alice", source=str(forged), timeout=3) == "000", f"{forged} got through"
        # (gone again: the kernel would pick the one in Bob's /64 as its source towards Bob)
        home.exec("v6alice", "ip", "-6", "addr", "del", f"{forged}/128", "dev", "wlan0")
    # Positive control: the same request from its own address.
    assert fetch6(home, "v6alice", source=str(alice)) == "200"
    # Alice reaches Bob over IPv6 through the router (hop limit decremented).
    out = home.exec("v6alice", "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", str(bob)).stdout
    assert " 0% packet loss" in out and "ttl=63" in out, out


# A device's forged override neighbour advert (scapy): argv the router's MAC, the router's address in the
# sender's /64, the sender's own address, and the target: another device's address, said to be at the sender's
# MAC. Sent to the router's address and to all nodes, from the sender's /64 with hop limit 255 (Linux takes it).
FORGED_NEIGHBOUR_ADVERT = """
import sys
from scapy.all import Ether, get_if_hwaddr, sendp
from scapy.layers.inet6 import ICMPv6ND_NA, ICMPv6NDOptDstLLAddr, IPv6
router_mac, gateway, source, target = sys.argv[1:5]
mac = get_if_hwaddr("wlan0")
for dst, dst_mac in ((gateway, router_mac), ("ff02::1", "33:33:00:00:00:01")):
    advert = Ether(src=mac, dst=dst_mac) / IPv6(src=source, dst=dst, hlim=255)
    advert /= ICMPv6ND_NA(tgt=target, R=0, S=0, O=1) / ICMPv6NDOptDstLLAddr(lladdr=mac)
    sendp(advert, iface="wlan0", count=3, inter=0.1, verbose=False)
"""


def test_a_devices_forged_neighbour_advert_does_not_draw_another_devices_ipv6(home):
    """Issue 39 finding 2: a permitted device told the router's stack, in an override neighbour advert from its
    own /64, that another device's address was at its MAC; the router's frames for that device then left with
    the attacker's MAC. The switch drops a device's neighbour adverts, and sets the MAC of the router's frames
    to a device from its address: the victim's IPv6 still reaches it, from the internet and from the router."""
    for name in ("v6victim", "v6mallory"):
        joined(home, name)
    for name in ("v6victim", "v6mallory"):
        wait_until(f"{name}'s global address", lambda n=name: delegated_address(home, n), 10, 0.1)
    victim, mallory = delegated_address(home, "v6victim"), delegated_address(home, "v6mallory")
    assert victim is not None and mallory is not None
    assert fetch6(home, "v6victim") == "200"  # the router's stack has found the victim (its proxy answer)
    gateway = own_64(mallory).network_address + 1
    home.exec("v6mallory", sys.executable, "-c", FORGED_NEIGHBOUR_ADVERT, ROUTER_MAC, gateway, mallory, victim)
    neighbour = subprocess.run(["ip", "-6", "neigh", "show", str(victim)], capture_output=True, text=True).stdout
    assert home.mac("v6mallory") not in neighbour.lower(), neighbour
    assert fetch6(home, "v6victim") == "200"
    ping = ["ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", str(victim)]  # from the router's own stack
    pinged = subprocess.run(ping, capture_output=True, text=True).stdout
    assert " 0% packet loss" in pinged, pinged
    # Positive control: the attacker's own IPv6 works as before (its adverts only are dropped).
    assert fetch6(home, "v6mallory") == "200"


MDNS_LISTEN = """
import socket, struct
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::", 5353))
group = socket.inet_pton(socket.AF_INET6, "ff02::fb") + struct.pack("@I", socket.if_nametoindex("wlan0"))
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, group)
print("listening", flush=True)
while True:
    data, sender = s.recvfrom(2048)
    print(data.decode(), flush=True)
"""

# Five mDNS announcements (argv[1] and a count) to ff02::fb out of wlan0, from the device's link-local address
# or, given argv[2], bound to that one of its addresses. Not looped back to the device's own listener: what it
# hears came over the air.
MDNS_ANNOUNCE = """
import socket, sys
wlan0 = socket.if_nametoindex("wlan0")
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, wlan0)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 0)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
if len(sys.argv) > 2:
    s.bind((sys.argv[2], 0))
for n in range(5):
    s.sendto(f"{sys.argv[1]}-{n}".encode(), ("ff02::fb", 5353, 0, wlan0))
"""


def link_local_ready(home, name) -> bool:
    """Its link-local address is usable (duplicate-address detection done): it can send from it."""
    out = home.exec(name, "ip", "-6", "addr", "show", "dev", "wlan0", "scope", "link").stdout
    assert "dadfailed" not in out, out
    return "inet6" in out and "tentative" not in out


def test_mdns_over_ipv6_reaches_permitted_devices_only(home):
    for name in ("v6speaker", "v6friend"):
        joined(home, name)
    joined(home, "v6stranger", permit=False)  # pending: on the same radio, waiting for the household
    wait_until("the stranger's link-local address", lambda: link_local_ready(home, "v6stranger"), 10, 0.1)
    wait_until("the speaker's global address", lambda: delegated_address(home, "v6speaker"), 10, 0.1)
    speaker = str(delegated_address(home, "v6speaker"))
    with tempfile.TemporaryDirectory() as tmp:
        heard = {name: Path(tmp) / f"{name}.txt" for name in ("v6friend", "v6stranger")}
        listeners = []
        for name, out in heard.items():
            with out.open("w") as f:
                listeners.append(home.spawn(name, sys.executable, "-c", MDNS_LISTEN, stdout=f))
        try:
            wait_until("the listeners", lambda: all("listening" in p.read_text() for p in heard.values()), 10)
            home.exec("v6speaker", sys.executable, "-c", MDNS_ANNOUNCE, "link-local")
            home.exec("v6speaker", sys.executable, "-c", MDNS_ANNOUNCE, "global", speaker)
            wait_until(
                "the permitted friend to hear both",
                lambda: all(f"{tag}-4" in heard["v6friend"].read_text() for tag in ("link-local", "global")),
                5,
            )
            # The pending stranger's own announcements, then the speaker's again: the friend hears those only.
            home.exec("v6stranger", sys.executable, "-c", MDNS_ANNOUNCE, "stranger")
            home.exec("v6speaker", sys.executable, "-c", MDNS_ANNOUNCE, "after")
            wait_until("the speaker's later announcements", lambda: "after-4" in heard["v6friend"].read_text(), 5)
        finally:
            for listener in listeners:
                listener.kill()
        assert heard["v6stranger"].read_text().split() == ["listening"], "a pending device heard it"
        assert "stranger" not in heard["v6friend"].read_text(), "the friend heard the pending stranger"


def dig_status(home, name, qname, qtype) -> str:
    out = home.exec(name, "dig", "+time=2", "+tries=1", qname, qtype, check=False).stdout
    found = re.search(r"status: (\w+)", out)
    return found.group(1) if found else "TIMEOUT"


def test_a_blocked_name_fails_for_aaaa_and_a_and_its_ipv6_address_is_dropped(home):
    for name in ("v6kid", "v6parent"):
        joined(home, name)
        wait_until(f"{name}'s global address", lambda n=name: delegated_address(home, n), 10, 0.1)
    www6 = f"http://[{INET6_HOSTS[INTERNET6_HOST]}]/"
    assert fetch6(home, "v6kid", www6) == "200"  # before: reachable by address
    status, _ = home.api("POST", f"deny-dns/{home.mac('v6kid')}/{INTERNET6_HOST}")
    assert status == 200
    assert dig_status(home, "v6kid", INTERNET6_HOST, "AAAA") == "NXDOMAIN"
    assert dig_status(home, "v6kid", INTERNET6_HOST, "A") == "NXDOMAIN"
    # The router looked the name's AAAA up itself: the address is dropped for the kid, by address too.
    wait_until("the learnt IPv6 address blocked", lambda: fetch6(home, "v6kid", www6, timeout=2) == "000", 10)
    # Positive control: nobody else is affected.
    assert dig_status(home, "v6parent", INTERNET6_HOST, "AAAA") == "NOERROR"
    assert fetch6(home, "v6parent") == "200"


def router_resolver(home, name) -> str:
    """The DNS server the device's adverts name (RDNSS): the router's address in its ULA /64."""
    wait_until(f"{name}'s ULA address", lambda: [a for a in global_addresses(home, name) if a in ULA], 10, 0.1)
    [ula] = [a for a in global_addresses(home, name) if a in ULA]
    return str(own_64(ula).network_address + 1)


def dig6(home, name, server, qname, *options) -> tuple[str, str]:
    """(status, output) of an AAAA query the device sends to server over IPv6 ('TIMEOUT' if unanswered)."""
    out = home.exec(name, "dig", "-6", "+time=2", "+tries=1", *options, f"@{server}", qname, "AAAA", check=False)
    found = re.search(r"status: (\w+)", out.stdout)
    return (found.group(1) if found else "TIMEOUT"), out.stdout


def test_dns_over_ipv6_is_the_routers_and_gated_with_no_way_round_it(home):
    for name in ("v6dkid", "v6dpar"):
        joined(home, name)
        wait_until(f"{name}'s global address", lambda n=name: delegated_address(home, n), 10, 0.1)
    kid, parent = router_resolver(home, "v6dkid"), router_resolver(home, "v6dpar")
    www6 = INET6_HOSTS[INTERNET6_HOST]
    # With only the router's IPv6 resolver, a device resolves an IPv6-only name.
    status, out = dig6(home, "v6dpar", parent, INTERNET6_HOST)
    assert status == "NOERROR" and www6 in out, out
    status, _ = home.api("POST", f"deny-dns/{home.mac('v6dkid')}/{INTERNET6_HOST}")
    assert status == 200
    assert dig6(home, "v6dkid", kid, INTERNET6_HOST)[0] == "NXDOMAIN"
    # The attack: asking the internet's resolver over IPv6 directly. Redirected to the router's, refused.
    for transport in ((), ("+tcp",)):
        assert dig6(home, "v6dkid", INET6_DNS_IP, INTERNET6_HOST, *transport)[0] == "NXDOMAIN", transport
        # Positive control: the parent asks the same and gets the address.
        status, out = dig6(home, "v6dpar", INET6_DNS_IP, INTERNET6_HOST, *transport)
        assert status == "NOERROR" and www6 in out, out


def test_deny_cuts_ipv6_at_once(home):
    joined(home, "v6tablet")
    joined(home, "v6tv")
    for name in ("v6tablet", "v6tv"):
        wait_until(f"{name}'s global address", lambda n=name: delegated_address(home, n), 10, 0.1)
    with paced_download(home, "v6tablet", f"http://{INTERNET6_HOST}/paced/big.bin") as (download, size):
        home.deny("v6tablet")
        at_deny = size()
        download.wait(timeout=30)
        assert download.returncode != 0, "the IPv6 download finished although the device was denied"
        assert size() - at_deny < 50_000, f"{size() - at_deny} bytes arrived after the deny"
    assert fetch6(home, "v6tablet", timeout=3) == "000"
    # Positive control: another device is untouched.
    assert fetch6(home, "v6tv") == "200"


def test_new_connections_from_the_wan_are_dropped_replies_are_not(home):
    joined(home, "v6server")
    wait_until("a global address", lambda: delegated_address(home, "v6server"), 10, 0.1)
    address = delegated_address(home, "v6server")
    server = home.spawn(
        "v6server",
        "python3",
        "-m",
        "http.server",
        "--bind",
        "::",
        "8086",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://[{address}]:8086/"
        # Positive control: the server answers (from the router's own stack, on the LAN side).
        wait_until("the device's server", lambda: _curl_status(None, url) == "200", 10)
        # From the internet: a new connection to the device is dropped.
        assert _curl_status(NS_INET, url) == "000"
        # The device's own connection to the internet gets its replies.
        assert fetch6(home, "v6server") == "200"
    finally:
        server.kill()
        server.wait(timeout=10)


def _curl_status(ns: str | None, url: str) -> str:
    cmd = ["curl", "-6", "-sS", "-m", "3", "-o", "/dev/null", "-w", "%{http_code}", url]
    if ns:
        cmd = ["ip", "netns", "exec", ns, *cmd]
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()


def test_time_from_permit_to_a_usable_global_address(home):
    """Measured over ten devices: the household's yes to an address the device can use (the advert, SLAAC
    and its duplicate-address detection included; the device's DHCP renewal is not needed for it)."""
    times = []
    for n in range(10):
        name = f"v6m{n}"
        joined(home, name, permit=False)
        permitted_at = time.monotonic()
        home.permit(name)
        wait_until("a global address", lambda nm=name: delegated_address(home, nm), 15, 0.02)
        times.append(time.monotonic() - permitted_at)
        home.remove(name)
    times.sort()
    print(
        f"permit -> usable global IPv6 address over {len(times)} devices: median {statistics.median(times):.2f} s, "
        f"max {times[-1]:.2f} s ({', '.join(f'{t:.2f}' for t in times)})"
    )
    assert statistics.median(times) < 5


def test_an_ipv6_call_set_high_keeps_its_delay_low_while_an_upload_saturates_the_line(home):
    """Priorities hold for IPv6 as for IPv4 (test_priorities.py): the call's first packets reach the
    controller, its flow gets the app's mark, and the shaper's IPv6 filters put it in the High class."""
    for name in ("v6caller", "v6console"):
        joined(home, name)
    wait_until("the caller's global address", lambda: delegated_address(home, "v6caller"), 10, 0.1)
    set_priority(home, CALL_APP, "default")
    try:
        normal = call_under_load(home, "v6caller", "v6console", UP, 8, to=WAN6_INET_IP)
        set_priority(home, CALL_APP, "high")
        high = call_under_load(home, "v6caller", "v6console", UP, 8, to=WAN6_INET_IP)
    finally:
        set_priority(home, CALL_APP, "default")
    report = f"normal {normal.summary()}, high {high.summary()}"
    # Positive control: at Normal the IPv6 call waits behind the uploads' queue, as an IPv4 one does.
    assert normal.p(99) >= 10 * high.p(99), report
    assert high.loss_pct <= 0.5, report


RENUMBERED = ipaddress.IPv6Network("2001:db8:200::/56")


def address_flags(home, name, address: ipaddress.IPv6Address) -> dict:
    """What the device's kernel says of one of its addresses (deprecated, preferred_life_time, ...)."""
    out = home.exec(name, "ip", "-json", "-6", "addr", "show", "dev", "wlan0").stdout
    [info] = json.loads(out)
    [found] = [a for a in info["addr_info"] if a.get("local") == str(address)]
    return found


def test_a_new_delegated_prefix_moves_a_device_and_its_next_advert_deprecates_the_old(home):
    """Issue 22, test 6: the ISP's DHCPv6 server (Kea) delegates another prefix; the router's client
    (dhcpcd) gets it at its next renewal, and a permitted device gets an address in its /64 of the new
    prefix within seconds, its old address deprecated (preferred lifetime 0, still valid); new connections
    go from the new one, and the old one (no longer routed to the home) reaches nothing."""
    joined(home, "v6renum")
    old = wait_until("an address in the delegated prefix", lambda: delegated_address(home, "v6renum"), 10, 0.1)
    try:
        delegated_at = time.monotonic()
        delegate(home.processes, home.run_dir, str(RENUMBERED))

        def renumbered():
            return next((a for a in global_addresses(home, "v6renum") if a in RENUMBERED), None)

        new = wait_until("an address in the new prefix", renumbered, 15, 0.1)
        took = time.monotonic() - delegated_at
        flags = address_flags(home, "v6renum", old)
        assert flags.get("deprecated") and flags["preferred_life_time"] == 0 and flags["valid_life_time"] > 0, flags
        assert not address_flags(home, "v6renum", new).get("deprecated")
        # Its /64 keeps its number in the new prefix.
        offset = int(own_64(new).network_address) - int(RENUMBERED.network_address)
        assert offset == int(own_64(old).network_address) - int(DELEGATED.network_address)
        # New connections use the new address and reach the internet; bound to the old one, nothing answers.
        assert fetch6(home, "v6renum") == "200"
        assert fetch6(home, "v6renum", source=str(new)) == "200"
        assert fetch6(home, "v6renum", source=str(old), timeout=3) == "000"
        # A device that joins now is given a /64 of the new prefix only.
        joined(home, "v6renum2")
        wait_until("the newcomer's address in the new prefix", lambda: _in(home, "v6renum2", RENUMBERED), 10, 0.1)
        assert not _in(home, "v6renum2", DELEGATED)
        print(f"the ISP's new prefix -> the device's address in it: {took:.2f} s")
    finally:
        delegate(home.processes, home.run_dir, DELEGATED_PREFIX)  # the other tests' prefix: renumbering back
        wait_until("the device back in the first prefix", lambda: _in(home, "v6renum", DELEGATED, fresh=True), 15, 0.1)


SINGLE_64 = ipaddress.IPv6Network("2001:db8:300::/64")


def test_with_only_a_64_delegated_devices_keep_their_ula_and_reach_the_internet_over_ipv4(home):
    """Issue 22: the ISP delegates a single /64. A device's /64 must be its own and there is none to give
    (the router keeps that one, and does no NAT66): each permitted device has its ULA /64 only, its global
    address from before deprecated, and reaches the internet over IPv4, as RFC 6724 has a host with only a
    ULA source do."""
    joined(home, "v6single")
    # Both of its addresses usable first (each finishes duplicate-address detection on its own, up to a second
    # apart): the ULA one still tentative at the check below was read as lost (a CI run).
    wait_until("its global and ULA addresses", lambda: len(global_addresses(home, "v6single")) == 2, 10, 0.1)
    try:
        delegate(home.processes, home.run_dir, str(SINGLE_64))
        wait_until(
            "the global address to be deprecated", lambda: not _in(home, "v6single", DELEGATED, fresh=True), 15, 0.2
        )
        assert not _in(home, "v6single", SINGLE_64)
        assert [a for a in global_addresses(home, "v6single") if a in ULA], "the device lost its ULA address"
        assert home.fetch("v6single") == "200"  # the internet over IPv4
        # A device that joins now: its ULA /64 only, and the internet over IPv4.
        joined(home, "v6single2")
        wait_until(
            "the newcomer's ULA address", lambda: [a for a in global_addresses(home, "v6single2") if a in ULA], 10, 0.1
        )
        assert [a for a in global_addresses(home, "v6single2") if a not in ULA] == []
        assert home.fetch("v6single2") == "200"
        assert fetch6(home, "v6single2", timeout=3) == "000"  # an IPv6-only name: nothing, as with no IPv6 at all
    finally:
        delegate(home.processes, home.run_dir, DELEGATED_PREFIX)
        wait_until("the device back in the /56", lambda: _in(home, "v6single", DELEGATED, fresh=True), 15, 0.1)
    # Positive control: with a /56 again, the IPv6-only name by IPv6.
    wait_until("a page over IPv6 again", lambda: fetch6(home, "v6single") == "200", 10, 0.5)


def _in(home, name, prefix: ipaddress.IPv6Network, fresh: bool = False) -> bool:
    """Whether the device has an address in prefix (fresh: one not deprecated)."""
    for address in global_addresses(home, name):
        if address in prefix and not (fresh and address_flags(home, name, address).get("deprecated")):
            return True
    return False


MESH = ipaddress.IPv6Network("fd11:2233:4455:1::/64")
MESH_NODE = str(MESH.network_address + 0x77)  # a Thread device behind the border router
# The border router's adverts, as radvd (a router advertisement daemon we did not write) sends them for a
# Thread border router: not a default router (lifetime 0), its mesh's prefix as Route Information, and on
# shutdown a last advert withdrawing it (radvd's RemoveRoute, on by default).
RADVD_CONF = f"""
interface wlan0 {{
    AdvSendAdvert on;
    AdvDefaultLifetime 0;
    MinRtrAdvInterval 3;
    MaxRtrAdvInterval 10;
    route {MESH} {{
        AdvRouteLifetime 1800;
    }};
}};
"""
# A hostile device's forged advert (scapy): argv prefix, lifetime, its link-local source.
FORGED_ADVERT = """
import sys
from scapy.all import Ether, get_if_hwaddr, sendp
from scapy.layers.inet6 import ICMPv6ND_RA, ICMPv6NDOptRouteInfo, ICMPv6NDOptSrcLLAddr, IPv6
prefix, lifetime = sys.argv[1].split("/")[0], int(sys.argv[2])
mac = get_if_hwaddr("wlan0")
advert = Ether(src=mac, dst="33:33:00:00:00:01") / IPv6(src=sys.argv[3], dst="ff02::1", hlim=255)
advert /= ICMPv6ND_RA(routerlifetime=0) / ICMPv6NDOptSrcLLAddr(lladdr=mac)
advert /= ICMPv6NDOptRouteInfo(prefix=prefix, plen=64, rtlifetime=lifetime)
sendp(advert, iface="wlan0", verbose=False)
"""


def forge_route_advert(home, name, prefix, lifetime=1800):
    link_local = home.exec(name, "ip", "-j", "-6", "addr", "show", "dev", "wlan0", "scope", "link").stdout
    source = next(a["local"] for a in json.loads(link_local)[0]["addr_info"] if "local" in a)
    home.exec(name, sys.executable, "-c", FORGED_ADVERT, str(prefix), lifetime, source)


def border_router(home, name, directory: Path) -> subprocess.Popen:
    """radvd in the device, which forwards (as a border router does) and still takes the router's adverts."""
    home.exec(name, "sysctl", "-qw", "net.ipv6.conf.wlan0.accept_ra=2", "net.ipv6.conf.all.forwarding=1")
    conf = directory / "radvd.conf"
    conf.write_text(RADVD_CONF)
    log = (directory / "radvd.log").open("w")
    return home.spawn(
        name,
        "radvd",
        "-n",
        "-C",
        conf,
        "-p",
        directory / "radvd.pid",
        "-m",
        "stderr",
        "-d",
        "1",
        stdout=log,
        stderr=log,
    )


def told(home, name, text) -> bool:
    """The household's event log says `text` of the device's routes."""
    events = home.hwdb("select * from Events [range 2 minutes]")
    return any(e["kind"] == "route" and e["mac"] == home.mac(name) and text in e["message"] for e in events)


def mesh_route(home, name) -> str:
    return home.exec(name, "ip", "-6", "route", "show", str(MESH)).stdout.strip()


def test_a_thread_border_routers_mesh_is_reached_from_permitted_devices_and_not_from_a_pending_one(home, tmp_path):
    """A permitted device's radvd advertises a route to its Thread mesh (a node's address behind it, here
    held by the border router itself, on its loopback): the other permitted devices reach the node through
    the router, a pending one does not; the router's own resolver answers the node; a forged route into
    another device's /64 is refused; radvd stopping withdraws the route, and the mesh is gone."""
    joined(home, "v6border")  # the border router, permitted like any device
    joined(home, "v6hub")  # the household's phone with the Matter app
    joined(home, "v6visit", permit=False)
    # Linux reads Route Information only when told to (Apple's and Android's stacks always do).
    home.exec("v6hub", "sysctl", "-qw", "net.ipv6.conf.wlan0.accept_ra_rt_info_max_plen=64")
    for name in ("v6border", "v6hub"):
        wait_until(f"{name}'s ULA address", lambda n=name: [a for a in global_addresses(home, n) if a in ULA], 10, 0.1)
    wait_until("the visitor's link-local address", lambda: link_local_ready(home, "v6visit"), 10, 0.1)
    home.exec("v6border", "ip", "addr", "add", f"{MESH_NODE}/128", "dev", "lo", "nodad")
    node = home.spawn(
        "v6border",
        sys.executable,
        "-m",
        "http.server",
        "-b",
        MESH_NODE,
        "-d",
        tmp_path,
        "8099",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    radvd = None
    try:
        url = f"http://[{MESH_NODE}]:8099/"
        wait_until(
            "the node's page at the border router", lambda: fetch6(home, "v6border", url, timeout=2) == "200", 10, 0.2
        )
        # Before the border router says so, the mesh is nowhere.
        assert fetch6(home, "v6hub", url, timeout=2) == "000"
        radvd = border_router(home, "v6border", tmp_path)
        # The hub hears the route in the router's advert (the router its next hop) and reaches the node.
        hint = lambda: (tmp_path / "radvd.log").read_text()[-1000:]  # noqa: E731
        wait_until(
            "the hub's route to the mesh", lambda: "via fe80::1" in mesh_route(home, "v6hub"), 20, 0.2, hint=hint
        )
        wait_until("the node's page from the hub", lambda: fetch6(home, "v6hub", url, timeout=2) == "200", 10, 0.5)
        # The router's stack routes the mesh to the border router too: its resolver answers the node.
        resolver = router_resolver(home, "v6border")
        status, out = dig6(home, "v6border", resolver, INTERNET6_HOST, "-b", MESH_NODE)
        assert status == "NOERROR" and INET6_HOSTS[INTERNET6_HOST] in out, out
        # The pending visitor, even posing as a node of the mesh with a route of its own: nothing.
        home.exec("v6visit", "ip", "addr", "add", f"{MESH.network_address + 0x99}/128", "dev", "wlan0", "nodad")
        home.exec("v6visit", "ip", "-6", "route", "add", str(MESH), "via", "fe80::1", "dev", "wlan0")
        assert fetch6(home, "v6visit", url, timeout=2) == "000"
        # A forged route into the hub's own /64 is refused (the household is told): the hub's traffic stays its own.
        [hub_ula] = [a for a in global_addresses(home, "v6hub") if a in ULA]
        forge_route_advert(home, "v6border", own_64(hub_ula))
        wait_until(
            "the household to be told of the refusal",
            lambda: told(home, "v6border", f"{own_64(hub_ula)}, refused"),
            10,
            0.5,
        )
        assert home.exec("v6border", "ping", "-6", "-c1", "-W2", str(hub_ula), check=False).returncode == 0
        # Positive control: the hub still reaches the internet and the node.
        assert fetch6(home, "v6hub") == "200" and fetch6(home, "v6hub", url, timeout=2) == "200"
        # radvd stops: its last advert withdraws the route, and the mesh is cut off.
        radvd.terminate()
        radvd.wait(timeout=10)
        wait_until("the household to be told", lambda: told(home, "v6border", f"withdrew its route to {MESH}"), 10, 0.5)
        assert fetch6(home, "v6hub", url, timeout=2) == "000"
        # Back, and then the border router denied: the mesh is cut off with it.
        radvd = border_router(home, "v6border", tmp_path)
        wait_until("the node's page again", lambda: fetch6(home, "v6hub", url, timeout=2) == "200", 20, 0.5)
        home.deny("v6border")
        wait_until("the mesh to be cut off", lambda: fetch6(home, "v6hub", url, timeout=2) == "000", 10, 0.5)
    finally:
        for process in (node, radvd):
            if process is not None:
                process.kill()
