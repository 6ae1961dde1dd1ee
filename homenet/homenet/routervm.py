"""The router image in qemu, with a WAN and a LAN around it, driven over its serial console.

Layout (every namespace of a network called NAME is NAME-*; nothing outside them is touched, so
networks of different names, each with its router, run side by side):

  netns NAME-vm:      qemu (KVM if it can, else software), taps tapwan/taplan, bridges brwan/brlan
  netns NAME-wan:     eth0 198.51.100.1 (dnsmasq: DHCP for the router's WAN, DNS for example.test,
                      router adverts for the WAN link) and 198.51.100.80 (HTTP: www.example.test);
                      2001:db8:ffff::1 (Kea: DHCPv6, delegating a /56 to the router, routed to it)
                      and 2001:db8:ffff::80 (HTTP: www6.example.test, IPv6 only)
  netns NAME-laptop…: eth0, a household device running the real ISC dhclient

The router's first NIC (PCI slot 3) is its WAN, the second (slot 4) its LAN.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from . import ipv6 as homenet_ipv6
from .wait import WaitTimeout, wait_until

WAN_IP, WWW_IP, WWW_HOST = "198.51.100.1", "198.51.100.80", "www.example.test"
APPS_DOMAIN = "apps.example.test"
# IPv6 as the emulated home has it: the WAN link's /64, a name with only an IPv6 address (so every IPv4
# fetch stays IPv4), the /56 the ISP delegates. The router's WAN address there is its own (SLAAC from
# the adverts); the prefix is routed to its link-local address, from its WAN NIC's MAC (EUI-64).
WAN6_PREFIX, WAN6_IP = homenet_ipv6.WAN6_PREFIX, homenet_ipv6.WAN6_INET_IP
WWW6_HOST, WWW6_IP = next(iter(homenet_ipv6.INET6_HOSTS.items()))
DELEGATED_PREFIX = homenet_ipv6.DELEGATED_PREFIX
ROUTER_WAN_MAC = "52:54:00:00:aa:01"
ROUTER_LAN_MAC = "52:54:00:00:bb:01"
ROUTER_WAN_LINK_LOCAL = "fe80::5054:ff:fe00:aa01"
OVMF_CODE, OVMF_VARS = Path("/usr/share/OVMF/OVMF_CODE_4M.fd"), Path("/usr/share/OVMF/OVMF_VARS_4M.fd")
PROMPT = re.compile(r"root@homework-router:[^\n]*# ")
KVM_PROBE_S = 30
# Power-on to the autologin shell of a story's first boot on a quiet machine of the project's kind
# (2 cores; KVM, or software emulation). Each router measures its own first boot and stretches every
# later wait by the ratio (never shrinks it): the same emulation ran three times slower on some
# machines of the same kind, and a fixed timeout is either too long to be useful or too short there.
REFERENCE_SHELL_S = {True: 30.0, False: 120.0}
# The longest any boot may take before its first shell whatever the machine: a boot that has not
# reached one by then is stuck, not slow.
FIRST_BOOT_LIMIT_S = 1800
# systemd-boot's kernel says "EFI stub"; GRUB says "Booting `TITLE'"; the initrd "Loading...".
BOOT_STARTED = re.compile(r"EFI stub|Booting `|Loading, please wait")
FIRMWARES = ("uefi", "bios")
# A boot that has stopped for good: no wait for anything else on its console can succeed.
BOOT_STOPPED = re.compile(r"You are in emergency mode|Kernel panic - not syncing|Give root password for maintenance")
# No echo, no kernel messages, no colours, pagers or bracketed paste between the markers.
QUIET_SHELL = (
    "stty -echo; dmesg -n 1; export SYSTEMD_COLORS=0 SYSTEMD_PAGER= PAGER=cat TERM=dumb; "
    "bind 'set enable-bracketed-paste off'"
)


class VmError(AssertionError):
    pass


def sh(
    *cmd: object, ns: str | None = None, check: bool = True, timeout: float = 60, input: str | None = None
) -> subprocess.CompletedProcess:
    argv = (["ip", "netns", "exec", ns] if ns else []) + [str(c) for c in cmd]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise VmError(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def netns_list() -> list[str]:
    out = sh("ip", "-json", "netns", "list", check=False).stdout.strip()
    return [n["name"] for n in json.loads(out)] if out else []


class Client:
    """A household device on the router's LAN: a namespace with the real ISC dhclient."""

    def __init__(self, name: str, mac: str, state: Path, ns: str):
        self.name, self.ns, self.mac, self.state = name, ns, mac, state / name

    def dhcp(self, timeout: float = 30, alive: Callable[[], None] | None = None) -> str:
        """A new lease (as after waking up); returns e.g. '10.2.0.6/30'. `alive` is called every second
        while waiting and raises to give up early (the router stopped booting, say)."""
        conf, lease, pid = self.state / "dhclient.conf", self.state / "dhclient.leases", self.state / "dhclient.pid"
        # Retry every second or two (not dhclient's growing backoff), so the time to a lease
        # is the router's, not the client's.
        conf.write_text(
            f'send host-name "{self.name}";\ninitial-interval 1;\nbackoff-cutoff 2;\n'
            f"timeout {int(timeout)};\n"
            "request subnet-mask, broadcast-address, routers, domain-name-servers;\n"
        )
        self.stop_dhclient()
        sh("ip", "-4", "addr", "flush", "dev", "eth0", ns=self.ns)
        argv = ["ip", "netns", "exec", self.ns, "timeout", str(int(timeout)), "dhclient", "-1", "-v"]
        argv += ["-cf", str(conf), "-pf", str(pid), "-lf", str(lease), "eth0"]
        # Its log to a file, not a pipe: it says a line every second or two, and a pipe nobody reads until it
        # exits fills up on a slow boot (64 KiB: about 15 minutes) and blocks it, lease or no lease.
        log = self.state / "dhclient.log"
        with log.open("w") as out, subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out) as proc:
            try:
                while proc.poll() is None:
                    if alive is not None:
                        alive()
                    try:
                        proc.wait(1)
                    except subprocess.TimeoutExpired:
                        pass
            except BaseException:
                proc.kill()
                raise
        if proc.returncode != 0:
            raise VmError(f"{self.name} got no lease in {timeout:g} s: {log.read_text().strip()[-300:]}")
        return self.address()

    def stop_dhclient(self) -> None:
        try:
            pid = int((self.state / "dhclient.pid").read_text())
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            return
        wait_until("the previous dhclient to exit", lambda: not Path(f"/proc/{pid}").exists(), 10, 0.05)

    def address(self) -> str:
        info = json.loads(sh("ip", "-json", "-4", "addr", "show", "dev", "eth0", ns=self.ns).stdout or "[]")
        for a in info[0].get("addr_info", []) if info else []:
            return f"{a['local']}/{a['prefixlen']}"
        raise VmError(f"{self.name} has no address")

    def lease_left(self) -> int:
        out = sh("ip", "-4", "-o", "addr", "show", "dev", "eth0", ns=self.ns).stdout
        found = re.findall(r"valid_lft (\d+)sec", out)
        if not found:
            raise VmError(f"{self.name} has no dynamic address: {out!r}")
        return int(found[0])

    def ipv6_addresses(self) -> list[str]:
        """The device's IPv6 addresses beyond its link (global and unique local) its kernel made by SLAAC
        and may use (duplicate-address detection done), e.g. ['2001:db8:100:1:0:ff:fe00:1/64']."""
        # Text, not -json: iproute2 6.1 ends an IPv6 address list with an empty object there.
        out = sh(
            "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "global", "-tentative", "-deprecated", ns=self.ns
        )
        return re.findall(r"inet6 (\S+)", out.stdout)

    def fetch(self, url: str = f"http://{WWW_HOST}/", timeout: float = 5, ipv6: bool = False) -> tuple[str, str]:
        """(HTTP status, body) a device gets for a page ('000' when nothing answers); over IPv6 only if asked."""
        proc = sh(
            "curl",
            *(["-6"] if ipv6 else []),
            "-sS",
            "-m",
            timeout,
            "-w",
            "\n%{http_code}",
            url,
            ns=self.ns,
            check=False,
            timeout=timeout + 10,
        )
        body, _, status = proc.stdout.rpartition("\n")
        return status.strip() or "000", body


