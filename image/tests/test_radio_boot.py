"""The router is the access point: real 802.11 in the VM (`make image-test`, after test_boot.py).

The image boots once with `homework.test_radios=3` on its kernel command line (written into the
test's copy of the disk): the tests-only unit loads mac80211_hwsim, whose first radio the router
serves (hostapd nl80211 on wlan0, an OVS port of br-lan). The two other radios are stations:
each is moved into a network namespace inside the VM and driven by the real wpa_supplicant and
ISC dhclient, which the image does not carry: they come on a test drive (a second disk this test
makes from the host's own Debian binaries, mounted read-only in the VM).
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_boot import PENDING_LEASE_S, Owner, ask_for_radios, device_state, hwdb_query, json_in, main_pid

from homenet.routervm import SAVED, WWW_IP, Network, RouterVm, VmError
from homenet.wait import wait_until
from homework_controller.policy import wifi_keys

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
IMAGE = BUILD / "homework-router-x86_64.img"
STATE = BUILD / "image-test-radio"
# The router's, three stations (two permitted, one pending), a satellite access point's and a station of its.
RADIOS = 6
STATIONS = (1, 2, 3)
SATELLITE_RADIO, SATELLITE_STATION = 4, 5
BOOTED_WITH_RADIOS = "booted-with-radios"  # the BIOS story's first boot, saved for this story (SAVED)
DRIVE = "/run/radio-test"  # where the test drive is mounted in the VM
HOSTAPD_CTRL = "/run/homework/hostapd"
TIMINGS: dict[str, float] = {}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the boot test needs root (namespaces, taps)")


def make_test_drive(out: Path) -> Path:
    """An ext4 image with wpa_supplicant, wpa_cli, dhclient and ping from this (Debian bookworm) machine, the
    libraries they need beyond the C library, and a dhclient script that only sets the address."""
    stage = out.with_suffix(".d")
    shutil.rmtree(stage, ignore_errors=True)
    (stage / "bin").mkdir(parents=True)
    (stage / "lib").mkdir()
    for name in ("wpa_supplicant", "wpa_cli", "dhclient", "ping"):
        binary = shutil.which(name) or f"/usr/sbin/{name}"
        shutil.copy2(binary, stage / "bin" / name)
        for line in subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout.splitlines():
            parts = line.split()
            if "=>" in parts and parts[2].startswith("/") and not parts[0].startswith(("libc.so", "libm.so")):
                shutil.copy2(parts[2], stage / "lib" / parts[0])
    script = stage / "bin/dhclient-script"
    script.write_text(
        "#!/bin/sh\n"
        "# The address and route a lease gives, with its lifetime (nothing else on the read-only router).\n"
        'case "$reason" in\n'
        "BOUND|RENEW|REBIND|REBOOT)\n"
        '    ip -4 addr flush dev "$interface"\n'
        '    ip -4 addr add "$new_ip_address/$new_subnet_mask" dev "$interface" '
        'valid_lft "$new_dhcp_lease_time" preferred_lft "$new_dhcp_lease_time"\n'
        '    ip -4 route replace default via "$new_routers" dev "$interface" onlink ;;\n'
        "EXPIRE|FAIL|RELEASE|STOP)\n"
        '    ip -4 addr flush dev "$interface" ;;\n'
        "esac\n"
    )
    script.chmod(0o755)
    out.unlink(missing_ok=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "radio-test", "-d", str(stage), str(out), "64M"], check=True)
    shutil.rmtree(stage)
    return out


def radio_test_drive() -> Path:
    """The stations' tools as a drive (made once a run: the BIOS story's router carries it for this one)."""
    return make_test_drive(STATE / "radio-test.img")


class Station:
    """A radio of the VM's in its own network namespace, with wpa_supplicant and dhclient."""

    def __init__(self, vm: RouterVm, number: int):
        self.vm, self.ns, self.phy, self.ifname = vm, f"sta{number}", f"phy{number}", f"wlan{number}"
        self.dir = f"/run/{self.ns}"
        self.vm.run(
            f"mkdir -p {self.dir} && ip netns add {self.ns} && iw phy {self.phy} set netns name {self.ns} "
            f"&& ip -n {self.ns} link set lo up && ip -n {self.ns} link set {self.ifname} up"
        )
        self.mac = self.ip("link show")[0]["address"]

    def ip(self, words: str) -> list[dict]:
        """`ip -j WORDS dev` this station's radio, in its namespace, as JSON (what else it printed, if not)."""
        text = self.vm.run(f"ip -n {self.ns} -j {words} dev {self.ifname}")
        try:
            return json.loads(text)
        except ValueError:
            raise VmError(f"`ip {words}` in {self.ns} printed no JSON:\n{text[-1500:]}") from None

    def exec(self, command: str, timeout: float = 60, check: bool = True) -> str:
        return self.vm.run(f"ip netns exec {self.ns} {command}", timeout=timeout, check=check)

    def join(self, network: str) -> None:
        """(Re)start wpa_supplicant with one network block, e.g. 'key_mgmt=WPA-PSK\\npsk="..."'."""
        self.leave()
        # Channels 6 and 11 (the owner moves the radio to 11), and the satellite's, 1.
        conf = (
            f'ctrl_interface={self.dir}/ctrl\nnetwork={{\n ssid="Homework"\n scan_freq=2412 2437 2462\n {network}\n}}\n'
        )
        self.write(f"{self.dir}/wpa.conf", conf)
        self.vm.run(f": > {self.dir}/wpa.log")
        self.exec(
            f"env LD_LIBRARY_PATH={DRIVE}/lib {DRIVE}/bin/wpa_supplicant -B -D nl80211 -i {self.ifname} "
            f"-c {self.dir}/wpa.conf -f {self.dir}/wpa.log -t -P {self.dir}/wpa.pid"  # -t: each line's time
        )

    def new_address(self, mac: str) -> None:
        """A new MAC on its radio, as a phone takes a new private address (wpa_supplicant stopped)."""
        self.leave()
        self.vm.run(
            f"ip -n {self.ns} link set {self.ifname} down && ip -n {self.ns} link set {self.ifname} address {mac} "
            f"&& ip -n {self.ns} link set {self.ifname} up"
        )
        self.mac = mac

    def leave(self) -> None:
        self.vm.run(
            f"[ -f {self.dir}/wpa.pid ] && kill $(cat {self.dir}/wpa.pid); rm -f {self.dir}/wpa.pid", check=False
        )
        self.vm.run(f"sleep 1; ip -n {self.ns} -4 addr flush dev {self.ifname}", check=False)

    def write(self, path: str, text: str) -> None:
        self.vm.run(f"echo {base64.b64encode(text.encode()).decode()} | base64 -d > {path}")

    def log(self) -> str:
        return self.vm.run(f"cat {self.dir}/wpa.log")

    def connected(self) -> bool:
        """The 4-way handshake (or SAE and then it) has completed."""
        return "CTRL-EVENT-CONNECTED" in self.log()

    def wait_connected(self, timeout: float = 60) -> None:
        wait_until(f"{self.ns} to join", self.connected, self.vm.paced(timeout), 1, hint=lambda: self.log()[-1500:])

    def dhcp(self, timeout: float = 30) -> str:
        conf = "initial-interval 1;\nbackoff-cutoff 2;\nrequest subnet-mask, broadcast-address, routers;\n"
        self.write(f"{self.dir}/dhclient.conf", conf)
        # dhclient stays running after its lease: the previous one would renew, or expire its short pending
        # lease and flush the interface, beside the new one (on a slow machine, after the new lease came).
        pid = f"{self.dir}/dhclient.pid"
        self.vm.run(
            f"if [ -s {pid} ] && kill $(cat {pid}) 2>/dev/null; then"
            f" while kill -0 $(cat {pid}) 2>/dev/null; do sleep 0.2; done; fi; rm -f {pid}",
            check=False,
        )
        self.exec(f"ip -4 addr flush dev {self.ifname}")
        timeout = self.vm.paced(timeout)
        out = self.vm.run(
            f"ip netns exec {self.ns} timeout {int(timeout)} {DRIVE}/bin/dhclient -1 -v -cf {self.dir}/dhclient.conf "
            f"-sf {DRIVE}/bin/dhclient-script -pf {pid} -lf {self.dir}/dhclient.leases "
            f"{self.ifname}",
            timeout=timeout + 30,
            check=False,
            paced=False,
        )
        info = self.ip("-4 addr show")
        for a in info[0].get("addr_info", []) if info else []:
            return f"{a['local']}/{a['prefixlen']}"
        # What the station's supplicant and the router's hostapd say of it: off the air, or on it unanswered.
        try:
            on_air = hostapd(self.vm, "sta", self.mac)
        except VmError as exc:
            on_air = str(exc)
        raise VmError(
            f"{self.ns} got no lease in {timeout:g} s: {out[-500:]}\n"
            f"its supplicant's log ends: {self.log()[-2500:]}\nhostapd's STA {self.mac}: {on_air[:600]}"
        )

    def lease_left(self) -> int:
        info = self.ip("-4 addr show")
        return int(info[0]["addr_info"][0]["valid_life_time"])

    def address(self) -> str:
        info = self.ip("-4 addr show")
        return info[0]["addr_info"][0]["local"]

    def listen(self, port: int, group: str = "-", seconds: float = 15) -> None:
        """Datagrams to `port` (and the multicast `group`, joined on this station's radio) for `seconds` (paced),
        in the background: read them with `heard`. Returns once the listener is bound and joined; a listener
        that could not start fails here, with its own words, rather than hearing nothing later."""
        self.write(f"{self.dir}/probe.py", PROBE)
        seconds = self.vm.paced(seconds)
        self.detach(f"python3 {self.dir}/probe.py listen {port} {group} {seconds} {self.ifname}", self._heard(port))
        wait_until(f"{self.ns}'s listener on {port}", lambda: self._probe_lines(port), self.vm.paced(10), 0.5)

    def heard(self, port: int) -> list[dict]:
        """What the listener on `port` heard so far: one dict per datagram (source, TTL as it arrived, data)."""
        return [line for line in self._probe_lines(port) if "from" in line]

    def still_listening(self, port: int) -> bool:
        return not any("done" in line for line in self._probe_lines(port))

    def _heard(self, port: int) -> str:
        return f"{self.dir}/heard-{port}"

    def _probe_lines(self, port: int) -> list[dict]:
        text = self.vm.run(f"cat {self._heard(port)}")
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError:  # its traceback (stderr shares the file), or something else on the console
            raise VmError(f"{self.ns}'s listener on {port} wrote what is no datagram:\n{text[-1500:]}") from None

    def detach(self, command: str, out: str = "/dev/null") -> None:
        """`command` in the station's namespace, left running on its own (setsid: no job of the console's
        shell, whose notices would land in a later command's output)."""
        self.vm.run(f"setsid -f ip netns exec {self.ns} {command} > {out} 2>&1 < /dev/null")

    def send(self, host: str, port: int, data: str) -> None:
        self.write(f"{self.dir}/probe.py", PROBE)
        self.exec(f"python3 {self.dir}/probe.py send {host} {port} {shlex.quote(data)}")

    def fetch(self, url: str = f"http://{WWW_IP}/") -> str:
        """The HTTP status the station gets ('000' when nothing answers)."""
        return self.exec(f"curl -s -o /dev/null -m 5 -w %{{http_code}} {url}", check=False).strip()[-3:]


