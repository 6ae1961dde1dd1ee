"""The router's addresses on the LAN interface against this machine's real kernel (netlink, pyroute2):
in a private network namespace (`qt-*`) with a veth standing for br-lan, the thread adds
the ::1s of two /64s, then removes a renumbering's old one; the kernel's route for that /64 goes with
it while the other stays, and removing an address that is not there (after a restart) costs nothing.
It also has the kernel forget the MACs it had for a device's addresses (a /30 freed for the next
newcomer), and only those."""

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and ip (network namespaces)"
)

OLD, NEW = "2001:db8:100:1::/64", "2001:db8:200:1::/64"

# Run inside the namespace: the thread is the one the controller runs, fed as its effect sink feeds it.
SCRIPT = f"""
import threading, time, subprocess, json
from homework_controller.effects import AddIpv6Gateway, RemoveIpv6Gateway
from homework_controller.edge.lan.lan_addresses import LanAddresses

def state():
    addrs = json.loads(subprocess.run(["ip", "-j", "-6", "addr", "show", "dev", "lan0"], capture_output=True).stdout)
    routes = json.loads(subprocess.run(["ip", "-j", "-6", "route", "show", "dev", "lan0"], capture_output=True).stdout)
    return (sorted(a["local"] for a in addrs[0]["addr_info"] if a["scope"] == "global"),
            sorted(r["dst"] for r in routes if r["dst"].startswith("2001:")))

def settle():
    for _ in range(100):
        if lan.jobs.empty():
            time.sleep(0.2)
            return
        time.sleep(0.05)

lan = LanAddresses("lan0", ipv6=True)
threading.Thread(target=lan.run_forever, daemon=True).start()
lan.change(AddIpv6Gateway("{OLD}"))
lan.change(AddIpv6Gateway("{NEW}"))
settle()
print(json.dumps(state()))
lan.change(RemoveIpv6Gateway("{OLD}"))
lan.change(RemoveIpv6Gateway("{OLD}"))  # not there any more: nothing breaks
lan.change(AddIpv6Gateway("2001:db8:300:1::/64"))  # the thread goes on
settle()
print(json.dumps(state()))
"""


