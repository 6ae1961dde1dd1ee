"""Pausing a device (issue 24's per-device policy) with real clients through real Open vSwitch:
a permitted device's download stops within a second of the pause, its DHCP still renews, and it
works again once resumed; another permitted device is not touched meanwhile."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from homenet import INTERNET_IP, wait_until


def joined(home, name):
    """A device joins and is permitted (renewing into its hour-long lease); returns its address."""
    home.add(name)
    home.dhcp(name)
    home.permit(name)
    return home.dhcp(name)


def test_a_paused_device_stops_at_once_keeps_its_lease_and_works_again_when_resumed(home):
    address = joined(home, "console")
    joined(home, "schoolbook")
    mac = home.mac("console")
    with tempfile.TemporaryDirectory() as tmp:
        received = Path(tmp) / "big.bin"
        # The server sends 1 MB at 100 kB/s: 10 s if left alone.
        download = home.spawn(
            "console",
            "curl",
            "-sS",
            "-m",
            "20",
            "-o",
            received,
            f"http://{INTERNET_IP}/paced/big.bin",
            stderr=subprocess.DEVNULL,
        )
        try:

            def size():
                return received.stat().st_size if received.exists() else 0

            # Positive control: the download is under way and growing.
            first = wait_until("the download to start", size, 5)
            wait_until("the download to make progress", lambda: size() > first + 50_000, 5)
            before, paused_at = size(), time.monotonic()
            status, body = home.api("POST", f"pause/{mac}")
            answered_at = time.monotonic()
            assert status == 200 and body["paused"] is True and body["state"] == "permitted", body
            # Watch the file for three seconds: when did the last byte land? (Bytes that landed
            # while the pause was being answered count as landing at the answer.)
            last = size()
            last_growth = answered_at if last > before else paused_at
            while time.monotonic() < paused_at + 3:
                time.sleep(0.05)
                if size() > last:
                    last, last_growth = size(), time.monotonic()
            stopped_after = last_growth - paused_at
            print(
                f"pause: answered in {(answered_at - paused_at) * 1000:.0f} ms; the download's last bytes "
                f"landed {stopped_after * 1000:.0f} ms after the pause was asked"
            )
            assert stopped_after < 1.0, f"bytes still arrived {stopped_after:.2f} s after the pause"
            assert size() < 900_000
        finally:
            download.kill()
            download.wait(timeout=10)
    # Paused: nothing new gets through for it, while the other permitted device works as before.
    assert home.fetch("console", f"http://{INTERNET_IP}/", timeout=3) == "000"
    assert home.fetch("schoolbook", f"http://{INTERNET_IP}/") == "200"
    # Its DHCP still reaches the router: it renews into the same /30, for the hour.
    assert home.dhcp("console") == address
    assert home.lease_left("console") > 3500
    status, body = home.api("POST", f"resume/{mac}")
    assert status == 200 and body["paused"] is False, body
    wait_until("a fetch after the resume", lambda: home.fetch("console", f"http://{INTERNET_IP}/", 2) == "200", 5)
    assert home.fetch("schoolbook", f"http://{INTERNET_IP}/") == "200"