# Run by a station's python3 (the image's): `listen PORT GROUP|- SECONDS IFNAME` prints a line once it listens,
# each datagram with the TTL it arrived with, and a line when its time is up; `send HOST PORT DATA` sends DATA
# three times (multicast with a TTL of 1, as mDNS).
PROBE = """
import json, socket, struct, sys
mode, *args = sys.argv[1:]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if mode == "listen":
    port, group, seconds, ifname = int(args[0]), args[1], float(args[2]), args[3]
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_RECVTTL", 12), 1)
    s.bind(("", port))
    if group != "-":  # ip_mreqn on the radio itself: no route to the group needed (a pending lease may be gone)
        index = socket.if_nametoindex(ifname)
        mreqn = socket.inet_aton(group) + bytes(4) + struct.pack("@i", index)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
    s.settimeout(seconds)
    print(json.dumps({"listening": port}), flush=True)
    try:
        while True:
            data, extra, _, source = s.recvmsg(2048, socket.CMSG_SPACE(4))
            ttl = next((int.from_bytes(d[:4], sys.byteorder) for _, k, d in extra if k == socket.IP_TTL), None)
            print(json.dumps({"from": source[0], "ttl": ttl, "data": data.decode(errors="replace")}), flush=True)
    except TimeoutError:
        print(json.dumps({"done": port}), flush=True)
else:
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    for _ in range(3):
        s.sendto(args[2].encode(), (args[0], int(args[1])))
"""


def hostapd(vm: RouterVm, *words: str) -> str:
    """A command on hostapd's control socket, from inside its private /tmp (where it answers)."""
    pid = vm.run("systemctl show -p MainPID --value homework-hostapd").strip()
    if not pid.isdigit() or pid == "0":  # restarting, or something else on the console: never typed on
        raise VmError(f"hostapd has no main process to ask: {pid!r}")
    return vm.run(f"nsenter -t {pid} -m hostapd_cli -p {HOSTAPD_CTRL} -i wlan0 {' '.join(map(shlex.quote, words))}")