@pytest.fixture
def namespace():
    ns = f"qt-lan{os.getpid()}"
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # left by a killed run
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        # A veth pair (this sandbox's kernel has no dummy links), both ends up: lan0 has a carrier.
        subprocess.run(["ip", "-n", ns, "link", "add", "lan0", "type", "veth", "peer", "name", "lan0-far"], check=True)
        for link in ("lan0", "lan0-far"):
            subprocess.run(["ip", "-n", ns, "link", "set", link, "up"], check=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def run_in(namespace: str, script: str) -> str:
    """What a script run inside the namespace (as the controller's thread runs there) prints."""
    return subprocess.run(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def test_a_renumberings_old_gateway_and_its_route_leave_the_lan_interface_the_current_one_stays(namespace):
    before, after = (json.loads(line) for line in run_in(namespace, SCRIPT).splitlines())
    assert before == [["2001:db8:100:1::1", "2001:db8:200:1::1"], [OLD, NEW]]
    assert after == [["2001:db8:200:1::1", "2001:db8:300:1::1"], [NEW, "2001:db8:300:1::/64"]]


DEVICE, OTHER, NEXT = "02:00:00:00:00:aa", "02:00:00:00:00:bb", "02:00:00:00:00:cc"
FORGET = f"""
import threading, time, subprocess, json
from homework_controller.effects import ForgetNeighbours
from homework_controller.edge.lan.lan_addresses import LanAddresses

lan = LanAddresses("lan0", ipv6=False)
threading.Thread(target=lan.run_forever, daemon=True).start()
lan.change(ForgetNeighbours("10.2.0.6", {DEVICE!r}, ("fd12:3456:789a:1::/64",)))
lan.change(ForgetNeighbours("10.2.0.22", {DEVICE!r}))  # never asked for: nothing breaks
lan.change(ForgetNeighbours("fd12:3456:789a:2::cc", {OTHER!r}))  # one address, beyond its device's bound
lan.change(ForgetNeighbours("10.2.0.14", {DEVICE!r}))  # learnt for its next holder already: it stays
for _ in range(100):
    if lan.jobs.empty():
        break
    time.sleep(0.05)
time.sleep(0.3)
entries = json.loads(subprocess.run(["ip", "-j", "neigh", "show", "dev", "lan0"], capture_output=True).stdout)
print(json.dumps(sorted(e["dst"] for e in entries)))
"""

KNOWN = {  # what the router's stack had learnt: the device's addresses, and other devices' ones
    "10.2.0.6": DEVICE,
    "fd12:3456:789a:1::aa": DEVICE,
    "fd12:3456:789a:1::1234": DEVICE,  # a privacy address in its /64
    "10.2.0.10": OTHER,
    "fd12:3456:789a:2::bb": OTHER,
    "fd12:3456:789a:2::cc": OTHER,  # its least recently asked, beyond its bound (MAX_NEIGHBOURS_PER_DEVICE)
    "10.2.0.14": NEXT,  # the device's old /30, the next newcomer's by the time the stack forgets
}


def test_the_stack_forgets_the_macs_of_a_devices_addresses_and_no_others(namespace):
    """And one IPv6 address alone, as when a device has more than its bound; an address whose entry holds
    another MAC by then (its next holder's) keeps it."""
    for address, mac in KNOWN.items():
        subprocess.run(
            ["ip", "-n", namespace, "neigh", "add", address, "lladdr", mac, "dev", "lan0", "nud", "reachable"],
            check=True,
        )
    assert json.loads(run_in(namespace, FORGET)) == ["10.2.0.10", "10.2.0.14", "fd12:3456:789a:2::bb"]


ROUTES = """
import threading, time, subprocess, json
from homework_controller.effects import AddIpv6Route, RemoveIpv6Route
from homework_controller.edge.lan.lan_addresses import LanAddresses

def routes():
    out = subprocess.run(["ip", "-j", "-6", "route", "show", "dev", "lan0"], capture_output=True).stdout
    return sorted(r["dst"] for r in json.loads(out) if r["dst"].startswith("fd"))

lan = LanAddresses("lan0", ipv6=True)
threading.Thread(target=lan.run_forever, daemon=True).start()
for job in (AddIpv6Route("fd11:2233:4455:1::/64"), AddIpv6Route("fd77::/48"), AddIpv6Route("fd77::/48")):
    lan.change(job)
for _ in range(100):
    if lan.jobs.empty() and len(routes()) == 2:
        break
    time.sleep(0.05)
print(json.dumps(routes()))
lan.change(RemoveIpv6Route("fd77::/48"))
lan.change(RemoveIpv6Route("fd77::/48"))  # gone already: nothing breaks
for _ in range(100):
    if lan.jobs.empty() and len(routes()) == 1:
        break
    time.sleep(0.05)
print(json.dumps(routes()))
"""

AGAIN = """
import threading, time, subprocess, json
from homework_controller.edge.lan.lan_addresses import LanAddresses

lan = LanAddresses("lan0", ipv6=True)
threading.Thread(target=lan.run_forever, daemon=True).start()
time.sleep(1)
out = subprocess.run(["ip", "-j", "-6", "route", "show", "dev", "lan0"], capture_output=True).stdout
print(json.dumps(sorted(r["dst"] for r in json.loads(out) if r["dst"].startswith("fd"))))
"""


def test_a_devices_offered_route_is_routed_on_the_lan_interface_until_it_goes(namespace):
    added, after = (json.loads(line) for line in run_in(namespace, ROUTES).splitlines())
    assert added == ["fd11:2233:4455:1::/64", "fd77::/48"]
    assert after == ["fd11:2233:4455:1::/64"]
    # The controller starts again, knowing of no route: the one the earlier run left goes; a route the
    # household's own configuration put there (another protocol) stays.
    subprocess.run(["ip", "-n", namespace, "-6", "route", "add", "fd99::/64", "dev", "lan0"], check=True)
    assert json.loads(run_in(namespace, AGAIN)) == ["fd99::/64"]
