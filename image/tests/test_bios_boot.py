"""The router image boots with legacy BIOS too (qemu's SeaBIOS, then GRUB from the BIOS boot
partition), with the same A/B boot counting as under UEFI: as root, after `make image`.

One router, in order: SeaBIOS -> GRUB boots slot A, every service comes up and a LAN device gets
a lease -> an update whose controller cannot start (one try) goes to slot B; GRUB boots it once,
it fails its health check, and GRUB boots A again by itself -> a good update goes to slot B, GRUB
boots it, and once the router works homework-grub-bless keeps it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from test_boot import (
    BUILD,
    IMAGE,
    LAPTOP_MAC,
    _version_of_image,
    ask_for_radios,
    bundles,  # noqa: F401 - the fixture: the broken and the good update
    json_in,
    record_boot_profile,
    wait_for_services,
    wait_for_slot,
)
from test_radio_boot import BOOTED_WITH_RADIOS, RADIOS, radio_test_drive

from homenet.routervm import SAVED, Network, RouterVm, overlay
from homenet.wait import wait_until

STATE = BUILD / "image-test-bios"
TIMINGS: dict[str, float] = {}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the boot test needs root (namespaces, taps)")


@pytest.fixture(scope="module")
def net():
    network = Network(STATE / "net", "imgbios")
    network.up({"laptop": LAPTOP_MAC})
    yield network
    for client in network.clients.values():
        client.stop_dhclient()
    network.down()


@pytest.fixture(scope="module")
def router(net, bundles):  # noqa: F811 - the fixture imported above
    """Booted with the radio story's radios and its stations' drive, so that story resumes this first
    boot (test_radio_boot.router) rather than boot once more; slot A's entry alone asks for radios, so
    the updates boot without. A qcow2 overlay on the image's copy holds the saved state."""
    disk = STATE / "disk.img"
    for stale in (disk, STATE / "vm/console.log"):
        stale.unlink(missing_ok=True)
    (STATE / "vm").mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "--sparse=always", str(IMAGE), str(disk)], check=True)
    ask_for_radios(disk, RADIOS, STATE)
    vm = RouterVm(
        overlay(disk),
        STATE / "vm",
        {"bundle-broken": bundles["broken"], "bundle-good": bundles["good"], "radio-test": radio_test_drive()},
        net.vm_ns,
        firmware="bios",
    )
    yield vm
    vm.kill()
    (STATE / "timings.json").write_text(json.dumps(TIMINGS, indent=1) + "\n")


def entries(vm: RouterVm) -> list[dict]:
    return json_in(vm.run("homework-update --status"))["entries"]


def test_bios_boots_slot_a_with_grub_and_every_service_comes_up(router, net):
    powered_on = router.start()
    net.clients["laptop"].dhcp(timeout=router.boot_limit(), alive=lambda: router.check_alive(0))
    TIMINGS["boot_to_dhcp_ready_s"] = round(time.monotonic() - powered_on, 1)
    print(f"\nBIOS: boot to DHCP ready: {TIMINGS['boot_to_dhcp_ready_s']} s ({'KVM' if router.kvm else 'software'})")
    router.wait_for_shell(0)
    units = [
        "openvswitch-switch",
        "homework-network",
        "homework-hwdb",
        "homework-hostapd",
        "homework-controller",
        "homework-webui",
        "nftables",
        "systemd-networkd",
        "homework-grub-count",
    ]
    wait_until(
        "every service active",
        lambda: router.run(f"systemctl is-active {' '.join(units)}", check=False).split() == ["active"] * len(units),
        router.paced(300),
        3,
    )
    record_boot_profile(router, units, TIMINGS, STATE)
    assert router.slot_and_version()[0] == "a"
    # GRUB chose the entry; no UEFI firmware was involved.
    assert "Booting `Homework router" in router.since(0)
    assert router.run("test -d /sys/firmware/efi; echo $?").strip() == "1"
    assert router.run("test -d /sys/firmware; echo $?").strip() == "0"
    # A blessed entry is not on trial: nothing waits to bless it. GRUB wants the count at every boot (a UEFI
    # boot does not run it: test_boot.py).
    cmdline = router.run("cat /proc/cmdline")
    assert "homework-grub-bless" not in cmdline and "systemd.wants=homework-grub-count.service" in cmdline
    wait_until(
        "the WAN's lease", lambda: "198.51.100." in router.run("ip -4 -o addr show dev wan"), router.paced(120), 2
    )
    # The radio story resumes the router from here: booted with its radios, nothing else done yet.
    started = time.monotonic()
    SAVED[BOOTED_WITH_RADIOS] = router.save(BOOTED_WITH_RADIOS)
    TIMINGS["save_for_the_radio_story_s"] = round(time.monotonic() - started, 1)


def test_an_update_whose_controller_cannot_start_rolls_back_under_grub(router, net):
    version = _version_of_image()
    out = router.run("homework-update --tries 1 /dev/disk/by-id/virtio-bundle-broken", timeout=300)
    assert f'"installed": "{version}.1"' in out and '"slot": "b"' in out, out
    assert "homework-" + version + ".1-b" in router.run("grep -m1 '^menuentry' /efi/grub/grub.cfg")
    started = time.monotonic()
    console = wait_for_slot(router, "a", router.reboot(), 2 * router.boot_limit())
    TIMINGS["rollback_s"] = round(time.monotonic() - started, 1)
    assert f"Booting `Homework router {version}.1 (slot B)'" in console, "GRUB never booted slot B"
    assert "NOT healthy" in console, "slot B never failed its health check"
    # GRUB's try of B is now in its entry's name, as systemd-boot would have left it.
    wait_until(
        "GRUB's tries moved into the entries",
        lambda: router.run("systemctl is-active homework-grub-count", check=False).strip() == "active",
        router.paced(120),
        2,
    )
    b_entries = [e for e in entries(router) if e["slot"] == "b"]
    assert b_entries and (b_entries[0]["tries_left"], b_entries[0]["tries_done"]) == (0, 1), b_entries
    assert "homework-" + version + "-a" in router.run("grep -m1 '^menuentry' /efi/grub/grub.cfg")
    wait_for_services(router)
    net.clients["laptop"].dhcp(timeout=router.paced(120))


def test_an_update_grub_boots_is_blessed_once_the_router_works(router, net):
    version = _version_of_image()
    out = router.run("homework-update /dev/disk/by-id/virtio-bundle-good", timeout=300)
    assert f'"installed": "{version}.2"' in out and '"tries": 3' in out, out
    started = time.monotonic()
    wait_for_slot(router, "b", router.reboot(), router.boot_limit())
    TIMINGS["update_reboot_s"] = round(time.monotonic() - started, 1)
    assert router.slot_and_version() == ("b", f"{version}.2")
    assert "systemd.wants=homework-grub-bless.service" in router.run("cat /proc/cmdline")

    def blessed():
        return [
            e
            for e in entries(router)
            if e["slot"] == "b" and e["version"] == f"{version}.2" and e["tries_left"] is None
        ]

    wait_until("slot B's boot entry to be blessed", blessed, router.paced(300), 5)
    assert router.run("systemctl is-active homework-health homework-grub-bless").split() == ["active"] * 2
    # Blessed, it is GRUB's default from now on, and no longer counted.
    cfg = router.run("cat /efi/grub/grub.cfg")
    assert cfg.split("menuentry ")[1].startswith(f"'Homework router {version}.2 (slot B)'")
    assert "save_env" not in cfg
    net.clients["laptop"].dhcp(timeout=router.paced(120))
