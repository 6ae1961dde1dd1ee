"""The router image boots in qemu and works: `make image-test` (after `make image`), as root.

One router, one story, in order (each step builds on the one before):
boot and services up (the ISP's IPv6 prefix delegated to the WAN) -> a LAN device gets a 30 s lease
and reaches nothing, no IPv6 address beyond its link either -> the owner claims the router with the
console's setup code and permits the device through the web UI's API -> its own /64 of the delegated
prefix (SLAAC), a page over IPv6 by name, nothing new in from the WAN -> one-hour lease, a page through
the NAT -> the data partition as the previous image left it (hwdb's files in its top directory), a
second device permitted and the power cut right after: both still permitted, hwdb's rows kept in its
own directory -> an update whose controller cannot start rolls back to A by itself -> an update to
slot B boots B and is kept (hwdb's rows still there).
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from homenet.routervm import (
    BOOT_STARTED,
    DELEGATED_PREFIX,
    QUIET_SHELL,
    SAVED,
    WWW6_HOST,
    WWW6_IP,
    Network,
    RouterVm,
    VmError,
    overlay,
    sh,
)
from homenet.wait import wait_until
from homework_deploy.prefix_delegation import DELEGATED_FILE
from homework_image import boot

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
IMAGE = BUILD / "homework-router-x86_64.img"
STATE = BUILD / "image-test"
LAPTOP_MAC, PHONE_MAC = "02:1a:00:00:00:01", "02:1a:00:00:00:02"
PENDING_LEASE_S, PERMITTED_LEASE_S = 30, 3600
DATA, HWDB_DIR = "/var/lib/homework", "/var/lib/homework/hwdb"
# A row of one of hwdb's persistent tables, written before the reboot that moves hwdb's files
# into its own directory; it must be there after that and after each update.
HWDB_ROW = "written before the reboot and the updates"
BOOTED_WITH_A_RADIO = "booted-with-a-radio"  # this story's first boot, saved for the satellite story (SAVED)
TIMINGS: dict[str, float] = {}
PERMITTED_AT: dict[str, float] = {}  # MAC -> time.monotonic() of the permit's answer

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the boot test needs root (namespaces, taps, KVM)")


def _version_of_image() -> str:
    return json.loads((BUILD / "homework-router-x86_64.sizes.json").read_text())["version"]


@pytest.fixture(scope="module")
def bundles() -> dict[str, Path]:
    """Two updates, newer than the image: one whose controller cannot start, and a good one.
    Made once for the image whichever story asks first: the stories run side by side, and the
    bundle builder has one work directory."""
    if not IMAGE.exists():
        pytest.fail("no image: run `make image` first")
    version = _version_of_image()
    out = BUILD / "image-test-bundles"
    out.mkdir(parents=True, exist_ok=True)
    made = {name: out / f"{name}.bundle" for name in ("broken", "good")}
    with open(out / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = out / "made-for"
        if stamp.exists() and stamp.read_text() == version and all(path.exists() for path in made.values()):
            return made
        stamp.unlink(missing_ok=True)
        overlay = out / "broken"
        shutil.rmtree(overlay, ignore_errors=True)
        package = overlay / "usr/lib/homework/venv/lib/python3.11/site-packages/homework_controller"
        package.mkdir(parents=True)
        (package / "__main__.py").write_text("raise SystemExit('this build of the controller cannot start')\n")
        for name, suffix in (("broken", "1"), ("good", "2")):
            cmd = [
                sys.executable,
                str(REPO / "image/build.py"),
                "bundle",
                "--version",
                f"{version}.{suffix}",
                "--out",
                str(made[name]),
                "--fast",
            ] + (["--overlay", str(overlay)] if name == "broken" else [])
            subprocess.run(["nice", "-n", "10", *cmd], check=True)
        stamp.write_text(version)
    return made


@pytest.fixture(scope="module")
def net():
    network = Network(STATE / "net", "img")
    network.up({"laptop": LAPTOP_MAC, "phone": PHONE_MAC})
    yield network
    for client in network.clients.values():
        client.stop_dhclient()
    network.down()


@pytest.fixture(scope="module")
def router(net, bundles):
    """Booted with a radio, so that the satellite story resumes this first boot (test_satellite_boot.router)
    with a network to share rather than boot one more router; slot A's entry alone asks for it, so the
    updates boot without (the wired 802.1X of a box with no radio). A qcow2 overlay on the image's copy
    holds the saved state."""
    disk = STATE / "disk.img"
    for stale in (disk, STATE / "vm/OVMF_VARS.qcow2", STATE / "vm/console.log"):
        stale.unlink(missing_ok=True)
    (STATE / "vm").mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "--sparse=always", str(IMAGE), str(disk)], check=True)
    ask_for_radios(disk, 1, STATE)
    drives = {"bundle-broken": bundles["broken"], "bundle-good": bundles["good"]}
    vm = RouterVm(overlay(disk), STATE / "vm", drives, net.vm_ns)
    yield vm
    vm.kill()
    (STATE / "timings.json").write_text(json.dumps(TIMINGS, indent=1) + "\n")


def ask_for_radios(disk: Path, radios: int, work: Path) -> None:
    """Put homework.test_radios=N on the kernel command line of the raw disk's boot entry (its ESP), for
    systemd-boot and for GRUB (its grub.cfg made again from the entry)."""
    table = json.loads(subprocess.run(["sfdisk", "-J", str(disk)], capture_output=True, text=True, check=True).stdout)
    esp = next(p for p in table["partitiontable"]["partitions"] if p.get("name") == "homework-esp")
    image = f"{disk}@@{esp['start'] * 512}"
    listing = subprocess.run(
        ["mdir", "-b", "-i", image, "::loader/entries"], capture_output=True, text=True, check=True
    ).stdout
    (entry,) = [line.strip() for line in listing.splitlines() if line.strip().endswith(".conf")]
    name = entry.rsplit("/", 1)[-1]
    text = subprocess.run(["mtype", "-i", image, f"::loader/entries/{name}"], capture_output=True, text=True).stdout
    text = "".join(
        line + (f" homework.test_radios={radios}" if line.startswith("options ") else "") + "\n"
        for line in text.splitlines()
    )
    work.mkdir(parents=True, exist_ok=True)
    for local, on_esp, content in (
        (work / name, f"::loader/entries/{name}", text),
        (work / "grub.cfg", f"::{boot.GRUB_DIR}/grub.cfg", boot.grub_config({name: text})),
    ):
        local.write_text(content)
        subprocess.run(["mcopy", "-o", "-i", image, str(local), on_esp], check=True)


class Owner:
    """The household's owner, using the web UI's JSON API as the browser does (session cookie,
    CSRF token), from the router itself (curl on the console)."""

    def __init__(self, vm: RouterVm):
        self.vm = vm
        self.csrf = ""

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        cmd = [
            "curl",
            "-s",
            "-b",
            "/tmp/owner.jar",
            "-c",
            "/tmp/owner.jar",
            "-X",
            method,
            "-H",
            "Content-Type: application/json",
            "-H",
            f"X-CSRF-Token: {self.csrf}",
            "-w",
            r"\n%{http_code}",
            f"http://127.0.0.1:8080{path}",
        ]
        if body is not None:
            cmd += ["--data", json.dumps(body)]
        out = self.vm.run(" ".join(shlex.quote(c) for c in cmd)).strip()
        status = re.findall(r"^(\d{3})$", out, re.M)
        if not status:
            raise VmError(f"no HTTP status from curl: {out!r}")
        try:
            doc = json_in(out)
        except VmError:
            doc = {}
        return int(status[-1]), doc

    def session(self) -> dict:
        status, doc = self.call("GET", "/api/session")
        assert status == 200, doc
        self.csrf = doc["csrf_token"]
        return doc

    @classmethod
    def set_up(cls, vm: RouterVm) -> Owner:
        """The household's owner, signed in through the web UI's first-run setup with the box's setup code."""
        owner = cls(vm)
        owner.session()
        code = vm.run("cat /var/lib/homework/webui/setup-code").strip()
        status, doc = owner.call(
            "POST", "/api/setup", {"setup_code": code, "username": "owner", "password": "correct horse battery"}
        )
        assert status == 201, doc
        owner.csrf = doc["csrf_token"]
        return owner


