"""Link-layer gating with real hostapd and wpa_supplicant, and a router one device cannot knock over."""
from __future__ import annotations

import subprocess
import time

from conftest import HOMENET, REPO, RUN, sh

PY = str(REPO / ".venv" / "bin" / "python")
BENCH = REPO / "bench"


def hostapd_denied():
    time.sleep(0.5)  # the controller tells hostapd from its own thread
    return sh("hostapd_cli", "-p", str(RUN / "hostapd"), "-i", "br-lan", "deny_acl", "SHOW").stdout


def eap_state(home, name):
    out = sh(HOMENET, "client", "auth", name, "--status").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line).get("EAP state")


def wait_for_eap(home, name, state, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if eap_state(home, name) == state:
            return True
        time.sleep(0.5)
    return False


def test_whitelisted_device_authenticates_blacklisted_never_until_lifted(home):
    home.add("trusted", "--8021x", "alice:wonderland")
    home.decide("whitelist", "trusted")
    sh(HOMENET, "client", "auth", "trusted")
    assert wait_for_eap(home, "trusted", "SUCCESS", 15)
    home.dhcp("trusted")
    assert home.lease_left("trusted") > 3500  # admitted without asking: the hour-long lease at once
    assert home.fetch("trusted").stdout == "200"

    home.add("banned", "--8021x", "mallory:letmein")
    home.decide("blacklist", "banned")
    status, listed = home.api("GET", "blacklist-status")
    assert home.mac("banned") in listed
    assert home.mac("banned") in hostapd_denied()  # what a real radio's hostapd needs to refuse it
    sh(HOMENET, "client", "auth", "banned")
    assert not wait_for_eap(home, "banned", "SUCCESS", 8)
    assert sh(HOMENET, "client", "dhcp", "banned", "--timeout", "6", check=False).returncode != 0

    home.decide("whitelist", "banned")
    assert home.mac("banned") not in hostapd_denied()
    sh(HOMENET, "client", "auth", "banned")  # the supplicant starts over, as a device re-joining would
    assert wait_for_eap(home, "banned", "SUCCESS", 15)
    home.dhcp("banned")
    assert home.fetch("banned").stdout == "200"


def test_a_flooding_device_does_not_stop_another_from_joining_and_browsing(home):
    home.add("victim")
    home.dhcp("victim")
    home.permit("victim")
    home.add("flooder")
    home.dhcp("flooder")
    home.permit("flooder")
    floods = [subprocess.Popen([HOMENET, "client", "exec", "flooder", "--", PY, BENCH / "flood.py", mode, "wlan0",
                                pps, "12"], stdout=subprocess.PIPE, text=True)
              for mode, pps in (("udp", "3000"), ("dhcp", "1000"))]
    time.sleep(2)
    started = time.monotonic()
    assert home.dhcp("victim", timeout=10).startswith("10.2.")
    dhcp_s = time.monotonic() - started
    assert home.fetch("victim").stdout == "200"
    for flood in floods:
        flood.communicate(timeout=30)
    assert dhcp_s < 5, f"DHCP took {dhcp_s:.1f}s under flood"
    counters = home.api("GET", "counters")[1]
    assert counters["pending_evicted"] > 0  # the forged MACs were capped, not all admitted as pending
    events = sh(HOMENET, "router", "exec", "--", "hwdb", "query",
                "select kind, mac from Events where kind = 'flow-budget'").stdout
    assert home.mac("flooder") in events  # and the household was told about the flooder