@pytest.fixture(scope="module")
def net():
    network = Network(STATE / "net", "imgradio")
    network.up({})
    yield network
    network.down()


@pytest.fixture(scope="module")
def router(net):
    """The BIOS story's first boot, resumed (it boots with radios for this story: booting is not this
    story's subject), or, run alone, a router of its own booted with radios."""
    shutil.rmtree(STATE / "vm", ignore_errors=True)
    (STATE / "vm").mkdir(parents=True)
    saved = SAVED.get(BOOTED_WITH_RADIOS)
    if saved is not None:
        vm = saved.resume(STATE / "vm", net.vm_ns)
    else:
        if not IMAGE.exists():
            pytest.fail("no image: run `make image` first")
        disk = STATE / "disk.img"
        subprocess.run(["cp", "--sparse=always", str(IMAGE), str(disk)], check=True)
        ask_for_radios(disk, RADIOS, STATE)
        vm = RouterVm(disk, STATE / "vm", {"radio-test": radio_test_drive()}, net.vm_ns)
    vm.start()
    yield vm
    try:  # the router's side of what happened, kept beside the console's: its services, both access points'
        # hostapd (the satellite's runs outside the router's units, logging to syslog) and the satellite's agent
        for name, command in (
            ("journal.log", "journalctl -b --no-pager -o short-monotonic -u 'homework-*'"),
            ("hostapd.log", "journalctl -b --no-pager -o short-monotonic -t hostapd"),
            ("satellite-agent.log", f"cat {SATELLITE_STATE}/agent.log"),
        ):
            (STATE / name).write_text(vm.run(command, timeout=120, check=False))
    except VmError:
        pass
    vm.kill()
    (STATE / "timings.json").write_text(json.dumps(TIMINGS, indent=1) + "\n")


@pytest.fixture(scope="module")
def guest_passphrase(router) -> str:
    if router.resumed_from:
        router.resumed()
    else:
        router.wait_for_shell(0)
    router.run(f"mkdir -p {DRIVE} && mount -o ro /dev/disk/by-id/virtio-radio-test {DRIVE}")
    conf = router.run("cat /var/lib/homework/config/wifi.conf")
    return next(line.split("=", 1)[1] for line in conf.splitlines() if line.startswith("passphrase="))


@pytest.fixture(scope="module")
def stations(router, guest_passphrase) -> list[Station]:
    return [Station(router, n) for n in STATIONS]


@pytest.fixture(scope="module")
def owner(router) -> Owner:
    return Owner.set_up(router)


def wpa2(passphrase: str) -> str:
    return f'key_mgmt=WPA-PSK\n psk="{passphrase}"\n ieee80211w=1'


def sae(password: str) -> str:
    return f'key_mgmt=SAE\n sae_password="{password}"\n ieee80211w=2'


def hostapd_binds_sae_password_to(vm: RouterVm, mac: str) -> bool:
    """hostapd runs with a configuration that binds an SAE password to `mac`: a key issued (or moved)
    reached it (given to it while it runs, then written to the file the controller reads)."""
    if f"|mac={mac}" not in vm.run("cat /run/homework/hostapd.conf"):
        return False
    try:
        return "state=ENABLED" in hostapd(vm, "status")
    except VmError:  # restarting
        return False


def wait_for_hostapd_to_take_the_key_of(vm: RouterVm, mac: str) -> None:
    wait_until(
        f"hostapd to run with {mac}'s SAE password",
        lambda: hostapd_binds_sae_password_to(vm, mac),
        vm.paced(120),
        2,
        hint=lambda: vm.run("journalctl -b --no-pager -n 30 -u homework-radio-refresh", check=False),
    )


def clone_suspected(vm: RouterVm, mac: str) -> object:
    for device in json_in(vm.run("curl -s http://127.0.0.1:8081/ws.v1/status")):
        if device.get("mac") == mac:
            return device.get("clone_suspected")
    return None


# ---- the story


def test_the_router_serves_its_first_radio_as_the_access_point_on_a_port_of_its_switch(router, guest_passphrase):
    wait_until(
        "hostapd on the radio",
        lambda: router.run("systemctl is-active homework-hostapd", check=False).strip() == "active",
        router.paced(300),
        3,
        hint=lambda: router.run("journalctl -b --no-pager -n 60 -u homework-network -u homework-hostapd", check=False),
    )
    assert router.run("cat /sys/module/mac80211_hwsim/initstate").strip() == "live"
    assert "type AP" in router.run("iw dev wlan0 info")
    assert {"wlan0", "lan"} <= set(router.run("ovs-vsctl list-ports br-lan").split())
    assert "state=ENABLED" in hostapd(router, "status")
    # Multicast to unicast and isolation are what hostapd runs with.
    conf = router.run("cat /run/homework/hostapd.conf")
    assert "ap_isolate=1" in conf and "multicast_to_unicast=1" in conf and "driver=nl80211" in conf
    # A box without a radio keeps the wired setup: see test_boot.py (no radios on its kernel command line).


def test_a_station_joins_with_the_guest_passphrase(router, stations, guest_passphrase):
    first = stations[0]
    first.join(f'key_mgmt=WPA-PSK\n psk="{guest_passphrase}"\n ieee80211w=1')
    first.wait_connected(120)
    since = "resume" if router.resumed_from else "boot"
    TIMINGS[f"{since}_to_first_association_s"] = round(time.monotonic() - router.powered_on, 1)
    print(f"\n{since} to the first association: {TIMINGS[f'{since}_to_first_association_s']} s")
    sta = hostapd(router, "sta", first.mac)
    assert "[AUTHORIZED]" in sta, sta


def test_the_guest_station_is_pending_with_a_short_lease_and_reaches_nothing_until_permitted(router, stations, owner):
    first = stations[0]
    address = first.dhcp(60)
    assert address.endswith("/30"), address
    assert first.lease_left() <= PENDING_LEASE_S
    assert device_state(router, first.mac) == "pending"
    assert first.fetch() == "000"
    status, doc = owner.call("POST", f"/api/devices/{first.mac}/permit")
    assert status == 200, doc
    first.dhcp(60)
    assert first.lease_left() > PENDING_LEASE_S * 10
    # The controller's forwarding rules for it follow the permit (seconds under software emulation).
    wait_until("a page through the NAT", lambda: first.fetch() == "200", router.paced(30), 1)


def test_links_carry_the_stations_signal_as_nl80211_reports_it(router, stations):
    first = stations[0]

    def signal() -> int | None:
        for line in hwdb_query(router, "select * from Links [range 10 seconds]").splitlines():
            if first.mac in line:
                return int(re.findall(r"-?\d+", line.split(first.mac, 1)[1])[0])
        return None

    rssi = wait_until("a Links row of the station", signal, router.paced(30), 2)
    assert -100 < rssi < 0, rssi  # dBm, as the kernel reports the station's signal