class LanOwner:
    """The owner at a laptop on the LAN, using the web UI as its page does (curl in the laptop's
    namespace, which the router has permitted)."""

    URL = "http://10.2.0.1:8080"

    def __init__(self, laptop, state: Path):
        self.laptop, self.jar, self.csrf = laptop, state / "owner-lan.jar", ""
        self.jar.unlink(missing_ok=True)

    def call(self, method: str, path: str, body: dict | bytes | None = None) -> tuple[int, dict]:
        binary = isinstance(body, bytes)
        argv = [
            "ip",
            "netns",
            "exec",
            self.laptop.ns,
            "curl",
            "-sS",
            "-m",
            "120",
            "-b",
            str(self.jar),
            "-c",
            str(self.jar),
            "-X",
            method,
            "-H",
            f"X-CSRF-Token: {self.csrf}",
            "-H",
            f"Content-Type: application/{'octet-stream' if binary else 'json'}",
            "-w",
            r"\n%{http_code}",
            f"{self.URL}{path}",
        ]
        data = body if binary else json.dumps(body).encode() if body is not None else None
        if data is not None:
            argv += ["--data-binary", "@-"]
        out = subprocess.run(argv, input=data or b"", capture_output=True, timeout=180).stdout.decode()
        text, _, status = out.rpartition("\n")
        doc = json.loads(text) if text.strip().startswith("{") else {}
        if isinstance(doc.get("csrf_token"), str):
            self.csrf = doc["csrf_token"]
        return int(status or 0), doc

    def sign_in(self) -> None:
        assert self.call("GET", "/api/session")[0] == 200
        status, doc = self.call("POST", "/api/login", {"username": "owner", "password": "correct horse battery"})
        assert status == 200, doc

    def upload(self, data: bytes) -> dict:
        """What the Household page's "Install update" does: announce the size, send the pieces."""
        status, doc = self.call("POST", "/api/update", {"size": len(data)})
        assert status == 201, doc
        for offset in range(0, len(data), doc["chunk_bytes"]):
            status, state = self.call(
                "PUT", f"/api/update/bundle?offset={offset}", data[offset : offset + doc["chunk_bytes"]]
            )
            assert status == 200, state
        return state


