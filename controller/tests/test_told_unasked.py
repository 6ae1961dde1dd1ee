"""What a station that (re)associated is told unasked (`Joining._gateway_told`: where its gateway and its IPv6
router are), taken by a real Linux stack: in a private network namespace (`qt-*`) a veth end stands for the
station, with the device's MAC and leased address, whose neighbour entries for its gateway and for the router's
link-local address are incomplete, as after its link went down at a roam; the router core's frames, sent into
the other end, complete them. An answer to something it never asked creates nothing."""

import json
import os
import shutil
import socket
import subprocess
import time

import pytest
from support import PHONE, WLAN, join

from homework_controller.effects import SendFrame
from homework_controller.wire import nd

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and ip (network namespaces)"
)


@pytest.fixture
def station():
    """A namespace holding the station's end of a veth (`sta0`); the router's end (`air`) is this one's."""
    ns, near = f"qt-sta{os.getpid()}", f"qt-air{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # left by a killed run
    subprocess.run(["ip", "link", "del", near], capture_output=True)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "link", "add", near, "type", "veth", "peer", "name", "sta0", "netns", ns], check=True)
        subprocess.run(["ip", "link", "set", near, "up"], check=True)
        yield ns, near
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", near], capture_output=True)


def neighbours(ns: str) -> dict[str, tuple[str | None, list[str]]]:
    found = json.loads(
        subprocess.run(["ip", "-n", ns, "-j", "neigh", "show", "dev", "sta0"], capture_output=True).stdout
    )
    return {n["dst"]: (n.get("lladdr"), n.get("state", [])) for n in found}


def test_a_real_stack_takes_the_unasked_answers_for_its_gateway_and_router_and_nothing_else(router, switch, station):
    ns, near = station
    ip = join(router, switch, PHONE)
    device = router.devices[PHONE]
    gateway, router_mac = device.subnet.gateway, router.switch.ports()[1]

    def in_ns(*words: str) -> None:
        subprocess.run(["ip", "-n", ns, *words], check=True)

    in_ns("link", "set", "sta0", "address", PHONE)
    in_ns("link", "set", "sta0", "up")
    in_ns("addr", "add", f"{ip}/30", "dev", "sta0")
    time.sleep(2)  # its link-local address past duplicate-address detection
    # It asks for both (nobody answers): incomplete, as a roaming station's are after its link came back.
    for target in (gateway, f"{nd.ROUTER_LINK_LOCAL}%sta0"):
        subprocess.Popen(["ip", "netns", "exec", ns, "ping", "-c", "1", "-W", "2", target], stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    before = neighbours(ns)
    assert before[gateway] == (None, ["INCOMPLETE"]) and before[nd.ROUTER_LINK_LOCAL] == (None, ["INCOMPLETE"])

    told = [e.data for e in router.joining.station_joined(PHONE, "", WLAN) if isinstance(e, SendFrame)]
    assert len(told) == 2  # its gateway (ARP) and its IPv6 router (a neighbour advert)
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as air:
        air.bind((near, 0))
        for frame in told:
            air.send(frame)
    time.sleep(0.3)
    after = neighbours(ns)
    assert after[gateway][0] == router_mac and "REACHABLE" in after[gateway][1]
    assert after[nd.ROUTER_LINK_LOCAL][0] == router_mac and "INCOMPLETE" not in after[nd.ROUTER_LINK_LOCAL][1]
    # The same answers to a stack that asked nothing: no entry made (Linux takes no unasked ARP for a new one).
    in_ns("neigh", "flush", "dev", "sta0")
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as air:
        air.bind((near, 0))
        for frame in told:
            air.send(frame)
    time.sleep(0.3)
    assert gateway not in neighbours(ns) and nd.ROUTER_LINK_LOCAL not in neighbours(ns)