def test_a_wpa3_station_joins_with_sae_and_protected_management_frames_and_a_wrong_password_is_refused(
    router, stations, guest_passphrase
):
    second = stations[1]
    second.join('key_mgmt=SAE\n sae_password="not the password at all"\n ieee80211w=2')
    time.sleep(20)
    assert not second.connected(), second.log()[-1500:]
    assert "Trying to authenticate" in second.log()  # it did try (SAE's commit and confirm)
    assert "[AUTHORIZED]" not in hostapd(router, "sta", second.mac)
    # The same station with the right password joins, over SAE, with PMF.
    second.join(f'key_mgmt=SAE\n sae_password="{guest_passphrase}"\n ieee80211w=2')
    second.wait_connected(120)
    sta = hostapd(router, "sta", second.mac)
    assert "[AUTHORIZED]" in sta and "[MFP]" in sta, sta
    assert "sae_group=" in sta, sta  # it authenticated with SAE


def test_a_blacklisted_station_cannot_complete_the_handshake_and_lifting_it_lets_it_back(router, stations):
    second = stations[1]
    out = router.run(f"curl -s -X POST http://127.0.0.1:8081/ws.v1/blacklist/{second.mac}")
    assert json_in(out), out
    # hostapd drops it at once and refuses it at authentication from now on.
    wait_until(
        "the blacklisted station to be dropped",
        lambda: second.mac not in hostapd(router, "all_sta"),
        router.paced(30),
        1,
    )
    connected_before = second.log().count("CTRL-EVENT-CONNECTED")
    time.sleep(20)
    assert second.log().count("CTRL-EVENT-CONNECTED") == connected_before, second.log()[-1500:]
    # The other station, not blacklisted, stays.
    assert "[AUTHORIZED]" in hostapd(router, "sta", stations[0].mac)
    router.run(f"curl -s -X POST http://127.0.0.1:8081/ws.v1/whitelist/{second.mac}")
    wait_until(
        "the station to join again",
        lambda: second.log().count("CTRL-EVENT-CONNECTED") > connected_before,
        router.paced(90),
        2,
        hint=lambda: second.log()[-1500:],
    )


def test_a_device_given_its_own_passphrase_joins_with_it_and_a_copy_of_its_mac_is_flagged(
    router, stations, owner, guest_passphrase
):
    """The owner gives the permitted station a passphrase of its own (the web UI, as the Guest Board's
    device page does); it joins with it and hostapd names its key; under its next private address it
    is still the device; another station taking its MAC with the guest passphrase is flagged as a
    clone and gets nothing of its permissions."""
    first, second = stations[:2]
    status, doc = owner.call("POST", f"/api/devices/{first.mac}/wifi-key")
    assert status == 200 and doc["wifi_key"]["applied"], doc
    key = doc["wifi_key"]
    assert key["keyid"] == wifi_keys.device_keyid(first.mac) and key["ssid"] == "Homework", key
    status, shown = owner.call("GET", f"/api/devices/{first.mac}/wifi-key")  # the device page shows it again
    assert status == 200 and shown["wifi_key"]["passphrase"] == key["passphrase"], shown
    wait_for_hostapd_to_take_the_key_of(router, first.mac)
    # Until it switches, the device keeps the guest passphrase it was on: joining with it again (as after
    # a radio restart) is no copy of itself (issue 37: it was put off the air and flagged).
    first.join(wpa2(guest_passphrase))
    first.wait_connected(120)
    time.sleep(5)
    assert clone_suspected(router, first.mac) is None
    assert "keyid=guest" in hostapd(router, "sta", first.mac) and "CTRL-EVENT-DISCONNECTED" not in first.log()
    first.join(wpa2(key["passphrase"]))
    first.wait_connected(120)
    assert f"keyid={key['keyid']}" in hostapd(router, "sta", first.mac)
    first.dhcp(60)
    wait_until("a page with its own passphrase", lambda: first.fetch() == "200", router.paced(30), 1)
    # Its next private address: the same passphrase says it is the device, which moves to it.
    original = first.mac
    first.new_address("06:11:22:33:44:55")
    first.join(wpa2(key["passphrase"]))
    first.wait_connected(120)
    wait_until(
        "the device to move to its new MAC", lambda: device_state(router, first.mac) == "permitted", router.paced(30), 1
    )
    # Its key moved with it, and so does its SAE password.
    wait_for_hostapd_to_take_the_key_of(router, first.mac)
    first.wait_connected(120)
    first.dhcp(60)
    wait_until("a page under its new MAC", lambda: first.fetch() == "200", router.paced(30), 1)
    # Another station under the device's MAC with the guest passphrase: off the air and flagged.
    first.leave()
    other_mac = second.mac
    second.leave()
    second.new_address(first.mac)
    second.join(wpa2(guest_passphrase))
    wait_until("the copy to be flagged", lambda: clone_suspected(router, first.mac), 30, 1, hint=second.log)
    # Each time it completes the handshake the router has hostapd put it off the air again.
    wait_until("the copy to be put off the air", lambda: "CTRL-EVENT-DISCONNECTED" in second.log(), router.paced(30), 1)
    # Positive control: the device itself, with its own passphrase, is back on and served.
    second.leave()
    second.new_address(other_mac)
    first.join(wpa2(key["passphrase"]))
    first.wait_connected(120)
    first.dhcp(60)
    assert first.fetch() == "200"
    assert device_state(router, original) is None  # the device moved: nothing is left under its old MAC