def json_in(output: str):
    """The JSON document in a command's output: the first line that starts one, up to where the
    document ends (curl prints no newline after it, so whatever follows can share its line)."""
    decoder = json.JSONDecoder()
    for line in re.finditer(r"^[ \t]*[\[{]", output, re.M):
        try:
            return decoder.raw_decode(output, line.end() - 1)[0]
        except ValueError:
            continue
    raise VmError(f"no JSON in {output!r}")


def device_state(vm: RouterVm, mac: str) -> str | None:
    """The controller's view of a device (ws.v1, on the router's loopback)."""
    for device in json_in(vm.run("curl -s http://127.0.0.1:8081/ws.v1/status")):
        if device.get("mac") == mac:
            return device.get("state")
    return None


def record_boot_profile(vm: RouterVm, units: list[str], timings: dict, state: Path) -> None:
    """Where the first boot's time went (systemd's account), into the story's timings and beside them."""
    profile = vm.boot_profile([f"{u}.service" for u in units])
    # The controller's own account of its start (homework_controller.edge.startup): CPU and wall seconds since exec.
    journal = vm.run("journalctl -b --no-pager -o cat -u homework-controller | grep 'start: '", check=False)
    profile["controller_start"] = {
        m.group(1): {"cpu_s": float(m.group(2)), "wall_s": float(m.group(3))}
        for m in re.finditer(r"start: (.+?) after ([\d.]+) s of CPU, ([\d.]+) s since exec", journal)
    }
    (state / "boot-profile.txt").write_text(profile.pop("text"))
    # The controller's and OVS's journals beside it: a slow start is read there (the switch reconnecting
    # and every rule sent again, say), not guessed after the VM is gone.
    journals = "-u homework-controller -u ovs-vswitchd -u ovsdb-server -u openvswitch-switch"
    (state / "boot-journal.txt").write_text(
        vm.run(f"journalctl -b --no-pager -o short-monotonic {journals} | tail -n 400", check=False, timeout=120)
    )
    timings["boot_profile"] = profile
    print(f"\nboot profile: {json.dumps(profile)}", flush=True)


