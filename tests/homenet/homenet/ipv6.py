"""The emulated home's IPv6: the internet namespace on the WAN link's /64 (a web server on it, AAAA names
in its DNS), a prefix the ISP "delegated" to the router (written where the controller reads it), IPv6
forwarding in the router, and its firewall (RFC 6092: from the WAN only answers get in).

Devices need nothing: their namespaces' kernels do SLAAC from the controller's router adverts (accept_ra
is on in a new namespace, whose forwarding is off). Prefix delegation by a real DHCPv6 server (Kea) in
the ISP is not built yet: the delegated prefix is a fixed one, and `delegate` plays the ISP delegating
another (the route in the internet, the file the prefix-delegation client would rewrite).
"""

from __future__ import annotations

import os
from pathlib import Path

from .net import run

WAN6_PREFIX = "2001:db8:ffff::/64"  # the WAN link: the router and the internet
WAN6_ROUTER_IP, WAN6_INET_IP = "2001:db8:ffff::2", "2001:db8:ffff::1"
# Names with only an IPv6 address: reaching them at all proves the IPv6 path (the IPv4 names stay IPv4-only,
# so every other test's traffic is what it was).
INET6_HOSTS = {"www6.example.test": "2001:db8:ffff::80"}
INTERNET6_HOST = "www6.example.test"
INET6_DNS_IP = WAN6_INET_IP
DELEGATED_PREFIX = "2001:db8:100::/56"
DELEGATED_FILE = "ipv6-delegated-prefix"  # homework_controller.ipv6.DELEGATED_FILE, beside its database
NFT6_TABLE = "homenet6"
FORWARDING = Path("/proc/sys/net/ipv6/conf/all/forwarding")


def dnsmasq_records() -> list[str]:
    """The internet's DNS server: its IPv6 names, and answering over IPv6 too (on INET6_DNS_IP: a resolver
    a device may try to ask directly, round the router's; the router redirects it)."""
    return [f"--listen-address={INET6_DNS_IP}"] + [f"--host-record={name},{ip}" for name, ip in INET6_HOSTS.items()]


def build_internet(wan: str, inet_ns: str) -> None:
    """The WAN link's /64 on both ends (no duplicate-address detection: a fixed plan), the internet's
    hosts on it, and the internet's route to the household's delegated prefix."""
    run("ip", "-6", "addr", "replace", f"{WAN6_ROUTER_IP}/64", "dev", wan, "nodad")
    run("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0", ns=inet_ns)
    for ip in [WAN6_INET_IP, *INET6_HOSTS.values()]:
        run("ip", "-6", "addr", "replace", f"{ip}/64", "dev", "eth0", "nodad", ns=inet_ns)
    run("ip", "-6", "route", "replace", DELEGATED_PREFIX, "via", WAN6_ROUTER_IP, "dev", "eth0", ns=inet_ns)


def delegate(state_dir: Path, prefix: str, inet_ns: str) -> None:
    """The ISP delegates another prefix to the router: the internet routes it there, and the file beside
    the controller's database says it, replaced atomically as a prefix-delegation client writes it (the
    controller renumbers the devices at its next tick)."""
    run("ip", "-6", "route", "replace", prefix, "via", WAN6_ROUTER_IP, "dev", "eth0", ns=inet_ns)
    tmp = state_dir / f"{DELEGATED_FILE}.tmp"
    tmp.write_text(prefix + "\n")
    os.replace(tmp, state_dir / DELEGATED_FILE)


def build_router(run_dir: Path, lan: str, wan: str, state_dir: Path) -> None:
    """IPv6 on the LAN bridge (the controller adds each device's gateway there), forwarding, the
    firewall, and the delegated prefix where the controller reads it."""
    orig = run_dir / "ipv6_forwarding.orig"
    if not orig.exists():
        orig.write_text(FORWARDING.read_text())
    FORWARDING.write_text("1\n")
    Path(f"/proc/sys/net/ipv6/conf/{lan}/disable_ipv6").write_text("0\n")
    (state_dir / DELEGATED_FILE).write_text(DELEGATED_PREFIX + "\n")
    if run("nft", "list", "table", "ip6", NFT6_TABLE, check=False):
        return
    run(
        "nft",
        "-f",
        "-",
        input=f"""
table ip6 {NFT6_TABLE} {{
  # RFC 6092: from the WAN, answers to the devices' own connections get in, new connections do not.
  # Neighbour discovery on the WAN link itself is the router's to answer.
  chain input {{
    type filter hook input priority filter; policy accept;
    iifname "{wan}" ct state established,related accept
    iifname "{wan}" icmpv6 type {{ nd-neighbor-solicit, nd-neighbor-advert, nd-router-advert }} accept
    iifname "{wan}" drop
  }}
  chain forward {{
    type filter hook forward priority filter; policy accept;
    iifname "{wan}" oifname "{lan}" ct state established,related accept
    iifname "{wan}" drop
    # Containment: the emulated home's only way out is the emulated internet.
    iifname "{lan}" oifname != {{ "{wan}", "{lan}" }} drop
  }}
}}
""",
    )


def tear_down(run_dir: Path) -> None:
    run("nft", "delete", "table", "ip6", NFT6_TABLE, check=False)
    orig = run_dir / "ipv6_forwarding.orig"
    if orig.exists():
        FORWARDING.write_text(orig.read_text())