def test_a_wpa3_device_joins_with_its_own_sae_password_and_a_copy_of_its_mac_with_the_guests_is_refused(
    router, stations, owner, guest_passphrase
):
    """A key issued reaches hostapd's SAE passwords while it runs (homework-radio-refresh.path gives it the
    configuration's passwords), bound to the device's MAC, and the station on the air meanwhile stays on:
    the device joins over SAE with its own password and the controller takes it for the device (hostapd
    names no key for SAE); a copy of its MAC cannot join over SAE with the guest password."""
    first, second = stations[:2]
    second.join(sae(guest_passphrase))
    second.wait_connected(120)
    second.dhcp(60)
    status, doc = owner.call("POST", f"/api/devices/{second.mac}/permit")
    assert status == 200, doc
    # The household gives it its own password (the device is set up with it: off the guest's first; once
    # hostapd binds the new password to its MAC, it cannot join over SAE with the guest's any more).
    second.leave()
    assert first.connected()  # on its own WPA2 passphrase since the story before this one
    started = router.run("systemctl show -p NRestarts,ExecMainStartTimestampMonotonic homework-hostapd")
    status, doc = owner.call("POST", f"/api/devices/{second.mac}/wifi-key")
    assert status == 200, doc
    password = doc["wifi_key"]["passphrase"]

    wait_for_hostapd_to_take_the_key_of(router, second.mac)
    # No restart, and the station on the air was not dropped for it (its supplicant saw no disconnection).
    assert router.run("systemctl show -p NRestarts,ExecMainStartTimestampMonotonic homework-hostapd") == started
    assert "CTRL-EVENT-DISCONNECTED" not in first.log(), first.log()[-1500:]
    assert "[AUTHORIZED]" in hostapd(router, "sta", first.mac)
    second.join(sae(password))
    second.wait_connected(120)
    sta = hostapd(router, "sta", second.mac)
    assert "[AUTHORIZED]" in sta and "sae_group=" in sta, sta
    # The controller took it for the device (hostapd named no key: it read the password hostapd binds
    # to the MAC): not flagged, not put off the air.
    wait_until(
        "the controller to recognise the device's own SAE password",
        lambda: f"{second.mac} joined over SAE with its own password"
        in router.run("journalctl -b --no-pager -u homework-controller", check=False),
        router.paced(60),
        2,
    )
    time.sleep(5)
    assert clone_suspected(router, second.mac) is None
    assert "[AUTHORIZED]" in hostapd(router, "sta", second.mac)
    second.dhcp(60)
    assert second.fetch() == "200"
    # The first station under the device's MAC, over SAE with the guest password: hostapd tries the
    # device's password for that MAC, so the handshake never completes.
    second.leave()
    own_mac = first.mac
    first.leave()
    first.new_address(second.mac)
    first.join(sae(guest_passphrase))
    time.sleep(20)
    assert not first.connected(), first.log()[-1500:]
    first.leave()
    first.new_address(own_mac)


def test_stations_reach_each_other_only_through_the_router_and_a_pending_one_hears_none_of_their_multicast(
    router, stations, owner, guest_passphrase
):
    """ap_isolate keeps stations from talking inside the access point: two permitted stations reach each
    other through the router (the TTL one lower, the connection in Flows); a permitted station's mDNS
    announcement reaches the other permitted one, not a pending newcomer on the same radio."""
    first, second, newcomer = stations
    # The two permitted stations with their own passphrases from the earlier tests (WPA2 and SAE).
    for station, network in ((first, wpa2), (second, sae)):
        status, doc = owner.call("GET", f"/api/devices/{station.mac}/wifi-key")
        assert status == 200, doc
        station.join(network(doc["wifi_key"]["passphrase"]))
        station.wait_connected(120)
        station.dhcp(60)
    newcomer.join(wpa2(guest_passphrase))
    newcomer.wait_connected(120)
    newcomer.dhcp(60)
    assert device_state(router, newcomer.mac) == "pending"
    # Unicast between the two permitted stations: routed, one hop.
    second.listen(9999)
    first.send(second.address(), 9999, "hello through the router")
    heard = wait_until("the datagram", lambda: second.heard(9999), router.paced(15), 1)
    assert heard[0]["from"] == first.address() and heard[0]["ttl"] == 63, heard
    second.detach(f"python3 -m http.server 8000 --bind {second.address()}")
    wait_until(
        "a page from the other station",
        lambda: first.fetch(f"http://{second.address()}:8000/") == "200",
        router.paced(20),
        1,
    )

    def flow_between() -> bool:
        rows = hwdb_query(router, "select * from Flows [range 60 seconds]")
        return any(first.address() in row and second.address() in row for row in rows.splitlines())

    wait_until("a Flows row between the two stations", flow_between, router.paced(40), 2)
    # mDNS from a permitted station: the other permitted station hears it, the pending one does not.
    second.listen(5353, "224.0.0.251", 10)
    newcomer.listen(5353, "224.0.0.251", 10)
    first.send("224.0.0.251", 5353, "printer announcement")
    wait_until("the permitted station to hear the announcement", lambda: second.heard(5353), router.paced(10), 1)
    time.sleep(3)
    # Silence that means something: the newcomer's listener was bound, joined and still running.
    assert newcomer.still_listening(5353) and newcomer.heard(5353) == []


def test_the_owner_moves_the_radio_to_another_channel_and_only_hostapd_restarts(router, stations, owner):
    """The web UI's radio settings: saved, hostapd alone restarts with them (homework-radio-refresh.path)
    and the stations follow the network to its new channel."""
    first = stations[0]
    status, doc = owner.call("GET", "/api/radio")
    assert status == 200 and doc["radio"]["channel"] == 6 and doc["radio"]["country"] == "00", doc
    controller, hostapd_before = main_pid(router, "controller"), main_pid(router, "hostapd")
    joined_before = first.log().count("CTRL-EVENT-CONNECTED")
    status, doc = owner.call("PUT", "/api/radio", {"channel": 11})
    assert status == 200 and doc["radio"]["channel"] == 11 and doc["restarting"], doc

    def on_channel_11() -> bool:
        try:
            return "channel=11" in hostapd(router, "status").splitlines()
        except VmError:  # restarting
            return False

    wait_until("hostapd on channel 11", on_channel_11, router.paced(90), 2)
    assert main_pid(router, "hostapd") != hostapd_before
    assert main_pid(router, "controller") == controller  # nothing else restarted
    wait_until(
        "the station to join again on channel 11",
        lambda: first.log().count("CTRL-EVENT-CONNECTED") > joined_before,
        router.paced(120),
        2,
        hint=lambda: first.log()[-1500:],
    )
    assert "freq: 2462" in first.exec(f"iw dev {first.ifname} link")


# ---- a satellite access point (docs/whole-home-wifi.md): the same image's hostapd on a radio of its own, in a
# namespace of its own (the satellite box), its bridge cabled into the router's LAN port (a veth: the VM's LAN
# NIC is moved aside), run by homework_image.satellite, paired with a code the owner makes in the web UI.

SATELLITE_CHANNEL = 1  # 2412 MHz: the router's radio is on 11 by now
SATELLITE_STATE = "/run/sat"


