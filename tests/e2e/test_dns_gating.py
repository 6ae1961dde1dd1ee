"""Blocking a name for one device, with real dig and curl, and the block holding by address."""

from __future__ import annotations

import re
import sys

GAMES_IP = "198.51.100.81"


def dig(home, name, *opts):
    out = home.exec(
        "tomtab" if not opts or opts[0] != "@other" else "other",
        "dig",
        "+time=2",
        "+tries=1",
        name,
        *[o for o in opts if o != "@other"],
        check=False,
    ).stdout
    status = re.search(r"status: (\w+)", out)
    millis = re.search(r"Query time: (\d+) msec", out)
    return (status.group(1) if status else "TIMEOUT"), (int(millis.group(1)) if millis else None)


def test_a_blocked_name_is_refused_at_once_and_its_address_unreachable_for_that_device_only(home):
    for name in ("tomtab", "other"):
        home.add(name)
        home.dhcp(name)
        home.permit(name)
    mac = home.mac("tomtab")
    status, body = home.api("POST", f"deny-dns/{mac}/Games.Example.TEST")
    assert status == 200 and body == [
        {"domain": "games.example.test", "display": "games.example.test", "action": "deny"}
    ]
    rcode, ms = dig(home, "games.example.test")
    assert rcode == "NXDOMAIN" and ms is not None and ms < 50
    assert dig(home, "sub.games.example.test")[0] == "NXDOMAIN"
    assert dig(home, "games.example.test", "+tcp")[0] == "NXDOMAIN"
    assert dig(home, "games.example.test", "@8.8.8.8")[0] == "NXDOMAIN"  # ignoring the router's DNS
    assert dig(home, "www.example.test")[0] == "NOERROR"
    assert home.fetch("tomtab", "http://www.example.test/") == "200"
    # Connecting to the site's address directly does not get round the block...
    assert home.fetch("tomtab", f"http://{GAMES_IP}/", timeout=3) != "200"
    # ...and nobody else is affected.
    assert dig(home, "games.example.test", "@other")[0] == "NOERROR"
    assert home.fetch("other", "http://games.example.test/") == "200"

    # The block survives a controller restart, and lifting it restores everything.
    home.restart("controller")
    assert home.api("GET", f"dns-rules/{mac}")[1][0]["domain"] == "games.example.test"
    assert dig(home, "games.example.test")[0] == "NXDOMAIN"
    assert home.api("POST", f"permit-dns/{mac}/games.example.test") == (200, [])
    assert dig(home, "games.example.test")[0] == "NOERROR"
    assert home.fetch("tomtab", "http://games.example.test/") == "200"


def test_bad_domains_are_refused_with_a_clear_error(home):
    home.add("typo")
    home.dhcp("typo")
    status, body = home.api("POST", f"deny-dns/{home.mac('typo')}/bad..name")
    assert status == 400 and "not a domain name" in body["error"]


def test_malformed_queries_are_dropped_and_counted(home):
    home.add("garbler")
    home.dhcp("garbler")
    home.permit("garbler")
    before = home.api("GET", "counters")[1]["dns_malformed"]
    gateway = home.exec("garbler", "ip", "route").stdout.split()[2]
    home.exec(
        "garbler",
        sys.executable,
        "-c",
        "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"for junk in (b'garbage-not-dns', b'\\x00' * 3, b'\\xff' * 40): s.sendto(junk, ('{gateway}', 53))",
    )
    assert dig_ok(home, "garbler")
    assert home.api("GET", "counters")[1]["dns_malformed"] >= before + 3


def dig_ok(home, name):
    return home.exec(name, "dig", "+short", "+time=2", "+tries=1", "www.example.test").stdout.strip() == "198.51.100.80"
