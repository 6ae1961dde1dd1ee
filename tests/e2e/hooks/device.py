"""E2E_DEVICE_CMD for the web UI's browser flow in the emulated home: what a device does, or what the
household decides of it, as the browser test asks. `device.py ACTION`, with the test's values in the
environment; prints JSON on its last line.

  join     a new device (E2E_NAME; it calls itself E2E_HOSTNAME, default its name; E2E_VENDOR_CLASS: its
           client sends that vendor class, as Android's does) runs dhclient. With
           E2E_STATE (permitted, denied, blacklisted) the household decides over ws.v1, and a permitted
           device renews into its hour-long lease; E2E_LABEL names it. Prints {"mac": ...}.
  check    E2E_MAC is connected (its renewal gets the hour-long lease, it fetches a page by name) or
           refused (the router has it denied or blacklisted, and it fetches nothing): E2E_EXPECT.
  leave    E2E_MAC's dhclient releases its lease (DHCPRELEASE): the device is away.
  copy     another device takes E2E_MAC's MAC and asks for an address, calling itself E2E_HOSTNAME.
  use      E2E_MAC downloads E2E_BYTES from the internet; returns once the router has counted them.
"""

import json
import os
import re
import sys
import urllib.parse

from homenet import INTERNET_IP, Home, HomenetError, WaitTimeout, wait_until
from homenet.home import mac_for

DECIDED = {"permitted": "permit", "denied": "deny", "blacklisted": "blacklist"}
CHECK_WAIT_S = 40
COUNT_WAIT_S = 30  # the controller counts use every 5 s (--stats-interval); a loaded machine is slower

home = Home()


def new_name(wanted: str) -> str:
    """A client name homenet takes (1-11 of a-z, 0-9, '-'), not yet in the home."""
    base = re.sub(r"[^a-z0-9-]+", "-", wanted.lower()).strip("-")[:11] or "device"
    taken, name, n = set(home.clients()), base, 1
    while name in taken:
        n += 1
        name = f"{base[: 10 - len(str(n))].rstrip('-')}-{n}"
    return name


def name_of(mac: str) -> str:
    """The device with this MAC: the one whose name gave it (`copy` adds another under another name)."""
    try:
        return next(n for n in home.clients() if mac_for(n) == mac)
    except StopIteration:
        raise HomenetError(f"no device has {mac}") from None


def ws(verb: str, path: str, **query) -> dict:
    status, body = home.api(verb, path + ("?" + urllib.parse.urlencode(query) if query else ""))
    if status != 200:
        raise HomenetError(f"{verb} {path}: {status} {body}")
    return body


def join() -> dict:
    name = new_name(os.environ["E2E_NAME"])
    host_name = os.environ.get("E2E_HOSTNAME") or os.environ["E2E_NAME"]
    mac = home.add(name)
    home.dhcp(name, host_name=host_name, vendor_class=os.environ.get("E2E_VENDOR_CLASS", ""))
    state = os.environ.get("E2E_STATE") or "pending"
    if state != "pending":
        ws("POST", f"{DECIDED[state]}/{mac}")
    if state == "permitted":
        home.dhcp(name, host_name=host_name)
    if os.environ.get("E2E_LABEL"):
        ws("POST", f"name/{mac}", name=os.environ["E2E_LABEL"])
    return {"mac": mac}


def check() -> dict:
    mac, expect = os.environ["E2E_MAC"], os.environ["E2E_EXPECT"]
    name = name_of(mac)

    def connected() -> bool:
        try:
            home.dhcp(name, timeout=5)
        except HomenetError:
            return False
        # dhclient-script writes resolv.conf just after the renewal: the fetch by name may need a retry.
        return home.lease_left(name) > 3500 and home.fetch(name, timeout=3) == "200"

    def refused() -> bool:
        # Refused, not still waiting: the router says so, and nothing gets through.
        decided = ws("GET", f"status/{mac}")["state"] in ("denied", "blacklisted")
        return decided and home.fetch(name, f"http://{INTERNET_IP}/", timeout=3) != "200"

    wait_until(f"{name} ({mac}) to be {expect}", connected if expect == "connected" else refused, CHECK_WAIT_S, 1)
    return {"mac": mac, "state": ws("GET", f"status/{mac}")["state"]}


def leave() -> dict:
    home.release(name_of(os.environ["E2E_MAC"]))
    return ws("GET", f"status/{os.environ['E2E_MAC']}")


def copy() -> dict:
    mac, host_name = os.environ["E2E_MAC"], os.environ["E2E_HOSTNAME"]
    name = new_name(host_name)
    home.add(name, mac=mac)
    home.dhcp(name, host_name=host_name)
    return ws("GET", f"status/{mac}")


def counted(mac: str) -> int:
    """What the router has counted against the device's allowance today (its own, or the one it shares)."""
    status = ws("GET", f"status/{mac}")
    held = status.get("shared_allowance") or status.get("allowance") or {}
    return int(held.get("used", 0))


def use() -> dict:
    mac, nbytes = os.environ["E2E_MAC"], int(os.environ["E2E_BYTES"])
    before = counted(mac)
    home.exec(name_of(mac), "curl", "-sS", "-m", "60", "-o", "/dev/null", f"http://{INTERNET_IP}/bulk?bytes={nbytes}")
    wait_until(
        f"the router to count {nbytes} bytes of {mac}", lambda: counted(mac) >= before + nbytes, COUNT_WAIT_S, 0.5
    )
    return ws("GET", f"status/{mac}")


ACTIONS = {"join": join, "check": check, "leave": leave, "copy": copy, "use": use}

if __name__ == "__main__":
    try:
        print(json.dumps(ACTIONS[sys.argv[1]]()))
    except (WaitTimeout, HomenetError) as exc:
        sys.exit(str(exc))