class Satellite:
    """The satellite box: its radio (an AP), its bridge onto the cable, its own address from the router."""

    def __init__(self, vm: RouterVm):
        self.vm, self.ns, self.radio = vm, "sat", f"wlan{SATELLITE_RADIO}"
        # The router's LAN port is where a satellite's cable goes; the VM's NIC there leaves for it (the
        # controller sees its access port go and come back under a new number, and rebuilds its rules).
        vm.run(
            f"mkdir -p {SATELLITE_STATE} && ip netns add {self.ns} && ip -n {self.ns} link set lo up"
            f" && iw phy phy{SATELLITE_RADIO} set netns name {self.ns}"
            " && ovs-vsctl del-port br-lan lan && ip link set lan down && ip link set lan name lan-nic"
            f" && ip link add lan type veth peer name uplink netns {self.ns} && ovs-vsctl add-port br-lan lan"
            " && ip link set lan up"
        )
        # The bridge keeps its cable's MAC (set, not taken from its ports): the radio joining it must not give
        # the box a new MAC, which the router would take for a newcomer's.
        self.mac = json.loads(vm.run(f"ip -n {self.ns} -j link show dev uplink"))[0]["address"]
        vm.run(
            f"ip -n {self.ns} link add br0 address {self.mac} type bridge"
            f" && ip -n {self.ns} link set uplink master br0 && ip -n {self.ns} link set uplink up"
            f" && ip -n {self.ns} link set br0 up"
        )

    def exec(self, command: str, timeout: float = 60, check: bool = True) -> str:
        return self.vm.run(f"ip netns exec {self.ns} {command}", timeout=timeout, check=check)

    def dhcp(self) -> str:
        """Its own address on its bridge, from the router (a newcomer, as any device)."""
        timeout = self.vm.paced(60)
        self.exec(
            f"timeout {int(timeout)} {DRIVE}/bin/dhclient -1 -cf /dev/null -sf {DRIVE}/bin/dhclient-script "
            f"-pf {SATELLITE_STATE}/dhclient.pid -lf {SATELLITE_STATE}/dhclient.leases br0",
            timeout=timeout + 30,
        )
        [addresses] = json.loads(self.vm.run(f"ip -n {self.ns} -j -4 addr show dev br0"))
        return addresses["addr_info"][0]["local"]

    def pair(self, code: str) -> None:
        """homework-satellite, as the box would run it, given the code the owner's web UI showed."""
        self.vm.run(
            f"setsid -f ip netns exec {self.ns} /usr/lib/homework/venv/bin/python -m homework_image.satellite"
            f" --router http://10.2.0.1 --code {shlex.quote(code)} --name Landing --radio {self.radio}"
            f" --bridge br0 --channel {SATELLITE_CHANNEL} --state {SATELLITE_STATE}/state --run {SATELLITE_STATE}/run"
            f" > {SATELLITE_STATE}/agent.log 2>&1 < /dev/null"
        )

    def log(self) -> str:
        return self.vm.run(f"cat {SATELLITE_STATE}/agent.log", check=False)

    def keys_seen(self, mac: str) -> str:
        """What its hostapd says of the station, and its key file's key ids and MACs (not the passphrases)."""
        sta = self.hostapd("sta", mac) if self.serving() else "(not serving)"
        keys = self.vm.run(f"cut -d' ' -f1,2 {SATELLITE_STATE}/state/hostapd.wpa_psk", check=False)
        return f"\nSTA {mac}:\n{sta}\nkey file (key id, MAC):\n{keys}"

    def diagnosis(self) -> str:
        """Its agent's log, and its addresses and routes (the agent says only that the router did not answer)."""
        return self.log() + self.exec("ip -4 addr show dev br0; ip -4 route", check=False)

    def hostapd(self, *words: str) -> str:
        ctrl = f"{SATELLITE_STATE}/run/hostapd"
        return self.exec(f"hostapd_cli -p {ctrl} -i {self.radio} {' '.join(map(shlex.quote, words))}")

    def serving(self) -> bool:
        try:
            return "state=ENABLED" in self.hostapd("status")
        except VmError:
            return False

    def bssid(self) -> str:
        return json.loads(self.vm.run(f"ip -n {self.ns} -j link show dev {self.radio}"))[0]["address"]


def access_port(vm: RouterVm, mac: str) -> object:
    for device in json_in(vm.run("curl -s http://127.0.0.1:8081/ws.v1/status")):
        if device.get("mac") == mac:
            return device.get("access_port")
    return None


def ofport(vm: RouterVm, name: str) -> int:
    return int(vm.run(f"ovs-vsctl get interface {name} ofport").strip())


@pytest.fixture(scope="module")
def satellite(router, guest_passphrase, owner) -> Satellite:
    box = Satellite(router)
    box.dhcp()
    assert device_state(router, box.mac) == "pending"  # a newcomer until the household pairs it
    status, doc = owner.call("POST", "/api/satellite-codes")
    assert status == 201, doc
    started = time.monotonic()
    box.pair(doc["code"])
    wait_until("the satellite to serve the network", box.serving, router.paced(180), 2, hint=box.diagnosis)
    TIMINGS["satellite_pairing_to_serving_s"] = round(time.monotonic() - started, 1)
    print(f"\nthe satellite, pairing to serving: {TIMINGS['satellite_pairing_to_serving_s']} s")
    return box


@pytest.fixture(scope="module")
def roamer(router, satellite) -> Station:
    return Station(router, SATELLITE_STATION)


def test_a_satellite_paired_with_a_code_serves_the_routers_network_on_its_own_radio(router, satellite):
    assert device_state(router, satellite.mac) == "permitted"  # the owner's code let it in
    conf = router.run(f"cat {SATELLITE_STATE}/run/hostapd.conf")
    assert "ssid=Homework" in conf and "bridge=br0" in conf and "ap_isolate=1" in conf
    assert f"channel={SATELLITE_CHANNEL}" in satellite.hostapd("status").splitlines()
    assert access_port(router, satellite.mac) == ofport(router, "lan")


def test_a_station_on_the_satellite_is_held_back_until_permitted_then_reaches_the_internet(
    router, satellite, roamer, guest_passphrase, owner
):
    roamer.join(f"bssid={satellite.bssid()}\n {wpa2(guest_passphrase)}")
    roamer.wait_connected(120)
    assert "[AUTHORIZED]" in satellite.hostapd("sta", roamer.mac)
    roamer.dhcp(60)
    assert device_state(router, roamer.mac) == "pending"
    assert roamer.fetch() == "000"  # held back at the router's switch, as on the router's own radio
    status, doc = owner.call("POST", f"/api/devices/{roamer.mac}/permit")
    assert status == 200, doc
    roamer.dhcp(60)
    wait_until("a page through the NAT", lambda: roamer.fetch() == "200", router.paced(30), 1)
    assert access_port(router, roamer.mac) == ofport(router, "lan")
    # The board names the access point it is on and shows its signal there (the satellite reports its links).
    wait_until(
        "the board to show the station's signal at the satellite",
        lambda: on_the_board(owner, roamer.mac) == ("Landing", True),
        router.paced(60),
        2,
        hint=satellite.log,
    )


def on_the_board(owner, mac: str) -> tuple[object, bool]:
    """(the access point the board names for the device, whether it shows a signal)."""
    status, doc = owner.call("GET", "/api/devices")
    device = next((d for d in doc.get("devices", []) if d.get("mac") == mac), {}) if status == 200 else {}
    return device.get("access_point"), device.get("rssi") is not None