class Network:
    def __init__(self, state: Path, name: str = "img"):
        self.state, self.name = state, name
        self.vm_ns, self.wan_ns = f"{name}-vm", f"{name}-wan"
        self.clients: dict[str, Client] = {}

    def up(self, clients: dict[str, str]) -> None:
        self.down()
        self.clients = {}
        self.state.mkdir(parents=True, exist_ok=True)
        for ns in (self.vm_ns, self.wan_ns):
            self._ns(ns)
        for tap, bridge in (("tapwan", "brwan"), ("taplan", "brlan")):
            sh("ip", "tuntap", "add", "dev", tap, "mode", "tap", ns=self.vm_ns)
            sh("ip", "link", "add", bridge, "type", "bridge", "stp_state", "0", ns=self.vm_ns)
            sh("ip", "link", "set", tap, "master", bridge, ns=self.vm_ns)
            for link in (tap, bridge):
                sh("ip", "link", "set", link, "up", ns=self.vm_ns)
        self._veth("vwan", "brwan", self.wan_ns, None)
        for ip in (WAN_IP, WWW_IP):
            sh("ip", "addr", "add", f"{ip}/24", "dev", "eth0", ns=self.wan_ns)
        for ip in (WAN6_IP, WWW6_IP):
            sh("ip", "-6", "addr", "add", f"{ip}/64", "dev", "eth0", "nodad", ns=self.wan_ns)
        sh("ip", "-6", "route", "add", DELEGATED_PREFIX, "via", ROUTER_WAN_LINK_LOCAL, "dev", "eth0", ns=self.wan_ns)
        www = self.state / "www"
        www.mkdir(exist_ok=True)
        (www / "index.html").write_text("<!doctype html><title>example.test</title><h1>Hello from the internet</h1>\n")
        (self.state / "dnsmasq.pid").unlink(missing_ok=True)  # one a killed run left would say it started
        dnsmasq = self._spawn(
            "dnsmasq",
            [
                "dnsmasq",
                "--keep-in-foreground",
                # Its own pid file: two stories' dnsmasqs starting at once both unlink the default
                # /run/dnsmasq.pid, and the second to create it exits ("File exists"): no WAN lease.
                f"--pid-file={self.state / 'dnsmasq.pid'}",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                f"--listen-address={WAN_IP}",
                "--interface=eth0",
                "--dhcp-range=198.51.100.100,198.51.100.150,255.255.255.0,1h",
                f"--dhcp-option=option:router,{WAN_IP}",
                f"--dhcp-option=option:dns-server,{WAN_IP}",
                f"--dhcp-leasefile={self.state / 'dnsmasq.leases'}",
                "--local=/example.test/",
                f"--host-record={WWW_HOST},{WWW_IP}",
                f"--host-record={WWW6_HOST},{WWW6_IP}",
                # Any name under apps.example.test is the web server too: the many names a household looks up.
                f"--address=/{APPS_DOMAIN}/{WWW_IP}",
                # The WAN link's adverts: the router's IPv6 default route (no DHCPv6 here: Kea's).
                "--enable-ra",
                f"--dhcp-range={WAN6_PREFIX.split('/')[0]},ra-only",
                "--log-facility=-",
                "--log-dhcp",
                "--log-queries",
            ],
            self.wan_ns,
        )
        for name, ip in (("http", WWW_IP), ("http6", WWW6_IP)):
            self._spawn(name, ["python3", "-m", "http.server", "--bind", ip, "--directory", www, "80"], self.wan_ns)
        # Without it the router gets no WAN lease, and every later step fails for a reason far from this one.
        self._started("dnsmasq", dnsmasq, lambda: (self.state / "dnsmasq.pid").exists())
        self._start_kea()
        for name, mac in clients.items():
            self.add_client(name, mac)
        for url in (f"http://{WWW_IP}/", f"http://[{WWW6_IP}]/"):
            wait_until(f"the web server at {url}", partial(self._serves, url), 20)

    def add_client(self, name: str, mac: str) -> Client:
        """One more household device on the LAN (at `up`, or later: a device that arrives while the router runs)."""
        client = Client(name, mac, self.state, f"{self.name}-{name}")
        client.state.mkdir(parents=True, exist_ok=True)
        etc = Path("/etc/netns") / client.ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text("")
        self._ns(client.ns)
        self._veth(f"vlan{len(self.clients)}", "brlan", client.ns, mac)
        # SLAAC from the controller's adverts (a new namespace's default, said here: the test relies on it).
        sh("sysctl", "-qw", "net.ipv6.conf.eth0.accept_ra=1", "net.ipv6.conf.eth0.autoconf=1", ns=client.ns)
        self.clients[name] = client
        return client

    def _serves(self, url: str) -> bool:
        return sh("curl", "-s", "-o", "/dev/null", url, ns=self.wan_ns, check=False).returncode == 0

    def _start_kea(self) -> None:
        """The ISP's DHCPv6 server delegating DELEGATED_PREFIX (homenet's configuration, on this eth0). Kea
        binds eth0's link-local address, which it cannot while that is in duplicate-address detection."""
        wait_until(
            "the WAN link's link-local address", lambda: homenet_ipv6.link_local_ready(self.wan_ns, "eth0"), 10, 0.1
        )
        conf = self.state / "kea-dhcp6.json"
        # Renewals as an ISP's, not every few seconds as the emulated home's renumbering tests need: each one
        # runs dhcpcd's hook on the router, and under software emulation that alone took a good part of a core.
        conf.write_text(homenet_ipv6.kea_config(DELEGATED_PREFIX, "eth0", renew_s=300, rebind_s=480))
        env = [f"KEA_PIDFILE_DIR={self.state}", f"KEA_LOCKFILE_DIR={self.state}"]
        kea = self._spawn("kea", ["env", *env, "kea-dhcp6", "-c", conf], self.wan_ns)
        self._started(
            "kea",
            kea,
            lambda: bool(sh("ss", "-Hlun", "sport", "=", ":547", ns=self.wan_ns, check=False).stdout.strip()),
        )

    def down(self) -> None:
        for ns in netns_list():
            if ns.startswith(f"{self.name}-"):
                for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                sh("ip", "netns", "delete", ns, check=False)
                shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)

    def _ns(self, ns: str) -> None:
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "set", "lo", "up", ns=ns)

    def _veth(self, near: str, bridge: str, ns: str, mac: str | None) -> None:
        cmd = ["ip", "link", "add", near, "type", "veth", "peer", "name", "eth0", "netns", ns]
        if mac:
            cmd[cmd.index("netns") : cmd.index("netns")] = ["address", mac]
        sh(*cmd, ns=self.vm_ns)
        sh("ip", "link", "set", near, "master", bridge, ns=self.vm_ns)
        sh("ip", "link", "set", near, "up", ns=self.vm_ns)
        sh("ethtool", "-K", "eth0", "tx", "off", ns=ns, check=False)
        sh("ip", "link", "set", "eth0", "up", ns=ns)

    def _spawn(self, name: str, argv: list, ns: str) -> subprocess.Popen:
        with open(self.state / f"{name}.log", "ab") as log:
            return subprocess.Popen(
                ["ip", "netns", "exec", ns, *map(str, argv)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def _started(self, name: str, proc: subprocess.Popen, ready: Callable[[], bool], timeout: float = 10) -> None:
        """Wait until a spawned service is ready; VmError with its log if it exits or takes too long."""
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (self.state / f"{name}.log").read_text(errors="replace")[-1500:]
                raise VmError(f"the emulated upstream's {name} did not start (exit {proc.poll()}):\n{log}")
            time.sleep(0.1)


@dataclass(frozen=True)
class SavedRouter:
    """A router's whole state saved in its qcow2 disk (`RouterVm.save`): another RouterVm on the same
    disk, drives and firmware resumes from it, at the pace the first one measured."""

    disk: Path
    drives: dict[str, Path]
    firmware: str
    uefi_vars: Path  # UEFI's variable store, saved in it with the rest (unused under BIOS)
    name: str
    kvm: bool
    pace: float
    paced_boot_s: float | None

    def resume(self, state: Path, netns: str) -> RouterVm:
        vm = RouterVm(self.disk, state, self.drives, netns, self.firmware, resume=self.name, uefi_vars=self.uefi_vars)
        vm.kvm, vm.pace, vm.paced_boot_s = self.kvm, self.pace, self.paced_boot_s
        return vm


# Routers saved by a story for a later one in the same test process (the radio story resumes the
# BIOS story's first boot, the satellite story the UEFI story's, each made with radios for it: a boot
# that is not a story's subject costs it nothing).
SAVED: dict[str, SavedRouter] = {}


def overlay(disk: Path) -> Path:
    """A qcow2 overlay on a raw disk image (written to instead of it, and able to hold saved states)."""
    out = disk.with_suffix(".qcow2")
    out.unlink(missing_ok=True)
    sh("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", disk, out)
    return out


# Why KVM did not run the firmware, once it has not in this process: later boots go straight to
# software emulation rather than spend KVM_PROBE_S each finding out again.
_KVM_FAILED: list[str] = []


def kvm_may_work() -> bool:
    """KVM only with a /dev/kvm we may use and the CPU's virtualisation extensions (vmx, svm).
    Some sandboxes offer /dev/kvm without them (a paravirtual KVM such as kvm_pvm), and that
    cannot run firmware: the first instruction it must emulate fails ("KVM internal error")."""
    if _KVM_FAILED or not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # no way to tell: the probe in RouterVm.start decides
    return bool(re.search(r"^flags\s*:.*\b(vmx|svm)\b", flags, re.M))


class RouterVm:
    """The router booted from `disk` with UEFI (OVMF) or legacy BIOS (SeaBIOS, qemu's default
    firmware), its serial console on a socket."""

    def __init__(
        self,
        disk: Path,
        state: Path,
        drives: dict[str, Path],
        netns: str,
        firmware: str = "uefi",
        resume: str | None = None,
        uefi_vars: Path | None = None,
    ):
        """disk: a raw image, or a qcow2 overlay (its name ends in .qcow2), which can hold saved states;
        resume: the name of a state saved in it (`save`) to resume from, rather than power on;
        uefi_vars: UEFI's variable store (a qcow2 file, so that a saved state holds it too), by default one of
        its own in `state`, made from the firmware's template at the first power-on."""
        if firmware not in FIRMWARES:
            raise ValueError(f"firmware is one of {FIRMWARES}, not {firmware!r}")
        self.disk, self.state, self.drives, self.netns, self.firmware = disk, state, drives, netns, firmware
        self.resume = self.resumed_from = resume
        self.vars = uefi_vars or state / "OVMF_VARS.qcow2"
        self.console_log = state / "console.log"
        self.sock_path = state / "serial.sock"
        self.monitor_path = state / "monitor.sock"
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.buffer = ""
        self.lock = threading.Lock()
        # Held while qemu is started, stopped or power-cycled after a guest reset.
        self.power = threading.RLock()
        self.power_cycles = 0
        self.failure: str | None = None
        self.commands = 0
        self.kvm = kvm_may_work()
        # How many times slower than REFERENCE_SHELL_S this router's first boot was (at least 1).
        self.pace = 1.0
        self.paced_boot_s: float | None = None
        self.powered_on: float | None = None
        # Its NICs' MACs (WAN, LAN): another box of the same image on the same wires needs its own.
        self.nic_macs = (ROUTER_WAN_MAC, ROUTER_LAN_MAC)

    def save(self, name: str) -> SavedRouter:
        """Save the running router's whole state (memory, devices, its disk as it is now) into its qcow2
        disk under `name`, for another RouterVm on the same disk, drives and firmware to resume from once
        this one is done with the disk (qemu holds it)."""
        if self.disk.suffix != ".qcow2":
            raise VmError(f"only a qcow2 disk holds a saved state, not {self.disk.name}")
        answer = self.monitor(f"savevm {name}", timeout=self.paced(300))
        listed = self.monitor("info snapshots")
        if "rror" in answer or name not in listed:
            raise VmError(f"qemu did not save the router's state {name!r}: {answer.strip()} {listed.strip()}")
        return SavedRouter(
            self.disk, dict(self.drives), self.firmware, self.vars, name, self.kvm, self.pace, self.paced_boot_s
        )

    def resumed(self, since: int = 0) -> None:
        """After resuming a state saved at a shell prompt (its console already quiet): a fresh prompt."""
        self.send("\n")
        self.expect(PROMPT, self.paced(60), since)

    def paced(self, seconds: float) -> float:
        """A wait sized for a quiet machine, stretched to this machine's measured speed."""
        return seconds * self.pace

    def boot_limit(self) -> float:
        """How long a boot may take to its shell: before the first boot is measured, FIRST_BOOT_LIMIT_S;
        after it, three times what it took (a rollback boots twice, a health check waits in between)."""
        return FIRST_BOOT_LIMIT_S if self.paced_boot_s is None else 3 * self.paced_boot_s

    # ---- power

    def start(self) -> float:
        """Power on; returns the time.monotonic() of power-on. Falls back to software
        emulation when KVM shows nothing on the console within KVM_PROBE_S."""
        powered_on = self.powered_on = self._launch()
        if self.kvm:
            since = self.mark()
            try:
                self.expect(r"EFI stub|Loading|systemd", KVM_PROBE_S, since)
            except VmError:
                self.kill()
                self.kvm = False
                _KVM_FAILED.append(self._qemu_log_tail())
                print(
                    f"KVM showed nothing in {KVM_PROBE_S} s ({self._qemu_log_tail()!r}): software emulation", flush=True
                )
                powered_on = self.powered_on = self._launch()
        return powered_on

    def _qemu_log_tail(self) -> str:
        try:
            return (self.state / "qemu.log").read_text(errors="replace").strip().splitlines()[-1]
        except (OSError, IndexError):
            return ""

    def _launch(self) -> float:
        with self.power:
            return self._launch_locked()

    def _launch_locked(self) -> float:
        firmware = []
        if self.firmware == "uefi":
            if not self.vars.exists():  # qcow2, not raw: qemu saves a state only if every writable drive can
                sh("qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", OVMF_VARS, self.vars)
            firmware = [
                "-drive",
                f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
                "-drive",
                f"if=pflash,format=qcow2,unit=1,file={self.vars}",
            ]
        self.sock_path.unlink(missing_ok=True)
        self.monitor_path.unlink(missing_ok=True)
        # Not `-cpu host`: nested KVM on these machines refuses some of the host's MSRs.
        # Software emulation gets one CPU: with two, on a shared 2-core host, a starved second vCPU
        # hung a boot in the kernel's first seconds (RCU stalls on CPU 1, nothing more, for minutes).
        accel = ["-machine", "q35,accel=kvm", "-smp", "2"] if self.kvm else ["-machine", "q35,accel=tcg", "-smp", "1"]
        argv = [
            "qemu-system-x86_64",
            *accel,
            "-m",
            "1024",
            "-nodefaults",
            "-display",
            "none",
            *firmware,
            "-drive",
            f"file={self.disk},format={'qcow2' if self.disk.suffix == '.qcow2' else 'raw'},if=none,id=root,"
            "cache=writeback",
            "-device",
            "virtio-blk-pci,drive=root,addr=0x5" + (",bootindex=0" if self.firmware == "bios" else ""),
            "-netdev",
            "tap,id=wan,ifname=tapwan,script=no,downscript=no",
            "-device",
            f"virtio-net-pci,netdev=wan,mac={self.nic_macs[0]},addr=0x3",
            "-netdev",
            "tap,id=lan,ifname=taplan,script=no,downscript=no",
            "-device",
            f"virtio-net-pci,netdev=lan,mac={self.nic_macs[1]},addr=0x4",
            "-chardev",
            f"socket,id=ser0,path={self.sock_path},server=on,wait=off,logfile={self.console_log}," "logappend=on",
            "-serial",
            "chardev:ser0",
            "-monitor",
            f"unix:{self.monitor_path},server=on,wait=off",
            # A guest reset makes qemu exit and _supervise powers it on again: every reboot is a
            # cold start. A warm reset once left OVMF silent for 44 minutes under software
            # emulation (no output at all after "Restarting system").
            "-no-reboot",
        ]
        if self.resume:
            argv += ["-loadvm", self.resume]
            self.resume = None  # once: a reset after it powers on from the disk as it then is
        for i, (name, path) in enumerate(self.drives.items()):
            argv += [
                "-drive",
                f"file={path},format=raw,if=none,id=d{i},readonly=on",
                "-device",
                f"virtio-blk-pci,drive=d{i},serial={name},addr={0x8 + i:#x}",
            ]
        with open(self.state / "qemu.log", "ab") as log:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.proc = proc
        powered_on = time.monotonic()
        self.sock = wait_until("qemu's serial socket", self._connect, 30, 0.1)
        reader = threading.Thread(target=self._read, args=(self.sock,), daemon=True)
        reader.start()
        threading.Thread(target=self._supervise, args=(proc, reader), daemon=True).start()
        return powered_on

    def _supervise(self, proc: subprocess.Popen, reader: threading.Thread) -> None:
        """qemu exits 0 when the guest resets (-no-reboot) or powers off: after a reset, power
        the router on again, as a board's reset line would. Any other exit is a failure every
        wait reports."""
        returncode = proc.wait()
        reader.join(10)  # the console's last words, read to its end
        with self.power:
            if self.proc is not proc:
                return  # killed on purpose, or already replaced
            if returncode != 0:
                self.failure = f"qemu exited ({returncode}): {self._qemu_log_tail()}"
                return
            if "reboot: Power down" in self.since(max(0, self.mark() - 500)):
                self.failure = "the router powered itself off"
                return
            self.power_cycles += 1
            try:
                self._launch_locked()
            except VmError as exc:
                self.failure = f"qemu did not power on again after a guest reset: {exc}"

    def _connect(self) -> socket.socket | None:
        if self.proc is not None and self.proc.poll() is not None:
            raise VmError(f"qemu exited ({self.proc.returncode}): {(self.state / 'qemu.log').read_text()[-2000:]}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(self.sock_path))
        except OSError:
            s.close()
            return None
        return s

    def _read(self, sock: socket.socket) -> None:
        """Until qemu exits (end of file) or kill() closes the socket."""
        with sock:
            while True:
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                with self.lock:
                    self.buffer += data.decode(errors="replace").replace("\r", "")

    def kill(self) -> None:
        """Pull the plug: qemu dies without the guest knowing."""
        with self.power:
            proc, self.proc = self.proc, None
            if proc is not None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=30)
            if self.sock is not None:
                self.sock.close()
                self.sock = None
            self.failure = None

    # ---- the console

    def mark(self) -> int:
        with self.lock:
            return len(self.buffer)

    def since(self, pos: int) -> str:
        with self.lock:
            return self.buffer[pos:]

    def expect(self, pattern: str | re.Pattern, timeout: float, since: int = 0) -> re.Match:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern

        def found():
            self.check_alive(since)
            return regex.search(self.since(since))

        try:
            return wait_until(f"{regex.pattern!r} on the console", found, timeout, 0.2)
        except (VmError, WaitTimeout) as exc:
            raise VmError(
                f"{exc}; last console lines:\n{self.since(since)[-1500:]}\n"
                f"qemu's own view:\n{self.monitor('info status')}{self.monitor('info registers')[:600]}"
            ) from None

    def check_alive(self, since: int) -> None:
        """VmError if qemu is not running, or the boot that started after `since` has stopped for good
        (emergency mode, a kernel panic): then the failure carries systemd's account of why."""
        if self.proc is None:
            raise VmError("qemu is not running")
        if self.failure:
            raise VmError(self.failure)
        stopped = BOOT_STOPPED.search(self.since(since))
        if stopped:
            raise VmError(f"the router stopped booting ({stopped.group(0)!r}):\n{self._emergency_diagnosis(since)}")

    def _emergency_diagnosis(self, since: int) -> str:
        """The emergency shell's view (the console opens one: SYSTEMD_SULOGIN_FORCE), else the console."""
        console = self.since(since)[-2500:]
        self.send("\n")  # sulogin's "Press Enter for maintenance"
        try:
            self.expect(PROMPT, 60, self.mark())
            self.run(QUIET_SHELL, timeout=60, diagnose=False)
            return (
                self.diagnosis()
                + "\n"
                + self.run("journalctl -b --no-pager -p warning -n 60", timeout=120, check=False, diagnose=False)
            )
        except VmError:
            return f"(no shell) last console lines:\n{console}"

    def monitor(self, command: str, timeout: float = 10) -> str:
        """One command on qemu's human monitor; its answer, or why there is none (for failure
        messages: where a silent guest is stuck)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(str(self.monitor_path))

                def up_to_prompt() -> bytes:
                    data = b""
                    while not data.endswith(b"(qemu) "):
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    return data

                up_to_prompt()  # the greeting
                s.sendall(f"{command}\n".encode())
                answer = up_to_prompt().decode(errors="replace").replace("\r", "").removesuffix("(qemu) ")
                return answer.partition("\n")[2]  # after the monitor's echo of the command
        except OSError as exc:
            return f"(no monitor: {exc})\n"

    def send(self, text: str) -> None:
        sock = self.sock
        if sock is None:
            raise VmError("qemu is not running")
        try:
            sock.sendall(text.encode())
        except OSError as exc:  # qemu ended under us: a reset, and _supervise is powering it on again
            raise VmError(f"the console went away: {exc}") from None

    def reboot(self) -> int:
        """`systemctl reboot` on the console; returns where the new boot's output begins (the
        old shell may still print a prompt on its way down)."""
        since = self.mark()
        self.send("systemctl reboot\n")
        return self.expect(BOOT_STARTED, self.paced(300), since).start() + since

    def wait_for_shell(self, since: int, timeout: float | None = None) -> None:
        """Wait for the autologin shell of a boot that started after `since`, quiet the console,
        and wait for the boot to finish. The first boot's time to its shell sets this router's pace."""
        self.expect(PROMPT, timeout or self.boot_limit(), since)
        self._measure_pace()
        self.run(QUIET_SHELL, timeout=60)
        self.wait_for_boot_jobs(timeout or self.boot_limit())

    def _measure_pace(self) -> None:
        if self.paced_boot_s is not None or self.powered_on is None:
            return
        took = time.monotonic() - self.powered_on
        self.paced_boot_s = took
        self.pace = max(1.0, took / REFERENCE_SHELL_S[self.kvm])
        print(f"\nfirst boot to a shell: {took:.1f} s; later waits x{self.pace:.2f}", flush=True)

    def wait_for_boot_jobs(self, timeout: float) -> None:
        """Until systemd has run every start job of this boot. The shell comes up long before:
        until then the boot's own console messages (the version banner, the health verdict) can
        land inside a command's output, and the output is no longer what the command printed.
        A boot whose jobs do not finish is a failure, with systemd's queue and journal to say why."""
        output = self.run("systemctl is-system-running --wait", timeout=timeout, check=False, paced=False)
        # Its last line: the boot's own console messages (the first-run banner) can come before it.
        state = (output.strip().splitlines() or [""])[-1].strip()
        if state not in ("running", "degraded"):
            raise VmError(f"the boot did not finish: systemd says {state!r}\n{self.diagnosis()}")

    def diagnosis(self) -> str:
        """What systemd is still doing and the journal's last words (for failure messages)."""
        try:
            return self.run(
                "systemctl list-jobs --no-pager; systemctl --failed --no-pager; journalctl -b --no-pager -n 40",
                timeout=120,
                check=False,
                diagnose=False,
            )
        except VmError as exc:
            return f"(no diagnosis: {exc})"

    def run(
        self, command: str, timeout: float = 60, check: bool = True, paced: bool = True, diagnose: bool = True
    ) -> str:
        """Run a shell command on the router's console; its output (stdout and stderr). The timeout
        is for a quiet machine and is stretched to this router's pace (unless paced=False). A command
        that times out is interrupted, and the failure says what systemd was doing."""
        self.commands += 1
        n = self.commands
        start = self.mark()
        # The markers are split in what is typed, so the echo of the line never matches them.
        self.send(f"echo '@@B''EGIN{n}@@'; {command} 2>&1; echo \"@@E\"\"ND{n} $?@@\"\n")
        try:
            m = self.expect(
                re.compile(rf"@@BEGIN{n}@@\n(.*?)@@END{n} (\d+)@@", re.S),
                self.paced(timeout) if paced else timeout,
                start,
            )
        except VmError as exc:
            if not diagnose or self.proc is None or self.failure:
                raise
            self.send("\x03")  # interrupt it, so the console takes the diagnosis
            raise VmError(f"{exc}\n\nsystemd's jobs, failed units and journal:\n{self.diagnosis()}") from None
        output, status = m.group(1), int(m.group(2))
        if check and status != 0:
            raise VmError(f"on the router, `{command}` failed ({status}):\n{output}")
        return output

    def boot_profile(self, units: list[str]) -> dict:
        """Where this boot's time went, from systemd in the router: the kernel's and userspace's share,
        multi-user.target, and when each of `units` became active (seconds since the kernel started),
        with `systemd-analyze blame` and `critical-chain` as text."""
        seconds = r"((?:\d+min )?[\d.]+m?s)"
        finished = self.run("systemd-analyze time", check=False)
        profile: dict = {
            part: _seconds(m.group(1))
            for part in ("firmware", "loader", "kernel", "initrd", "userspace")
            if (m := re.search(seconds + rf" \({part}\)", finished))
        }
        chain = self.run("systemd-analyze critical-chain --no-pager multi-user.target", check=False)
        if m := re.search(r"multi-user\.target @" + seconds, chain):
            profile["multi_user_s"] = _seconds(m.group(1))
        shown = self.run(
            f"systemctl show -p Id -p ActiveEnterTimestampMonotonic --no-pager {' '.join(units)}", check=False
        )
        for block in shown.strip().split("\n\n"):
            fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
            if fields.get("ActiveEnterTimestampMonotonic", "0").isdigit() and fields.get("Id"):
                profile.setdefault("active_s", {})[fields["Id"]] = int(fields["ActiveEnterTimestampMonotonic"]) / 1e6
        blame = self.run("systemd-analyze blame --no-pager | head -20", check=False)
        profile["text"] = f"{finished}\n{chain}\n{blame}"
        return profile

    def slot_and_version(self, diagnose: bool = True) -> tuple[str, str]:
        cmdline = self.run("cat /proc/cmdline", diagnose=diagnose)
        slot = re.search(r"homework\.slot=([ab])", cmdline)
        if not slot:
            raise VmError(f"no homework.slot in {cmdline!r}")
        return slot.group(1), self.run("cat /usr/share/homework/version", diagnose=diagnose).strip()


def _seconds(text: str) -> float:
    """systemd's '5min 34.606s', '15.293s' or '812ms' in seconds."""
    total = 0.0
    for number, unit in re.findall(r"([\d.]+)(min|ms|s)", text):
        total += float(number) * {"min": 60, "s": 1, "ms": 0.001}[unit]
    return round(total, 3)
