"""Link-layer gating with real hostapd and wpa_supplicant, and a router one device cannot knock over."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from homenet import REPO, HomenetError, wait_until

BENCH = REPO / "bench"


def hostapd_denied(home):
    return subprocess.run(
        ["hostapd_cli", "-p", str(home.run_dir / "hostapd"), "-i", "br-lan", "deny_acl", "SHOW"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def eap_state(home, name):
    out = home.auth_status(name)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line).get("EAP state")


def test_whitelisted_device_authenticates_blacklisted_never_until_lifted(home):
    home.add("trusted", dot1x="alice:wonderland")
    home.decide("whitelist", "trusted")
    home.auth("trusted")
    wait_until("the trusted device's EAP success", lambda: eap_state(home, "trusted") == "SUCCESS", 15, 0.5)
    home.dhcp("trusted")
    assert home.lease_left("trusted") > 3500  # admitted without asking: the hour-long lease at once
    assert home.fetch("trusted") == "200"

    banned = home.add("banned", dot1x="mallory:letmein")
    home.decide("blacklist", "banned")
    status, listed = home.api("GET", "blacklist-status")
    assert banned in listed
    # What a real radio's hostapd needs to refuse it (the controller tells hostapd from its own thread).
    wait_until("the MAC on hostapd's deny list", lambda: banned in hostapd_denied(home), 5)
    home.auth("banned")
    time.sleep(8)  # a bounded observation window: nothing may happen in it
    assert eap_state(home, "banned") != "SUCCESS"
    try:
        home.dhcp("banned", timeout=6)
        raise AssertionError("a blacklisted device got a lease")
    except HomenetError:
        pass

    home.decide("whitelist", "banned")
    wait_until("the MAC off hostapd's deny list", lambda: banned not in hostapd_denied(home), 5)
    home.auth("banned")  # the supplicant starts over, as a device re-joining would
    wait_until("the lifted device's EAP success", lambda: eap_state(home, "banned") == "SUCCESS", 15, 0.5)
    home.dhcp("banned")
    assert home.fetch("banned") == "200"


def test_a_flooding_device_does_not_stop_another_from_joining_and_browsing(home):
    # The controller, which the victim's DHCP and DNS wait for, runs ahead of the pages and logs as the
    # router's starters run it (services.toml's `nice`), the others as everyone else.
    priority = {name: os.getpriority(os.PRIO_PROCESS, home.processes.pid(name)) for name in ("controller", "webui")}
    assert priority == {"controller": home.services["controller"].nice, "webui": 0} and priority["controller"] < 0
    for name in ("victim", "flooder"):
        home.add(name)
        home.dhcp(name)
        home.permit(name)
    quiet_s = timed(lambda: home.dhcp("victim", timeout=10))
    floods = [
        home.spawn(
            "flooder", sys.executable, BENCH / "flood.py", mode, "wlan0", pps, "12", stdout=subprocess.PIPE, text=True
        )
        for mode, pps in (("udp", "3000"), ("dhcp", "1000"))
    ]
    try:
        wait_until(
            "the flood to reach the controller", lambda: home.api("GET", "counters")[1]["pending_evicted"] > 0, 20
        )
        flooded_s = timed(lambda: home.dhcp("victim", timeout=10))
        page = home.exec(
            "victim",
            "curl",
            "-sS",
            "-m",
            "5",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "http://www.example.test/",
            check=False,
        )
        assert page.stdout == "200", f"the page under flood: {page.stdout} {page.stderr}"
    finally:
        for flood in floods:
            flood.communicate(timeout=30)
    assert flooded_s < 5, f"DHCP took {flooded_s:.1f}s under flood ({quiet_s:.2f}s quiet)"
    # The household was told about the flooder, and the victim was not mistaken for one.
    flooder, victim = home.mac("flooder"), home.mac("victim")
    told = wait_until(
        "the flow-budget event",
        lambda: [
            r["mac"]
            for r in home.hwdb("select kind, mac from Events where kind = 'flow-budget'")
            if r["mac"] == flooder
        ],
        15,
        0.5,
    )
    assert victim not in told


def timed(action) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started
