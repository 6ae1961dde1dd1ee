"""A second box of the same image becomes an access point of the household's router at first boot, with
nothing typed but the router's pairing code (`make image-test`; docs/whole-home-wifi.md).

Two VMs of the image: the router (one simulated radio, mac80211_hwsim, so it has a network to share; the UEFI
story's first boot, resumed, when that story ran first in this process) and the new box (two radios: the one
it serves, and a station). The new box boots as any box does, a router with no
owner; the owner makes a code on the router's web UI (`POST /api/satellite-codes`, as the Household page
does) and gives it to the new box's first-run page (`POST /api/setup/access-point`, the page's own call).
The box writes its role and restarts; its cable is plugged into the router's LAN side meanwhile (a veth
from the new box's LAN wire to the router's). Then: no switch, controller, hwdb, web UI, hostapd of a
router, NAT or prefix client runs on the new box; its bridge br0 keeps its LAN NIC's MAC and has an
address from the router; its agent paired with the code (spent, deleted) and its hostapd serves the
router's network name; the router lists it as a satellite, permitted, on its LAN access port; a station
joining the new box's radio with the guest passphrase is let through by the router once permitted. A
reboot keeps it an access point, paired without a code. The router runs no agent of its own.

Layout: netns imgsat-vm (the router's qemu, taps, bridges; imgsat-wan the emulated ISP, as every story's)
and imgsat-ap (the new box's qemu and taps; its LAN tap's bridge has the cable to imgsat-vm's brlan, its
WAN tap is on no wire).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_boot import BOOTED_WITH_A_RADIO, Owner, ask_for_radios, device_state, json_in, main_pid
from test_radio_boot import Station, make_test_drive, wpa2

from homenet.routervm import BOOT_STARTED, SAVED, Network, RouterVm, VmError, sh
from homenet.wait import wait_until

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
IMAGE = BUILD / "homework-router-x86_64.img"
STATE = BUILD / "image-test-satellite"
NET = "imgsat"
AP_NS = f"{NET}-ap"  # its name under the router's network's: Network.down() removes it too
AP_MACS = ("52:54:00:00:aa:02", "52:54:00:00:bb:02")  # the new box's WAN and LAN NICs
AP_NAME = "Landing"
DRIVE = "/run/radio-test"  # the station's tools (test_radio_boot's test drive), in the new box
STATION_RADIO = 1  # the new box's second radio (its first, wlan0, it serves)
ROUTER_SERVICES = ("controller", "hwdb", "webui", "hostapd", "wan-pd")
TIMINGS: dict[str, float] = {}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the boot test needs root (namespaces, taps)")


def disk_with_radios(name: str, radios: int) -> Path:
    if not IMAGE.exists():
        pytest.fail("no image: run `make image` first")
    (STATE / name).mkdir(parents=True, exist_ok=True)
    disk = STATE / name / "disk.img"
    subprocess.run(["cp", "--sparse=always", str(IMAGE), str(disk)], check=True)
    ask_for_radios(disk, radios, STATE / name)
    return disk


@pytest.fixture(scope="module")
def net():
    network = Network(STATE / "net", NET)
    network.up({})
    # The new box's wires: its LAN tap on a bridge with the cable's far end, the near end on the router's LAN
    # wire (down: unplugged until the box is an access point); its WAN tap on nothing.
    sh("ip", "netns", "add", AP_NS)
    sh("ip", "link", "set", "lo", "up", ns=AP_NS)
    for tap in ("tapwan", "taplan"):
        sh("ip", "tuntap", "add", "dev", tap, "mode", "tap", ns=AP_NS)
    sh("ip", "link", "add", "brlan", "type", "bridge", "stp_state", "0", ns=AP_NS)
    sh("ip", "link", "add", "cable", "type", "veth", "peer", "name", "cable", "netns", AP_NS, ns=network.vm_ns)
    for link in ("taplan", "cable"):
        sh("ip", "link", "set", link, "master", "brlan", ns=AP_NS)
    for link in ("tapwan", "taplan", "cable", "brlan"):
        sh("ip", "link", "set", link, "up", ns=AP_NS)
    sh("ip", "link", "set", "cable", "master", "brlan", ns=network.vm_ns)
    yield network
    network.down()


def plug_the_cable(net: Network) -> None:
    sh("ip", "link", "set", "cable", "up", ns=net.vm_ns)


@pytest.fixture(scope="module")
def boxes(net):
    """The router: the UEFI story's first boot, resumed (it boots with a radio for this story: the router's
    boot is not this story's subject), or, run alone, one of its own booted with a radio. The new box,
    powered on at the same time (a boot takes minutes under software emulation)."""
    for name in ("router", "ap"):
        shutil.rmtree(STATE / name / "vm", ignore_errors=True)
        (STATE / name / "vm").mkdir(parents=True)
    saved = SAVED.get(BOOTED_WITH_A_RADIO)
    if saved is not None:
        router = saved.resume(STATE / "router/vm", net.vm_ns)
    else:
        router = RouterVm(disk_with_radios("router", 1), STATE / "router/vm", {}, net.vm_ns)
    drive = make_test_drive(STATE / "radio-test.img")  # the station's tools, on the new box
    ap = RouterVm(disk_with_radios("ap", 2), STATE / "ap/vm", {"radio-test": drive}, AP_NS)
    ap.nic_macs = AP_MACS
    started = time.monotonic()
    router.start()
    ap.start()
    yield router, ap
    for name, vm in (("router", router), ("ap", ap)):
        try:  # each box's side of what happened, kept beside its console
            journal = vm.run("journalctl -b --no-pager -o short-monotonic -u 'homework-*'", timeout=120, check=False)
            (STATE / name / "journal.log").write_text(journal)
        except VmError:
            pass
        vm.kill()
    TIMINGS["story_s"] = round(time.monotonic() - started, 1)
    (STATE / "timings.json").write_text(json.dumps(TIMINGS, indent=1) + "\n")


@pytest.fixture(scope="module")
def router(boxes) -> RouterVm:
    return boxes[0]


@pytest.fixture(scope="module")
def ap(boxes) -> RouterVm:
    return boxes[1]


@pytest.fixture(scope="module")
def booted(router, ap) -> None:
    started = time.monotonic()
    if router.resumed_from:
        router.resumed()
    else:
        router.wait_for_shell(0)
    ap.wait_for_shell(0)
    TIMINGS["router_resumed"] = bool(router.resumed_from)
    TIMINGS["first_boots_s"] = round(time.monotonic() - started, 1)  # the new box's, and the router's unless resumed


@pytest.fixture(scope="module")
def owner(router, booted) -> Owner:
    return Owner.set_up(router)


def is_active(vm: RouterVm, unit: str) -> str:
    return vm.run(f"systemctl is-active {unit}", check=False).strip().splitlines()[-1]


def agent_hostapd(ap: RouterVm, *words: str) -> str:
    """hostapd_cli on the agent's hostapd, in the agent's mount namespace (hostapd answers at the client's
    socket in the private /tmp it shares with the agent)."""
    pid = main_pid(ap, "satellite")
    if pid == 0:
        raise VmError("the satellite's agent is not running")
    quoted = " ".join(map(shlex.quote, words))
    return ap.run(f"nsenter -t {pid} -m hostapd_cli -p /run/homework/satellite/hostapd -i wlan0 {quoted}")


def serving(ap: RouterVm) -> str | None:
    """The network name the new box's radio serves, once its hostapd is up."""
    try:
        status = agent_hostapd(ap, "status")
    except VmError:
        return None
    fields = dict(line.split("=", 1) for line in status.splitlines() if "=" in line)
    return fields.get("ssid[0]") if fields.get("state") == "ENABLED" else None


