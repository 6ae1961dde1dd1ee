"""E2E_CHECK_CMD: wait until the device with E2E_MAC is connected (its forced renewal gets the
hour-long lease and it fetches a page by name) or refused (it fetches nothing); 40 s at most."""

import os
import sys

from homenet import INTERNET_IP, Home, HomenetError, WaitTimeout, wait_until

home = Home()
mac, expect = os.environ["E2E_MAC"], os.environ["E2E_EXPECT"]
name = next(n for n in home.clients() if home.mac(n) == mac)


def connected() -> bool:
    try:
        home.dhcp(name, timeout=5)
    except HomenetError:
        return False
    # dhclient-script writes resolv.conf just after the renewal: the fetch by name may need a retry.
    return home.lease_left(name) > 3500 and home.fetch(name, timeout=3) == "200"


def refused() -> bool:
    return home.fetch(name, f"http://{INTERNET_IP}/", timeout=3) != "200"


try:
    wait_until(f"{name} ({mac}) to be {expect}", connected if expect == "connected" else refused, 40, 1)
except WaitTimeout as exc:
    sys.exit(str(exc))