def wait_for_services(vm: RouterVm) -> None:
    """After a boot: the controller and the web UI serve (the shell comes up before them)."""
    wait_until(
        "the controller and the web UI",
        lambda: vm.run("systemctl is-active homework-controller homework-webui", check=False).split() == ["active"] * 2,
        vm.paced(300),
        3,
    )


def hwdb_query(vm: RouterVm, text: str) -> str:
    return vm.run(f"/usr/lib/homework/bin/hwdb query --server 127.0.0.1:987 --timeout 2 {shlex.quote(text)}")


def hwdb_keeps_its_row(vm: RouterVm) -> bool:
    return HWDB_ROW in hwdb_query(vm, "select message from Events where kind = 'boot-test'")


def main_pid(vm: RouterVm, service: str) -> int:
    return int(vm.run(f"systemctl show -p MainPID --value homework-{service}").strip())


def as_service(vm: RouterVm, service: str) -> str:
    """A command prefix that runs what follows as the service would: in its mount namespace, as
    its user and groups, with only its capabilities."""
    unit = f"homework-{service}"
    caps = vm.run(f"systemctl show -p CapabilityBoundingSet --value {unit}").split()
    keep = "".join(f",+{cap.removeprefix('cap_')}" for cap in caps)
    pid = main_pid(vm, service)
    ids = vm.run(f"awk '/^Uid:|^Gid:/ {{print $2}}' /proc/{pid}/status").split()
    groups = vm.run(f"awk '/^Groups:/ {{$1=\"\"; print}}' /proc/{pid}/status").split()
    return (
        f"nsenter -t {pid} -m setpriv --reuid={ids[0]} --regid={ids[1]} "
        f"{'--groups=' + ','.join(groups) if groups else '--clear-groups'} "
        f"--inh-caps=-all --bounding-set=-all{keep}"
    )


def wait_for_slot(vm: RouterVm, slot: str, since: int, timeout: float) -> str:
    """Boots come and go (a failing update reboots by itself): wait for a shell on `slot`."""
    deadline = time.monotonic() + timeout
    pos = since
    while time.monotonic() < deadline:
        m = vm.expect(r"root@homework-router:[^\n]*# ", deadline - time.monotonic(), pos)
        pos += m.end()
        try:
            # No diagnosis when a command times out here: the router may have rebooted under it.
            vm.run(QUIET_SHELL, timeout=60, diagnose=False)
            booted, _ = vm.slot_and_version(diagnose=False)
            if booted == slot:
                vm.wait_for_boot_jobs(deadline - time.monotonic())
                return vm.since(since)
        except VmError:
            continue  # it rebooted under us
        pos = vm.mark()
    raise VmError(f"slot {slot} did not come up within {timeout:g} s; console:\n{vm.since(since)[-3000:]}")


# ---- the story


