"""make bench ipv6_permit: the household's yes to a device that can use IPv6, beside the same yes to
a device that can use IPv4, each device measured for both in the same run.

A device joins and waits (pending: no global IPv6 address, nothing forwarded); the household
permits it; from that moment the device is polled every 20 ms for a usable global address in its
own /64 (the controller's unicast advert, the kernel's SLAAC and its duplicate-address detection
done) and a fetch over IPv6 to it, and for a fetch over IPv4 (its rules are in at the permit; no
DHCP renewal is needed for either). Writes bench/results/ipv6_permit.json.
"""

from __future__ import annotations

import ipaddress
import json
import time

from common import add_client, homenet_up, summary, write_result

from homenet.home import INTERNET_IP
from homenet.ipv6 import DELEGATED_PREFIX, INTERNET6_HOST

DELEGATED = ipaddress.IPv6Network(DELEGATED_PREFIX)
POLL_S = 0.02
GIVE_UP_S = 15.0


def _global_address(home, name: str) -> bool:
    """Whether the device has a usable address in the delegated prefix (not tentative, DAD passed)."""
    out = home.exec(name, "ip", "-json", "-6", "addr", "show", "dev", "wlan0", "scope", "global").stdout
    info = json.loads(out or "[]")
    return any(
        ipaddress.IPv6Address(a["local"]) in DELEGATED and not a.get("tentative") and not a.get("dadfailed")
        for a in (info[0].get("addr_info", []) if info else [])
        if "local" in a
    )


def _fetches(home, name: str, family: str, url: str) -> bool:
    cmd = ("curl", family, "-s", "-m", "1", "-o", "/dev/null", "-w", "%{http_code}", url)
    return home.exec(name, *cmd, check=False).stdout.strip() == "200"


def one_device(home, name: str) -> tuple[float, float]:
    """Seconds from the permit to the first IPv4 fetch, and to the first IPv6 fetch from a global address."""
    add_client(home, name)
    permitted_at = time.monotonic()
    home.permit(name)
    v4 = v6 = None
    while (v4 is None or v6 is None) and time.monotonic() - permitted_at < GIVE_UP_S:
        if v4 is None and _fetches(home, name, "-4", f"http://{INTERNET_IP}/"):
            v4 = time.monotonic() - permitted_at
        if v6 is None and _global_address(home, name) and _fetches(home, name, "-6", f"http://{INTERNET6_HOST}/"):
            v6 = time.monotonic() - permitted_at
        time.sleep(POLL_S)
    home.remove(name)
    if v4 is None or v6 is None:
        raise RuntimeError(f"{name}: no {'IPv4' if v4 is None else 'IPv6'} within {GIVE_UP_S:g} s of the permit")
    return v4, v6


def measure(devices: int) -> dict:
    home = homenet_up()
    try:
        times = [one_device(home, f"v6p{n}") for n in range(devices)]
    finally:
        home.down()
    v4, v6 = summary([t[0] for t in times]), summary([t[1] for t in times])
    return {
        "what": (
            f"{devices} devices, one after another: pending, then permitted; seconds from the permit to the first "
            "page fetched over IPv6 from a global address in the device's own /64 (advert, SLAAC, its "
            "duplicate-address detection), beside the first page fetched over IPv4 by the same device"
        ),
        "ipv4": v4,
        "ipv6": v6,
        "rows": [
            [
                "permit to a usable global IPv6 address (fetched over it), median",
                f"{v6['median_ms'] / 1000:.2f} s",
                f"{v4['median_ms'] / 1000:.2f} s over IPv4",
                f"{v6['median_ms'] / v4['median_ms']:.1f}x",
                "seconds; the device's own DAD takes 1 s",
            ],
            [
                "permit to a usable global IPv6 address, p99",
                f"{v6['p99_ms'] / 1000:.2f} s",
                f"{v4['p99_ms'] / 1000:.2f} s over IPv4",
                f"{v6['p99_ms'] / v4['p99_ms']:.1f}x",
                "",
            ],
        ],
    }


def ipv6_permit(args) -> None:
    write_result("ipv6_permit", measure(args.ipv6_devices))