def agent_log(ap: RouterVm) -> str:
    return ap.run("journalctl -b --no-pager -n 40 -u homework-satellite -u homework-network", check=False)


# ---- the story


def test_a_new_box_offers_to_be_an_access_point_on_its_first_run_page_and_the_router_makes_a_code(
    router, ap, owner, net
):
    page = Owner(ap)  # the first-run page's own calls, on the new box
    session = page.session()
    assert session["setup_required"] is True and session["can_be_access_point"] is True
    # The router: nothing of the satellite role (no role file, so none of its conditions hold).
    assert is_active(router, "homework-satellite") == "inactive"
    assert all(is_active(router, f"homework-{s}") == "active" for s in ("controller", "webui", "hostapd"))
    status, doc = owner.call("POST", "/api/satellite-codes")
    assert status == 201, doc
    code = doc["code"]
    since = ap.mark()
    box_code = ap.run("cat /var/lib/homework/webui/setup-code").strip()  # this box's own, on its console
    status, doc = page.call("POST", "/api/setup/access-point", {"code": code, "name": AP_NAME, "setup_code": box_code})
    assert status == 202 and doc["restarting"] is True, doc
    asked = time.monotonic()
    # It restarts by itself: the owner plugs it into the router meanwhile.
    boot = ap.expect(BOOT_STARTED, ap.paced(300), since).start() + since
    plug_the_cable(net)
    ap.wait_for_shell(boot)
    TIMINGS["role_chosen_to_shell_s"] = round(time.monotonic() - asked, 1)
    ssid = next(
        line.split("=", 1)[1]
        for line in router.run("cat /var/lib/homework/config/wifi.conf").splitlines()
        if line.startswith("ssid=")
    )
    wait_until("the new box to serve the router's network", lambda: serving(ap) == ssid, ap.paced(300), 3,
               hint=lambda: agent_log(ap))  # fmt: skip
    TIMINGS["role_chosen_to_serving_s"] = round(time.monotonic() - asked, 1)
    print(f"\nthe new box, role chosen to serving the router's network: {TIMINGS['role_chosen_to_serving_s']} s")