def test_boots_and_every_service_comes_up(router, net):
    laptop = net.clients["laptop"]
    powered_on = router.start()
    laptop.dhcp(timeout=router.boot_limit(), alive=lambda: router.check_alive(0))
    TIMINGS["boot_to_dhcp_ready_s"] = round(time.monotonic() - powered_on, 1)
    TIMINGS["kvm"] = router.kvm
    print(f"\nboot to DHCP ready: {TIMINGS['boot_to_dhcp_ready_s']} s ({'KVM' if router.kvm else 'software'})")
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
        "homework-wan-pd",
    ]
    wait_until(
        "every service active",
        lambda: router.run(f"systemctl is-active {' '.join(units)}", check=False).split() == ["active"] * len(units),
        router.paced(300),
        3,
        hint=lambda: router.run(
            f"systemctl is-active {' '.join(units)}; systemctl --failed --no-pager; "
            "journalctl -b --no-pager -n 80 -u 'homework-*'",
            check=False,
        ),
    )
    TIMINGS["boot_to_services_up_s"] = round(time.monotonic() - powered_on, 1)
    record_boot_profile(router, units, TIMINGS, STATE)
    # systemd-boot counts its tries in the entries' names: GRUB's count (and its Python start) is not run.
    assert router.run("systemctl is-active homework-grub-count", check=False).strip() == "inactive"
    # Every module the controller imports loads from its compiled file. The root's files all have one time,
    # which no timestamp-checked .pyc matches: each Python start then compiled everything again, in memory.
    compiled_again = router.run(
        "/usr/lib/homework/venv/bin/python -v -c 'import homework_controller.edge.ofapp' 2>&1"
        " | grep 'code object from /.*[.]py$' | head -5",
        timeout=120,
        check=False,
    )
    assert compiled_again.strip() == "", compiled_again
    assert router.slot_and_version()[0] == "a"
    # OVS runs on the kernel datapath, with the LAN NIC as the controller's wireless port.
    assert router.run("ovs-vsctl get bridge br-lan datapath_type").strip() in ('""', "system")
    assert "lan" in router.run("ovs-vsctl list-ports br-lan").split()
    assert router.run("cat /sys/module/openvswitch/initstate").strip() == "live"
    # QoS leaves: the Debian kernel has cake.
    router.run("modprobe sch_cake")
    # The WAN got its address from the upstream's DHCP.
    wait_until(
        "the WAN's lease", lambda: "198.51.100." in router.run("ip -4 -o addr show dev wan"), router.paced(120), 2
    )
    # IPv6: the default route from the ISP's adverts, and the prefix its DHCPv6 server delegated, where the
    # controller reads it.
    wait_until(
        "the WAN's IPv6 default route",
        lambda: "default via fe80::" in router.run("ip -6 route show dev wan"),
        router.paced(120),
        2,
    )
    # The prefix file's line: the prefix, then the preferred and valid lifetimes the ISP gave it.
    wait_until(
        "the delegated prefix",
        lambda: router.run(f"cat {DATA}/{DELEGATED_FILE}", check=False).split()[:1] == [DELEGATED_PREFIX],
        router.paced(120),
        2,
        hint=lambda: router.run("journalctl -b --no-pager -n 40 -u homework-wan-pd", check=False),
    )
    _, preferred, valid = router.run(f"cat {DATA}/{DELEGATED_FILE}").split()
    assert 0 < int(preferred) <= int(valid)
    TIMINGS["boot_to_delegated_prefix_s"] = round(time.monotonic() - powered_on, 1)
    # Each service writes only its own paths: the update spool, which the root installer reads,
    # is the web UI's alone, and the web UI is no longer root.
    assert router.run(f"stat -c %U /proc/{main_pid(router, 'webui')}").strip() == "homework-webui"
    probe = "/run/homework/update/probe"
    for service in ("controller", "hwdb", "hostapd"):
        out = router.run(f"{as_service(router, service)} touch {probe}", check=False)
        assert "cannot touch" in out, (service, out)
    router.run(f"{as_service(router, 'webui')} touch {probe} && rm {probe}")
    # Nor may any service write the boot loader's partition (a boot entry of its own would boot
    # unsigned code); only the installer, a unit of its own, writes there.
    for service in ("controller", "hwdb", "hostapd", "webui"):
        out = router.run(f"{as_service(router, service)} touch /efi/loader/probe", check=False)
        assert "Read-only file system" in out or "Permission denied" in out, (service, out)
    router.run("touch /efi/loader/probe && rm /efi/loader/probe")  # the installer's root may
    # hwdb, which the LAN's agents talk to, is not root either, and writes only its own
    # directory: not the controller's database beside it, which the controller may write (and
    # not hwdb's).
    assert router.run(f"stat -c %U /proc/{main_pid(router, 'hwdb')}").strip() == "homework-hwdb"
    for path in (f"{DATA}/probe", f"{DATA}/controller.sqlite"):
        out = router.run(f"{as_service(router, 'hwdb')} touch {path}", check=False)
        assert "Read-only file system" in out or "Permission denied" in out, (path, out)
    router.run(f"{as_service(router, 'hwdb')} touch {HWDB_DIR}/probe && rm {HWDB_DIR}/probe")
    out = router.run(f"{as_service(router, 'controller')} touch {HWDB_DIR}/probe", check=False)
    assert "Read-only file system" in out or "Permission denied" in out, out
    router.run(f"{as_service(router, 'controller')} touch {DATA}/probe && rm {DATA}/probe")
    # The web UI reads the agent key hwdb made (through hwdb's group), and may not change it.
    router.run(f"{as_service(router, 'webui')} head -c 64 {HWDB_DIR}/agent.key >/dev/null")
    assert "cannot" in router.run(f"{as_service(router, 'webui')} touch {HWDB_DIR}/agent.key", check=False)
    # The controller, seeing what it sees, gets hostapd's answers (the blacklist goes that way).
    ping = f"nsenter -t {main_pid(router, 'controller')} -m hostapd_cli -p /run/homework/hostapd -i br-lan ping"
    assert router.run(ping, check=False).split()[-1:] == ["PONG"]
    # The satellite story resumes the router from here: booted with its radio, no owner yet.
    started = time.monotonic()
    SAVED[BOOTED_WITH_A_RADIO] = router.save(BOOTED_WITH_A_RADIO)
    TIMINGS["save_for_the_satellite_story_s"] = round(time.monotonic() - started, 1)


