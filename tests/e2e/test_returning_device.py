"""A phone back under a new private MAC, without a passphrase of its own, with real dhclients in the
emulated home (issue 23): the router offers it as the phone it looks like (same DHCP name, the whole
DHCP client alike: issue 39), and once the household says so it is that phone, with its name, its address and a
permitted device's lease, and it reaches the internet. While the phone is online, a newcomer with its
name is another device, and is not offered.
"""

from __future__ import annotations

import json
import subprocess

from homenet import wait_until

NEW_MAC = "06:e2:e0:00:00:51"  # a locally administered address, as phones pick for privacy


def status(home, mac):
    return home.api("GET", f"status/{mac}")[1]


def router_neighbour(ip: str) -> str | None:
    """The MAC the router's own stack has for a LAN address (the root namespace is the router's)."""
    out = subprocess.run(["ip", "-j", "neigh", "show", ip, "dev", "br-lan"], capture_output=True, text=True).stdout
    entries = [e for e in json.loads(out or "[]") if "lladdr" in e]
    return entries[0]["lladdr"] if entries else None


def test_a_returning_phone_is_offered_as_itself_and_once_merged_gets_its_address_and_the_internet(home):
    phone = home.add("annaphone")
    home.dhcp("annaphone")
    home.permit("annaphone")
    address = home.dhcp("annaphone")  # the hour-long lease
    assert home.api("POST", f"name/{phone}?name=Anna%27s%20phone")[0] == 200

    # While the phone is online, a newcomer calling itself the same is another device: no offer.
    home.add("lookalike", mac="06:e2:e0:00:00:52")
    home.dhcp("lookalike", host_name="annaphone")
    assert status(home, "06:e2:e0:00:00:52")["looks_like"] is None
    assert home.api("POST", f"merge/06:e2:e0:00:00:52/{phone}")[0] == 409
    home.remove("lookalike")

    # The phone leaves (its lease released) and comes back under a new private MAC. Only a device whose
    # lease is over is offered: the release (one datagram, never sent again) must have reached the router.
    home.release("annaphone")
    wait_until("the router to record the release", lambda: status(home, phone)["lease_seconds_left"] == 0, 5, 0.1)
    home.remove("annaphone")
    home.add("annaback", mac=NEW_MAC)
    pending_address = home.dhcp("annaback", host_name="annaphone")
    newcomer = status(home, NEW_MAC)
    assert newcomer["state"] == "pending" and pending_address != address
    offered = newcomer["looks_like"] or {}
    assert (offered.get("mac"), offered.get("label")) == (phone, "Anna's phone"), (newcomer, status(home, phone))
    assert {"host name", "requested options"} <= set(offered["matched"])  # its whole DHCP client (issue 39)
    assert home.fetch("annaback") == "000"  # a newcomer reaches nothing yet
    pending_ip = pending_address.split("/")[0]
    assert router_neighbour(pending_ip) == NEW_MAC  # the router's stack answered its DNS: it knows its MAC

    code, merged = home.api("POST", f"merge/{NEW_MAC}/{phone}")
    assert code == 200
    assert (merged["state"], merged["name"], merged["earlier_macs"]) == ("permitted", "Anna's phone", [phone])
    assert home.api("GET", f"status/{phone}")[0] == 404
    # The stack forgets the MACs it had: the pending /30 goes to the next newcomer, and the phone's own
    # address is behind its new MAC now (else the stack's answers would go to MACs the switch drops).
    phone_ip = address.split("/")[0]
    wait_until(
        "the router's stack to forget the old MACs",
        lambda: router_neighbour(pending_ip) is None and router_neighbour(phone_ip) != phone,
        5,
        0.1,
    )
    # It asks again (as it does when its short lease runs out): the phone's own /30, an hour's lease.
    assert home.dhcp("annaback", host_name="annaphone") == address
    assert home.lease_left("annaback") > 3000
    assert home.fetch("annaback") == "200"