def test_the_role_and_its_session_are_root_only_on_the_data_partition_and_the_code_is_spent(ap):
    listing = ap.run("stat -c '%a %U %n' /var/lib/homework/config/satellite /var/lib/homework/satellite"
                     " /var/lib/homework/satellite/session.json")  # fmt: skip
    assert listing.split("\n")[:3] == [
        "600 root /var/lib/homework/config/satellite",
        "700 root /var/lib/homework/satellite",
        "600 root /var/lib/homework/satellite/session.json",
    ], listing
    assert f"name={AP_NAME}" in ap.run("cat /var/lib/homework/config/satellite")
    assert ap.run("test -e /var/lib/homework/satellite/code && echo left || echo spent").strip() == "spent"
    assert ap.run("homework-role").strip() == f"satellite ({AP_NAME})"


def test_the_access_point_runs_none_of_the_routers_services(ap):
    for service in ROUTER_SERVICES:
        assert is_active(ap, f"homework-{service}") == "inactive", service
    for unit in ("openvswitch-switch", "ovs-vswitchd", "ovsdb-server", "ovs-record-hostname", "nftables",
                 "homework-radio-refresh.path"):  # fmt: skip
        assert is_active(ap, unit) == "inactive", unit
    assert "homework" not in ap.run("nft list tables", check=False)  # no NAT, no firewall of a router's
    assert ap.run("ip -4 addr show", check=False).count("10.2.0.1/") == 0  # not the router's address
    # Its health check (what blesses an update on trial) is the access point's: its bridge and agent.
    assert "the access point works" in ap.run("homework-health --timeout 120", timeout=180)
    assert is_active(ap, "homework-satellite") == "active"


def test_its_bridge_keeps_its_cables_mac_with_the_radio_in_it_and_has_an_address_from_the_router(ap):
    [bridge] = json.loads(ap.run("ip -j link show dev br0"))
    assert bridge["address"] == AP_MACS[1]  # its LAN NIC's, though the radio joined the bridge
    ports = {link["ifname"] for link in json.loads(ap.run("ip -j link show master br0"))}
    assert "wlan0" in ports and len(ports) == 3, ports  # both wired ports and the radio
    [addresses] = json.loads(ap.run("ip -j -4 addr show dev br0"))
    assert addresses["addr_info"][0]["local"].startswith("10.2."), addresses


def test_the_router_lists_it_as_a_satellite_permitted_on_its_lan_access_port(router, owner):
    status, doc = owner.call("GET", "/api/satellites")
    assert status == 200, doc
    [satellite] = doc["satellites"]
    lan_port = int(router.run("ovs-vsctl get interface lan ofport").strip())
    assert (satellite["name"], satellite["mac"]) == (AP_NAME, AP_MACS[1])
    assert satellite["state"] == "permitted" and satellite["access_port"] == lan_port, satellite
    assert device_state(router, AP_MACS[1]) == "permitted"
    # ... and runs no agent, bridge or role of its own.
    assert router.run("test -e /var/lib/homework/config/satellite && echo yes || echo no").strip() == "no"
    assert router.run("ip link show br0", check=False).find("does not exist") >= 0


def test_a_station_on_the_access_points_radio_is_held_back_until_permitted_then_reaches_the_internet(router, ap, owner):
    """The station is in the new box's own namespace, on its second radio (hwsim radios do not cross VMs)."""
    passphrase = next(
        line.split("=", 1)[1]
        for line in router.run("cat /var/lib/homework/config/wifi.conf").splitlines()
        if line.startswith("passphrase=")
    )
    ap.run(f"mkdir -p {DRIVE} && mount -o ro /dev/disk/by-id/virtio-radio-test {DRIVE}")
    station = Station(ap, STATION_RADIO)
    station.join(wpa2(passphrase))
    station.wait_connected(120)
    assert "[AUTHORIZED]" in agent_hostapd(ap, "sta", station.mac)
    station.dhcp(60)
    assert device_state(router, station.mac) == "pending"  # held back at the router's switch, as on its own radio
    assert station.fetch() == "000"
    status, doc = owner.call("POST", f"/api/devices/{station.mac}/permit")
    assert status == 200, doc
    station.dhcp(60)
    wait_until("a page through the router's NAT", lambda: station.fetch() == "200", router.paced(30), 1)
    lan_port = int(router.run("ovs-vsctl get interface lan ofport").strip())
    [known] = [d for d in json_in(router.run("curl -s http://127.0.0.1:8081/ws.v1/status")) if d["mac"] == station.mac]
    assert known["access_port"] == lan_port, known  # the access point's port: the router's switch gates it


def test_a_reboot_keeps_it_an_access_point_paired_without_a_code(ap, router):
    since = ap.reboot()
    started = time.monotonic()
    ap.wait_for_shell(since)
    wait_until("the access point to serve again", lambda: serving(ap) is not None, ap.paced(300), 3,
               hint=lambda: agent_log(ap))  # fmt: skip
    TIMINGS["reboot_to_serving_s"] = round(time.monotonic() - started, 1)
    # No new pairing (its code is spent): the session from the first one.
    assert "paired with the router at" not in ap.run("journalctl -b --no-pager -o cat -u homework-satellite")
    assert is_active(ap, "homework-controller") == "inactive"
    assert device_state(router, AP_MACS[1]) == "permitted"