def test_pending_device_gets_a_short_lease_and_reaches_nothing(router, net):
    laptop = net.clients["laptop"]
    assert re.fullmatch(r"10\.2\.\d+\.\d+/30", laptop.address())
    assert laptop.lease_left() <= PENDING_LEASE_S
    assert device_state(router, LAPTOP_MAC) == "pending"
    status, _ = laptop.fetch()
    assert status == "000", "a pending device reached the internet"
    # Nor over IPv6: the controller's adverts to a pending device carry no prefix, global or unique local
    # (once permitted, the same device has its global address within seconds: the next test).
    assert laptop.ipv6_addresses() == []
    assert (
        laptop.fetch(f"http://{WWW6_HOST}/", ipv6=True)[0] == "000"
    ), "a pending device reached the internet over IPv6"


def test_owner_claims_with_the_setup_code_and_permits_the_device(router, net):
    code = router.run("cat /var/lib/homework/webui/setup-code").strip()
    assert re.fullmatch(r"[A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{4}", code), code
    assert code in router.since(0), "the setup code was not printed on the console"
    owner = Owner(router)
    assert owner.session()["setup_required"] is True
    # Without an owner session nobody may permit; with a wrong code nobody becomes the owner.
    status, _ = owner.call("POST", f"/api/devices/{LAPTOP_MAC}/permit")
    assert status == 401
    status, doc = owner.call(
        "POST", "/api/setup", {"setup_code": "AAAA-BBBB-CCCC", "username": "owner", "password": "correct horse battery"}
    )
    assert status == 403 and doc.get("code") == "setup-code", doc
    status, doc = owner.call(
        "POST", "/api/setup", {"setup_code": code, "username": "owner", "password": "correct horse battery"}
    )
    assert status == 201, doc
    owner.csrf = doc["csrf_token"]
    status, doc = owner.call("POST", f"/api/devices/{LAPTOP_MAC}/permit")
    assert status == 200, doc
    PERMITTED_AT[LAPTOP_MAC] = time.monotonic()
    assert device_state(router, LAPTOP_MAC) == "permitted"


