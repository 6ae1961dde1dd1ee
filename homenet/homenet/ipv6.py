"""The emulated home's IPv6: the internet namespace on the WAN link's /64 (a web server on it, AAAA names
in its DNS), a prefix the ISP "delegated" to the router (written where the controller reads it), IPv6
forwarding in the router, and its firewall (RFC 6092: from the WAN only answers get in).

Devices need nothing: their namespaces' kernels do SLAAC from the controller's router adverts (accept_ra
is on in a new namespace, whose forwarding is off).

The prefix comes by DHCPv6 prefix delegation, both ends real: Kea (`kea-dhcp6`) on the ISP's access
bridge (`dist` in hw-dist, the households' side of its aggregation switch, as a provider's edge serves
DHCPv6) delegates a /56 from its pool, and dhcpcd on the router's WAN asks for a /56 (RFC 7084) and
assigns it to no interface; its hook writes the prefix where the controller reads it. `delegate` is the
ISP renumbering the household: Kea's pool becomes another /56 (reloaded with SIGHUP), and at dhcpcd's next
renewal (every few seconds here) Kea hands out the new prefix and the old one with lifetime 0. The internet
routes both pools to the router (Kea does not route; a real ISP's edge does).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

from homework_deploy import prefix_delegation

from .isp import DIST, NS_DIST
from .net import nft_table, run
from .services import Processes
from .wait import wait_until

WAN6_PREFIX = "2001:db8:ffff::/64"  # the WAN link: the router and the internet
WAN6_ROUTER_IP, WAN6_INET_IP = "2001:db8:ffff::2", "2001:db8:ffff::1"
# Names with only an IPv6 address: reaching them at all proves the IPv6 path (the IPv4 names stay IPv4-only,
# so every other test's traffic is what it was).
INET6_HOSTS = {"www6.example.test": "2001:db8:ffff::80"}
INTERNET6_HOST = "www6.example.test"
INET6_DNS_IP = WAN6_INET_IP
DELEGATED_PREFIX = "2001:db8:100::/56"
# What the ISP may delegate to this household, routed to it: another /56 (a renumbering), a single /64 (the
# least RFC 7084 lets a router accept).
ISP_POOLS = (DELEGATED_PREFIX, "2001:db8:200::/56", "2001:db8:300::/64")
KEA_CONF = "kea-dhcp6.json"
# Lease times kept short so a renumbering reaches the router within seconds (a real ISP's are hours).
PD_RENEW_S, PD_REBIND_S, PD_PREFERRED_S, PD_VALID_S = 3, 5, 300, 600
DELEGATED_FILE = prefix_delegation.DELEGATED_FILE
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
    for pool in ISP_POOLS:
        run("ip", "-6", "route", "replace", pool, "via", WAN6_ROUTER_IP, "dev", "eth0", ns=inet_ns)


def kea_config(prefix: str, interface: str = DIST, renew_s: int = PD_RENEW_S, rebind_s: int = PD_REBIND_S) -> str:
    """Kea delegating prefix whole to the client that asks on interface (the WAN link, WAN6_PREFIX); the
    boot test's upstream (homenet.routervm) uses it too, with an ISP's slower renewals."""
    net, length = prefix.split("/")
    return json.dumps(
        {
            "Dhcp6": {
                "interfaces-config": {"interfaces": [interface]},
                "server-id": {"type": "LL", "persist": False},
                "lease-database": {"type": "memfile", "persist": False},
                "renew-timer": renew_s,
                "rebind-timer": rebind_s,
                "preferred-lifetime": PD_PREFERRED_S,
                "valid-lifetime": PD_VALID_S,
                "subnet6": [
                    {
                        "id": 1,
                        "subnet": WAN6_PREFIX,
                        "interface": interface,
                        "pd-pools": [{"prefix": net, "prefix-len": int(length), "delegated-len": int(length)}],
                    }
                ],
                "loggers": [{"name": "kea-dhcp6", "output_options": [{"output": "stdout"}], "severity": "INFO"}],
            }
        },
        indent=1,
    )


def start_prefix_delegation(
    processes: Processes, run_dir: Path, wan: str, state_dir: Path, start_client: Callable[[], None]
) -> None:
    """Kea at the ISP's edge delegating the first pool, dhcpcd on the router's WAN asking for it (start_client:
    services.toml's wan-pd, reading its configuration and hook from run_dir, its SERVICE_FILES); returns when
    the prefix is in the file the controller reads."""
    (run_dir / KEA_CONF).write_text(kea_config(DELEGATED_PREFIX))
    # Kea binds the link-local address, which cannot be bound while in duplicate-address detection; and
    # the client's first solicits, if lost, are repeated only after tens of seconds.
    wait_until("the ISP's link-local address", lambda: link_local_ready(NS_DIST, DIST), 10, 0.1)
    kea_env = [f"KEA_PIDFILE_DIR={run_dir}", f"KEA_LOCKFILE_DIR={run_dir}"]
    processes.start("isp-dhcp6", ["env", *kea_env, "kea-dhcp6", "-c", run_dir / KEA_CONF], ns=NS_DIST)
    # No router adverts to wait for (the WAN link has none): DHCPv6 at once.
    prefix_delegation.write_files(run_dir, wan, state_dir)
    # A fresh lease: one from an earlier run (perhaps of the other pool) would be rebound first.
    Path(f"/var/lib/dhcpcd/{wan}.lease6").unlink(missing_ok=True)
    start_client()
    wait_until("the delegated prefix", lambda: delegated_now(state_dir), 30, 0.2)


def link_local_ready(ns: str, dev: str) -> bool:
    out = run("ip", "-6", "addr", "show", "dev", dev, "scope", "link", ns=ns)
    return "inet6" in out and "tentative" not in out


def delegated_now(state_dir: Path) -> str:
    """The prefix the router's prefix-delegation client last wrote ("" for none), without its lifetimes."""
    try:
        fields = (state_dir / DELEGATED_FILE).read_text().split()
    except FileNotFoundError:
        return ""
    return fields[0] if fields else ""


def delegate(processes: Processes, run_dir: Path, prefix: str) -> None:
    """The ISP renumbers the household: Kea's pool becomes prefix (one of ISP_POOLS), reloaded; dhcpcd's
    next renewal brings it to the router (the controller renumbers the devices at its next tick)."""
    assert prefix in ISP_POOLS, f"{prefix}: the internet routes only {ISP_POOLS}"
    tmp = run_dir / f"{KEA_CONF}.tmp"
    tmp.write_text(kea_config(prefix))
    os.replace(tmp, run_dir / KEA_CONF)
    pid = processes.pid("isp-dhcp6")
    assert pid, "Kea is not running"
    os.killpg(pid, signal.SIGHUP)


def build_router(run_dir: Path, lan: str, wan: str, state_dir: Path) -> None:
    """IPv6 on the LAN bridge (the controller adds each device's gateway there), forwarding, the
    firewall, and the delegated prefix where the controller reads it."""
    orig = run_dir / "ipv6_forwarding.orig"
    if not orig.exists():
        orig.write_text(FORWARDING.read_text())
    FORWARDING.write_text("1\n")
    Path(f"/proc/sys/net/ipv6/conf/{lan}/disable_ipv6").write_text("0\n")
    # The prefix-delegation client writes it, in a directory of its own (made for it: on the image it may not).
    (state_dir / DELEGATED_FILE).parent.mkdir(exist_ok=True)
    (state_dir / DELEGATED_FILE).unlink(missing_ok=True)
    nft_table(
        "ip6",
        NFT6_TABLE,
        f"""
  # RFC 6092: from the WAN, answers to the devices' own connections get in, new connections do not.
  # Neighbour discovery on the WAN link itself is the router's to answer.
  chain input {{
    type filter hook input priority filter; policy accept;
    iifname "{wan}" ct state established,related accept
    iifname "{wan}" icmpv6 type {{ nd-neighbor-solicit, nd-neighbor-advert, nd-router-advert }} accept
    # The ISP's DHCPv6 replies to the router's prefix-delegation client (its solicits go to a multicast
    # address, so the replies match no connection), from the link only.
    iifname "{wan}" ip6 saddr fe80::/10 udp sport 547 udp dport 546 accept
    iifname "{wan}" drop
  }}
  chain forward {{
    type filter hook forward priority filter; policy accept;
    iifname "{wan}" oifname "{lan}" ct state established,related accept
    iifname "{wan}" drop
    # Containment: the emulated home's only way out is the emulated internet.
    iifname "{lan}" oifname != {{ "{wan}", "{lan}" }} drop
  }}
""",
    )


def tear_down(run_dir: Path) -> None:
    run("nft", "delete", "table", "ip6", NFT6_TABLE, check=False)
    orig = run_dir / "ipv6_forwarding.orig"
    if orig.exists():
        FORWARDING.write_text(orig.read_text())