ROAMS = 20  # each way ten times, as issue 37 asks
DOWNLOAD_RATE = 64 * 1024  # bytes/s: a download that lasts through every roam


def wpa_cli(station: Station, *words: str) -> str:
    return station.exec(f"{DRIVE}/bin/wpa_cli -p {station.dir}/ctrl -i {station.ifname} {' '.join(words)}")


def on_bssid(station: Station, bssid: str) -> bool:
    status = dict(line.split("=", 1) for line in wpa_cli(station, "status").splitlines() if "=" in line)
    return status.get("bssid") == bssid and status.get("wpa_state") == "COMPLETED"


def last_reply(station: Station) -> float:
    """When the station's running `ping -D` last had a reply (its timestamp, the VM's clock; 0: none yet)."""
    replies = re.findall(r"^\[(\d+\.\d+)\].*bytes from", station.exec(f"tail -n 5 {station.dir}/ping.log"), re.M)
    return float(replies[-1]) if replies else 0.0


def holds(router: RouterVm, satellite: Satellite, bssid: str, mac: str) -> bool:
    """The access point `bssid` (the router's radio or the satellite's) holds the station's association."""
    answer = satellite.hostapd("sta", mac) if bssid == satellite.bssid() else hostapd(router, "sta", mac)
    return "[AUTHORIZED]" in answer


def ping_gaps_ms(ping_output: str) -> list[float]:
    """The gaps between successive replies of `ping -D` (its timestamps), in milliseconds."""
    stamps = [float(t) for t in re.findall(r"^\[(\d+\.\d+)\].*bytes from", ping_output, re.M)]
    return [round((b - a) * 1000, 1) for a, b in zip(stamps, stamps[1:], strict=False)]