def test_permitted_device_gets_its_own_64_and_fetches_a_page_over_ipv6(router, net):
    """SLAAC from the controller's adverts: a /64 of the delegated prefix that is the device's (not the
    router's own /64, number 0), a page by name over IPv6; from the WAN only answers get in (RFC 6092)."""
    laptop = net.clients["laptop"]
    delegated = ipaddress.IPv6Network(DELEGATED_PREFIX)

    def global_addresses() -> list[ipaddress.IPv6Interface]:
        return [a for a in map(ipaddress.IPv6Interface, laptop.ipv6_addresses()) if a.network.subnet_of(delegated)]

    (address,) = wait_until("the laptop's global IPv6 address", global_addresses, router.paced(60), 0.2)
    TIMINGS["permit_to_global_ipv6_s"] = round(time.monotonic() - PERMITTED_AT[LAPTOP_MAC], 1)
    print(f"\npermit to a usable global IPv6 address: {TIMINGS['permit_to_global_ipv6_s']} s")
    own = address.network
    assert own.prefixlen == 64
    assert own != next(delegated.subnets(new_prefix=64)), f"{address} is in the router's own /64"
    status, body = laptop.fetch(f"http://{WWW6_HOST}/", ipv6=True)
    assert status == "200" and "Hello from the internet" in body
    # The WAN may answer the device (its ping to the web server) but not start anything with it, nor with
    # the router (its ping to the router's WAN address); the router's own connections out are answered.
    assert sh("ping", "-6", "-c", "1", "-W", "5", WWW6_IP, ns=laptop.ns, check=False).returncode == 0
    assert sh("ping", "-6", "-c", "1", "-W", "3", address.ip, ns=net.wan_ns, check=False).returncode != 0
    router.run(f"curl -6 -sS -m 10 -o /dev/null http://{WWW6_HOST}/")
    (wan6,) = re.findall(r"inet6 ([0-9a-f:]+)/", router.run("ip -6 -o addr show dev wan scope global"))
    assert sh("ping", "-6", "-c", "1", "-W", "3", wan6, ns=net.wan_ns, check=False).returncode != 0


def test_permitted_device_renews_for_an_hour_and_reaches_the_internet(net):
    laptop = net.clients["laptop"]
    laptop.dhcp()
    assert laptop.lease_left() > PENDING_LEASE_S * 10
    assert laptop.lease_left() <= PERMITTED_LEASE_S
    status, body = laptop.fetch()
    assert status == "200" and "Hello from the internet" in body


def test_a_permit_and_hwdbs_rows_survive_a_power_cut_and_hwdb_moves_into_its_own_directory(router, net):
    """One boot for two stories (every boot costs minutes under software emulation): a box
    updated from the previous image's data format, and a permit acknowledged just before the
    power went."""
    phone = net.clients["phone"]
    phone.dhcp()
    assert device_state(router, PHONE_MAC) == "pending"
    hwdb_query(router, f"insert into Events values ('boot-test', '{LAPTOP_MAC}', '{HWDB_ROW}')")
    key = router.run(f"cat {HWDB_DIR}/agent.key").strip()
    # The data partition as the previous image left it (format 1: hwdb, as root, kept its files
    # in the top directory), so this boot is what a box updated from that image goes through;
    # on disk long before the power cut, as on such a box.
    router.run(
        f"systemctl stop homework-hwdb && mv {HWDB_DIR}/hwdb.sqlite* {HWDB_DIR}/agent.key {DATA}/ && rmdir {HWDB_DIR}"
        f" && chown root {DATA}/hwdb.sqlite* {DATA}/agent.key && echo 1 >{DATA}/FORMAT && sync"
    )
    owner = Owner(router)
    owner.session()
    status, doc = owner.call("POST", "/api/login", {"username": "owner", "password": "correct horse battery"})
    assert status == 200, doc
    owner.csrf = doc["csrf_token"]
    # hwdb is stopped: the permit does not wait for its log.
    status, doc = owner.call("POST", f"/api/devices/{PHONE_MAC}/permit")
    assert status == 200, doc
    router.kill()  # right after the permit was acknowledged
    since = router.mark()
    router.start()
    router.wait_for_shell(since)
    wait_for_services(router)
    assert device_state(router, PHONE_MAC) == "permitted"
    assert device_state(router, LAPTOP_MAC) == "permitted"
    assert router.run(f"cat {DATA}/FORMAT").strip() == "2"
    assert router.run(f"stat -c %U {HWDB_DIR}/hwdb.sqlite {HWDB_DIR}/agent.key").split() == ["homework-hwdb"] * 2
    assert router.run(f"cat {HWDB_DIR}/agent.key").strip() == key, "the agents' key changed: each must be paired again"
    assert hwdb_keeps_its_row(router)
    for device in (net.clients["laptop"], phone):
        device.dhcp(timeout=router.paced(120))
        assert device.lease_left() > PENDING_LEASE_S * 10
    assert net.clients["laptop"].fetch()[0] == "200"


