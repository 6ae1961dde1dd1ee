"""A second, wired access port (lan1) beside the radio's (wlan0), with real dhclients, OVS and the controller:
a wired device is gated and isolated as a station is, and a device's MAC on the other port is a copy."""

from __future__ import annotations

import time

from homenet import INTERNET_IP, wait_until
from homenet.home import LAN_PORT, PYTHON, ROUTER_MAC
from homenet.net import run


def status(home, mac):
    return home.api("GET", f"status/{mac}")[1]


def clone_rows(home, mac):
    return [
        r for r in home.hwdb("select * from Events [range 5 minutes]") if r["kind"] == "mac-clone" and r["mac"] == mac
    ]


def permitted(home, name):
    """Joined, permitted, renewed to the hour-long lease; returns its address."""
    home.dhcp(name)
    home.permit(name)
    wait_until(f"{name}'s hour-long lease", lambda: home.lease_left(name) >= 3500, 25, 0.5)
    return home.address(name)


def send_udp(home, name, src_mac, src_ip, port, count=5):
    """Frames to the internet from inside a device, with the source MAC and address given (scapy)."""
    code = (
        "from scapy.all import Ether, IP, UDP, sendp; "
        f"sendp(Ether(src='{src_mac}', dst='{ROUTER_MAC}') / IP(src='{src_ip}', dst='{INTERNET_IP}') "
        f"/ UDP(sport=40000, dport={port}) / b'x', iface='wlan0', count={count}, inter=0.1, verbose=False)"
    )
    home.exec(name, PYTHON, "-c", code)


def test_a_wired_device_is_pending_and_reaches_nothing_until_permitted_then_fetches_a_page(home):
    mac = home.add("desk", wired=True)
    home.dhcp("desk")
    assert home.lease_left("desk") <= 30  # a pending device's 30 s /30, as on the air
    assert status(home, mac)["state"] == "pending" and status(home, mac)["access_port"] is not None
    assert home.fetch("desk", f"http://{INTERNET_IP}/", timeout=3) == "000"
    # Positive control: permitted, its renewal brings the hour-long lease and the page.
    home.permit("desk")
    wait_until("the hour-long lease on the cable", lambda: home.lease_left("desk") >= 3500, 25, 0.5)
    wait_until("a page over the cable", lambda: home.fetch("desk") == "200", 10)


def test_a_wired_and_a_wifi_device_reach_each_other_only_through_the_router(home):
    home.add("desk", wired=True)
    permitted(home, "desk")
    home.add("phone")
    phone_ip = permitted(home, "phone").split("/")[0]
    out = home.exec("desk", "ping", "-c", "5", "-i", "0.2", "-W", "2", phone_ip).stdout
    assert " 0% packet loss" in out
    # Routed by the router, not bridged: the phone's replies arrive with TTL 63, not 64.
    assert "ttl=63" in out


def test_the_wifi_devices_mac_on_the_wired_port_is_dropped_and_raised_while_the_device_keeps_working(home):
    phone_mac = home.add("phone")
    phone_ip = permitted(home, "phone").split("/")[0]
    home.add("desk", wired=True)  # the copier, on a cable
    before = home.api("GET", "counters")[1]["mac_clone_suspected"]
    rows_before = len(clone_rows(home, phone_mac))
    with home.internet_capture("udp dst port 9") as arrived:
        # Positive control: the phone itself, from the air, reaches the internet.
        send_udp(home, "phone", phone_mac, phone_ip, 9)
        wait_until("the phone's own frames on the internet", lambda: len(arrived()) >= 5, 5, 0.2)
        seen = len(arrived())
        # The same frames, the phone's MAC and address, from the wired port: none gets out.
        send_udp(home, "desk", phone_mac, phone_ip, 9)
        time.sleep(1)
        assert len(arrived()) == seen
    rows = wait_until("the mac-clone event in hwdb", lambda: clone_rows(home, phone_mac)[rows_before:], 15, 0.5)
    assert "access port" in rows[0]["message"]
    assert home.api("GET", "counters")[1]["mac_clone_suspected"] > before
    phone = status(home, phone_mac)
    assert phone["clone_suspected"] is not None and phone["state"] == "permitted"
    # The real phone keeps its port and works.
    assert home.fetch("phone") == "200"


def test_a_laptop_whose_cable_is_pulled_moves_to_the_wifi_with_its_address_and_no_alert(home):
    mac = home.add("desk", wired=True)
    address = permitted(home, "desk")
    rows_before = len(clone_rows(home, mac))
    run("ip", "link", "set", LAN_PORT, "down")  # the cable is pulled: OVS tells the controller the link is down
    home.add("laptop", mac=mac)  # the same laptop, now on the Wi-Fi
    # Its first DHCP from the air moves it (the frame itself is not served); dhclient's retry is.
    assert home.dhcp("laptop").split("/")[0] == address
    wait_until("a page over the Wi-Fi", lambda: home.fetch("laptop") == "200", 10)
    assert status(home, mac)["state"] == "permitted"
    # No port alert: it moved. (The emulated home's dhclient sends its namespace's name, "laptop" now,
    # which the DHCP fingerprint check does notice; a real laptop keeps its host name.)
    assert not [r for r in clone_rows(home, mac)[rows_before:] if "access port" in r["message"]]