def test_a_station_roams_between_the_router_and_the_satellite_and_stays_itself(
    router, net, satellite, roamer, guest_passphrase
):
    """The access point that authenticated it says where it is: at each roam its rules follow it to that
    access port, with its address, its decisions and no clone alarm; a download from the internet goes on
    through every roam, and a ping every 10 ms shows the gap."""
    address = roamer.address()
    [default] = json.loads(router.run(f"ip -n {roamer.ns} -j route show default"))
    roamer.join(wpa2(guest_passphrase))  # either access point now: no BSSID named
    roamer.wait_connected(120)
    router_bssid = router.run("cat /sys/class/net/wlan0/address").strip()
    ports = {router_bssid: ofport(router, "wlan0"), satellite.bssid(): ofport(router, "lan")}
    wpa_cli(roamer, "scan")
    time.sleep(5)
    roamer.dhcp(60)
    assert roamer.address() == address  # its /30, whichever access point it joined
    ping = f"env LD_LIBRARY_PATH={DRIVE}/lib {DRIVE}/bin/ping -D -i 0.01 {default['gateway']}"
    roamer.detach(ping, f"{roamer.dir}/ping.log")
    with (net.state / "www" / "big.bin").open("wb") as big:
        big.truncate(1 << 30)  # sparse: more than the roams take at DOWNLOAD_RATE
    download = f"{roamer.dir}/big.part"
    fetch = f"curl -sS --limit-rate {DOWNLOAD_RATE} -o {download} http://{WWW_IP}/big.bin"
    roamer.detach(f"sh -c {shlex.quote(fetch + '; echo curl exited $?')}", f"{download}.log")
    wait_until("the download to begin", lambda: int(router.run(f"stat -c %s {download} 2>/dev/null || echo 0")), 30, 1)
    here = next(b for b in ports if on_bssid(roamer, b))
    size_before_roams, roams_began = int(router.run(f"stat -c %s {download}")), time.monotonic()
    began: list[tuple[float, str]] = []
    for _ in range(ROAMS):
        there = next(b for b in ports if b != here)
        began.append((float(router.run("date +%s.%N")), "satellite" if there == satellite.bssid() else "router"))
        wpa_cli(roamer, "roam", there)
        wait_until(f"the roam to {there}", lambda: on_bssid(roamer, there), router.paced(60), 0.5)  # noqa: B023
        connected = float(router.run("date +%s.%N"))
        wait_until(
            "the station's rules to follow it",
            lambda: access_port(router, roamer.mac) == ports[there],  # noqa: B023
            router.paced(30),
            0.5,
            hint=lambda: satellite.diagnosis() + satellite.keys_seen(roamer.mac),
        )
        # As a household's roams go, minutes apart: its traffic goes on there, and the access point it left
        # forgets it (`AuthenticatorForget`; a satellite at its next links report) before it roams again.
        wait_until(
            "the ping to be answered there",
            lambda: last_reply(roamer) > connected,  # noqa: B023
            router.paced(30),
            0.5,
        )
        wait_until(
            "the access point it left to forget it",
            lambda: not holds(router, satellite, here, roamer.mac),  # noqa: B023
            router.paced(30),
            0.5,
        )
        here = there
    roamer.exec(f"pkill -f '{DRIVE}/bin/ping'", check=False)
    pinged = router.run(f"cat {roamer.dir}/ping.log")
    assert len(ping_gaps_ms(pinged)) > ROAMS, pinged[-1500:]
    # Each roam's hops, from the roam's start: the station's connection, the satellite's word to the router
    # answered, the ping's longest gap while it lasted (begun before its start, or running into the next roam's).
    wpa_log = roamer.log()
    hops = roam_hops(began, pinged, wpa_log, satellite.log(), roamer.mac)
    TIMINGS["roam_hops"] = hops
    for hop in hops:
        print(f"roam to the {hop['to']}: {hop}")
    gaps = sorted(hop["gap_ms"] for hop in hops)
    TIMINGS["roam_gap_ms_median"], TIMINGS["roam_gap_ms_max"] = gaps[len(gaps) // 2], gaps[-1]
    print(f"\nroam gaps without 802.11r (ms, software emulation), one per roam: {gaps}")
    for to in ("router", "satellite"):  # a return visit was about a second slower while the old one held it
        towards = sorted(hop["gap_ms"] for hop in hops if hop["to"] == to)
        TIMINGS[f"roam_gap_ms_median_to_the_{to}"] = towards[len(towards) // 2] if towards else None
    # An access point still holding the station's protected association from its last visit refuses it
    # "temporarily" (status 30) while it asks the old one (SA Query): how often the roams met that.
    TIMINGS["roam_refused_temporarily"] = wpa_log.count("status_code=30")
    print(f"associations refused temporarily during the roams: {TIMINGS['roam_refused_temporarily']}")
    # A station back at an access point that never heard it leave keeps its [AUTHORIZED] entry there through a
    # new handshake, in which hostapd's `STA` names the key id of its key list's first entry (another device's
    # own key) until message 2/4 (`hostapd_ctrl.handshake_under_way`): how often a join was asked in that
    # window (left for the handshake's end), and any join of the roamer told with a device's key (none should be).
    amid = keyid_anomalies(satellite.log(), roamer.mac)
    amid += keyid_anomalies(router.run("journalctl -b --no-pager -u homework-controller", check=False), roamer.mac)
    TIMINGS["roam_joins_asked_amid_a_handshake"] = sum("amid a new handshake" in line for line in amid)
    print(f"joins asked amid a new handshake, and joins told with a device's key: {len(amid)}")
    for line in amid:
        print(f"  {line}")
    # The download went on through the roams: curl still running (it writes its exit when it ends), and about
    # a third of its rate or more from the first roam to the last (each gap costs it a TCP backoff).
    size, roams_took = int(router.run(f"stat -c %s {download}")), time.monotonic() - roams_began
    assert "curl exited" not in router.run(f"cat {download}.log", check=False), "the download stopped"
    moved = size - size_before_roams
    TIMINGS["download_during_roams_bytes_per_s"] = round(moved / roams_took)
    print(f"the download during the roams: {moved / roams_took / 1024:.0f} KiB/s (limited to {DOWNLOAD_RATE // 1024})")
    assert moved > DOWNLOAD_RATE * roams_took / 3, f"{moved} bytes in {roams_took:.0f} s of roams: the download stalled"
    # How soon it goes on after the last roam (one run saw it stalled for more than 20 s: TCP's state is kept).
    resumed = time.monotonic()
    while int(router.run(f"stat -c %s {download}")) == size and time.monotonic() - resumed < router.paced(20):
        time.sleep(1)
    TIMINGS["download_on_again_after_the_last_roam_s"] = round(time.monotonic() - resumed, 1)
    if int(router.run(f"stat -c %s {download}")) == size:
        print("the download has not gone on 20 s after the last roam:\n" + roamer.exec("ss -tin", check=False))
    roamer.exec("pkill -f 'curl.*big[.]bin'", check=False)
    assert device_state(router, roamer.mac) == "permitted" and clone_suspected(router, roamer.mac) is None
    assert roamer.fetch() == "200"
    assert not [line for line in amid if "amid a new handshake" not in line], amid  # told with a device's key


def keyid_anomalies(log: str, mac: str) -> list[str]:
    """The log's lines where hostapd was asked of the guest station `mac` amid a new handshake (its key id not
    yet the key it proves), and where the satellite told the router it joined with a device's own key."""
    return [
        line.strip()
        for line in log.splitlines()
        if (f"{mac} is amid a new handshake" in line) or (f"{mac} joined (dev-" in line)
    ]


def roam_hops(began: list[tuple[float, str]], pinged: str, wpa_log: str, agent_log: str, mac: str) -> list[dict]:
    """For each roam (its start, in the VM's clock, and where to): ms from its start to wpa_supplicant's
    CTRL-EVENT-CONNECTED, to the satellite's log of the router's answer to its join, and the longest gap between
    two ping replies that overlaps the roam (until the next one starts: `gap_ms`), from its last reply before
    (`gap_from_ms`) to its first reply after (`replies_back_ms`), in ms from the roam's start."""
    replies = [float(t) for t in re.findall(r"^\[(\d+\.\d+)\].*bytes from", pinged, re.M)]
    connected = [float(t) for t in re.findall(r"^(\d+\.\d+): .*CTRL-EVENT-CONNECTED", wpa_log, re.M)]
    answered = [
        datetime.datetime.strptime(t, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=datetime.UTC).timestamp()
        for t in re.findall(
            rf"^(\S+ \S+) homework-satellite: {mac} joined .* ms after hostapd said it", agent_log, re.M
        )
    ]
    hops = []
    for (start, to), (end, _) in zip(began, [*began[1:], (float("inf"), "")], strict=True):
        gaps = [(b - a, a, b) for a, b in zip(replies, replies[1:], strict=False) if b > start and a < end]
        gap, before, back = max(gaps, default=(0.0, start, start))

        def after(times: list[float]) -> float | None:
            return next((round((t - start) * 1000) for t in times if start <= t < end), None)  # noqa: B023

        hops.append(
            {"to": to, "gap_ms": round(gap * 1000), "connected_ms": after(connected),
             "router_answered_ms": after(answered), "gap_from_ms": round((before - start) * 1000),
             "replies_back_ms": round((back - start) * 1000)}
        )  # fmt: skip
    return hops


def test_a_copy_of_a_permitted_devices_mac_on_the_satellite_is_flagged_and_gets_nothing(
    router, satellite, stations, guest_passphrase
):
    first, _, copier = stations  # first: permitted, with its own passphrase, on the router's radio
    assert first.fetch() == "200"
    own_mac = copier.mac
    copier.new_address(first.mac)
    try:
        copier.join(f"bssid={satellite.bssid()}\n {wpa2(guest_passphrase)}")
        wait_until("the copy to be flagged", lambda: clone_suspected(router, first.mac), router.paced(60), 1)
        assert copier.fetch() == "000"
        assert first.fetch() == "200"  # the device itself keeps working, on its own access point
        assert access_port(router, first.mac) == ofport(router, "wlan0")
    finally:
        copier.leave()
        copier.new_address(own_mac)


def test_a_blacklisted_station_cannot_complete_the_handshake_at_the_satellite_either(
    router, satellite, roamer, stations, guest_passphrase
):
    """The satellite's hostapd denies whom the router's denies: the deny list comes with the keys it reads."""
    roamer.join(f"bssid={satellite.bssid()}\n {wpa2(guest_passphrase)}")
    roamer.wait_connected(120)
    router.run(f"curl -s -X POST http://127.0.0.1:8081/ws.v1/blacklist/{roamer.mac}")
    wait_until(
        "the blacklisted station to be off the satellite's air",
        lambda: roamer.mac not in satellite.hostapd("all_sta"),
        router.paced(30),
        1,
        hint=satellite.log,
    )
    connected_before = roamer.log().count("CTRL-EVENT-CONNECTED")
    time.sleep(router.paced(20))
    assert roamer.log().count("CTRL-EVENT-CONNECTED") == connected_before, roamer.log()[-1500:]
    assert stations[0].fetch() == "200"  # the household's other devices keep their Wi-Fi
    router.run(f"curl -s -X POST http://127.0.0.1:8081/ws.v1/whitelist/{roamer.mac}")
    wait_until(
        "the station to join the satellite again",
        lambda: roamer.log().count("CTRL-EVENT-CONNECTED") > connected_before,
        router.paced(90),
        2,
        hint=lambda: roamer.log()[-1500:],
    )