def test_an_update_whose_controller_cannot_start_rolls_back_by_itself(router, net):
    version = _version_of_image()
    # One try (the product's default is three): every boot under software emulation takes minutes.
    out = router.run("homework-update --tries 1 /dev/disk/by-id/virtio-bundle-broken", timeout=300)
    assert f'"installed": "{version}.1"' in out and '"slot": "b"' in out, out
    started = time.monotonic()
    console = wait_for_slot(router, "a", router.reboot(), 2 * router.boot_limit())
    TIMINGS["rollback_s"] = round(time.monotonic() - started, 1)
    assert "NOT healthy" in console, "slot B never failed its health check"
    assert "(slot B)" in console, "slot B never booted"
    status = json_in(router.run("homework-update --status"))
    assert status["running"] == {"slot": "a", "version": version}
    b_entries = [e for e in status["entries"] if e["slot"] == "b"]
    assert b_entries and b_entries[0]["tries_left"] == 0, status
    wait_for_services(router)
    assert device_state(router, LAPTOP_MAC) == "permitted"
    assert net.clients["laptop"].fetch()[0] == "200"
    assert hwdb_keeps_its_row(router)


def test_an_update_from_the_web_ui_boots_slot_b_and_is_kept(router, net, bundles):
    """The household's way: the owner's laptop sends the bundle to the web UI, the router
    installs it and restarts into it by itself."""
    version = _version_of_image()
    owner = LanOwner(net.clients["laptop"], STATE)
    owner.sign_in()
    good = bundles["good"].read_bytes()
    # A cut-off bundle (a broken download) is refused before anything is written, and said so.
    assert owner.upload(good[:65536])["state"] in ("installing", "idle")

    def installers_verdict():
        doc = owner.call("GET", "/api/update")[1]
        return doc.get("state") == "idle" and doc.get("last")

    verdict = wait_until("the installer's verdict on the cut-off bundle", installers_verdict, router.paced(120), 2)
    assert "refused" in verdict, verdict
    assert router.slot_and_version()[0] == "a"
    since = router.mark()
    assert owner.upload(good)["state"] in ("installing", "idle")
    started = time.monotonic()
    restarted = (
        router.expect(BOOT_STARTED, router.paced(600), since).start() + since
    )  # installed: it restarts by itself
    wait_for_slot(router, "b", restarted, router.boot_limit())
    TIMINGS["update_reboot_s"] = round(time.monotonic() - started, 1)
    assert router.slot_and_version() == ("b", f"{version}.2")

    def blessed():
        entries = json_in(router.run("homework-update --status"))["entries"]
        return [e for e in entries if e["slot"] == "b" and e["version"] == f"{version}.2" and e["tries_left"] is None]

    wait_until("slot B's boot entry to be blessed", blessed, router.paced(300), 5)
    assert device_state(router, LAPTOP_MAC) == "permitted"
    assert hwdb_keeps_its_row(router)
    laptop = net.clients["laptop"]
    laptop.dhcp(timeout=router.paced(120))
    assert laptop.fetch()[0] == "200"
