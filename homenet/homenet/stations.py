"""The emulated devices (stations): each a network namespace `hw-c-NAME` whose `wlan0` is on the air
(or on the cable to the router's wired access port), with real ISC dhclient, wpa_supplicant and curl
in it, and its radio link's quality (signal, retries) as the router's radio would see it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from . import services
from .net import ensure_ns, kill_all_in, netns_list, run
from .services import HomenetError
from .topology import CLIENT_NS_PREFIX, INTERNET_HOST, LAN_PORT, WLAN, Topology
from .wait import wait_until

CLIENT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,10}$")
MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


def mac_for(name: str) -> str:
    """Each device name gets the same locally administered MAC every time."""
    digest = hashlib.sha256(name.encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in digest[:5])


class Stations:
    """Add, drive and remove the emulated devices, by name. Their state (leases, radio settings, 802.1X
    identity) is under RUN/clients/NAME; `add_8021x_user` tells the authenticator of a new identity."""

    def __init__(self, run_dir: Path, topology: Topology, add_8021x_user: Callable[[str, str], None]):
        self.run_dir = run_dir
        self.topology = topology
        self.add_8021x_user = add_8021x_user

    def names(self) -> list[str]:
        return sorted(ns[len(CLIENT_NS_PREFIX) :] for ns in netns_list() if ns.startswith(CLIENT_NS_PREFIX))

    def add(
        self,
        name: str,
        mac: str | None = None,
        rssi: int = -50,
        retries: float = 0,
        dot1x: str | None = None,
        wired: bool = False,
    ) -> str:
        """A new device joins the air; returns its MAC. dot1x: IDENTITY:PASSWORD for 802.1X. wired: it is
        plugged into the router's wired access port instead (one device: the port is its cable)."""
        if not CLIENT_NAME_RE.match(name):
            raise HomenetError(f"client name {name!r}: use 1-11 of a-z, 0-9, '-' (starting with a letter or digit)")
        ns = CLIENT_NS_PREFIX + name
        if ns in netns_list():
            raise HomenetError(f"client {name} already exists")
        if not self.topology.is_built():
            raise HomenetError("homenet is not up: run `homenet up` first")
        mac = (mac or mac_for(name)).lower()
        if not MAC_RE.match(mac):
            raise HomenetError(f"not a MAC address: {mac}")
        # dhclient-script writes /etc/resolv.conf; inside `ip netns exec` that is this file.
        etc = Path("/etc/netns") / ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text("")
        state = self.state_dir(name)
        state.mkdir(parents=True, exist_ok=True)
        if wired and self.topology.lan_port_taken():
            raise HomenetError(f"the wired port {LAN_PORT} is taken: one device per cable")
        ensure_ns(ns)
        if wired:
            self.topology.plug_in(ns, mac)
            (state / "wired").touch()
            return mac
        self.topology.join_air(ns, _air_port(name), mac)
        (state / "radio.json").write_text(json.dumps({"rssi": rssi, "retries_per_s": retries}))
        if dot1x:
            self._add_8021x_identity(name, dot1x)
        return mac

    def _add_8021x_identity(self, name: str, dot1x: str) -> None:
        identity, _, password = dot1x.partition(":")
        if not identity or not password or '"' in dot1x:
            raise HomenetError("--8021x takes IDENTITY:PASSWORD (no double quotes)")
        (self.state_dir(name) / "8021x.json").write_text(json.dumps({"identity": identity, "password": password}))
        self.add_8021x_user(identity, password)

    def remove(self, name: str) -> None:
        ns = self._ns(name)
        mac = self.mac(name)
        kill_all_in(ns)
        if (self.state_dir(name) / "wired").exists():
            self.topology.unplug()
        else:
            self.topology.leave_air(_air_port(name), mac)
        run("ip", "netns", "delete", ns)
        shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        shutil.rmtree(self.state_dir(name), ignore_errors=True)

    def mac(self, name: str) -> str:
        return run("cat", f"/sys/class/net/{WLAN}/address", ns=self._ns(name)).strip()

    def exec(self, name: str, *cmd, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a command inside a device; CompletedProcess with text output."""
        argv = ["ip", "netns", "exec", self._ns(name), *map(str, cmd)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise HomenetError(
                f"in {name}: `{' '.join(map(str, cmd))}` failed ({proc.returncode}):\n" f"{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def spawn(self, name: str, *cmd, **popen_args) -> subprocess.Popen:
        """Start a command inside a device and return at once."""
        return subprocess.Popen(["ip", "netns", "exec", self._ns(name), *map(str, cmd)], **popen_args)

    # ---- its address: real ISC dhclient

    def dhcp(self, name: str, timeout: int = 20, host_name: str | None = None, vendor_class: str = "") -> str:
        """The real ISC dhclient gets a lease (and keeps renewing it); returns e.g. '10.2.0.6/30'.
        host_name: what it calls itself (option 12; default its client name): a phone back under a new
        private MAC still says its own name. vendor_class: option 60, as Android's client sends it."""
        ns, state = self._ns(name), self.state_dir(name)
        lease_file, pid_file, conf = state / "dhclient.leases", state / "dhclient.pid", state / "dhclient.conf"
        # Each device introduces itself by its own name, as real ones do (option 12).
        conf.write_text(
            f'send host-name "{host_name or name}";\n'
            + (f'send vendor-class-identifier "{vendor_class}";\n' if vendor_class else "")
            + "request subnet-mask, broadcast-address, routers, domain-name-servers;\n"
        )
        self._stop_dhclient(name)
        # The device re-joins, as after waking up: Debian's dhclient-script `ip addr add`s the
        # address it is given, which leaves an address it already holds with its old lifetime,
        # and the kernel would drop it when that runs out.
        run("ip", "-4", "addr", "flush", "dev", WLAN, ns=ns)
        proc = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "timeout",
                str(timeout),
                "dhclient",
                "-1",
                "-v",
                "-cf",
                conf,
                "-pf",
                pid_file,
                "-lf",
                lease_file,
                WLAN,
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise HomenetError(f"{name} got no lease: {proc.stderr.strip().splitlines()[-1:]}")
        address = self.address(name, with_prefix=True)
        if address is None:
            raise HomenetError(f"{name}: dhclient succeeded but wlan0 has no address")
        return address

    def release(self, name: str) -> None:
        state = self.state_dir(name)
        self._stop_dhclient(name)
        run(
            "dhclient",
            "-r",
            "-cf",
            state / "dhclient.conf",
            "-pf",
            state / "dhclient.pid",
            "-lf",
            state / "dhclient.leases",
            WLAN,
            ns=self._ns(name),
        )

    def _stop_dhclient(self, name: str) -> None:
        # One dhclient per device (two would fight over the interface). Not with `dhclient -x`:
        # with none running, that starts a DHCP exchange of its own. Wait until it is gone: its
        # exit runs dhclient-script, which would flush the address the next one configures.
        try:
            pid = int((self.state_dir(name) / "dhclient.pid").read_text())
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            return
        wait_until(f"{name}'s previous dhclient to exit", lambda: not services.pid_alive(pid), 10, 0.05)

    def address(self, name: str, with_prefix: bool = False) -> str | None:
        info = json.loads(run("ip", "-json", "-4", "addr", "show", "dev", WLAN, ns=self._ns(name)) or "[]")
        for a in info[0].get("addr_info", []) if info else []:
            return f"{a['local']}/{a['prefixlen']}" if with_prefix else a["local"]
        return None

    def lease_left(self, name: str) -> int:
        """Seconds left on the address dhclient configured (the kernel's valid_lft)."""
        out = self.exec(name, "ip", "-4", "-o", "addr", "show", "dev", WLAN).stdout
        found = re.findall(r"valid_lft (\d+)sec", out)
        if not found:
            raise HomenetError(f"{name} has no dynamic address: {out!r}")
        return int(found[0])

    def fetch(self, name: str, url: str = f"http://{INTERNET_HOST}/", timeout: float = 5) -> str:
        """The HTTP status a device gets for a page ('000' when nothing answers)."""
        proc = self.exec(
            name,
            "curl",
            "-sS",
            "-m",
            timeout,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            url,
            check=False,
            timeout=timeout + 10,
        )
        return proc.stdout.strip() or "000"

    # ---- its link: the radio's view of it, 802.1X

    def radio(self, name: str, rssi: int | None = None, retries: float | None = None) -> None:
        """How a device's radio link looks to the router: signal strength and retries per second."""
        path = self.state_dir(name) / "radio.json"
        settings = json.loads(path.read_text()) if path.exists() else {}
        if rssi is not None:
            settings["rssi"] = rssi
        if retries is not None:
            settings["retries_per_s"] = retries
        path.write_text(json.dumps(settings))

    def auth(self, name: str) -> None:
        """Real wpa_supplicant (-D wired) in the device: authenticate with its 802.1X identity."""
        state = self.state_dir(name)
        try:
            creds = json.loads((state / "8021x.json").read_text())
        except OSError:
            raise HomenetError(f"client {name} has no 802.1X identity (homenet client add --8021x ID:PW)") from None
        ctrl, conf, pidfile = state / "wpa", state / "wpa_supplicant.conf", state / "wpa_supplicant.pid"
        conf.write_text(
            f"ctrl_interface={ctrl}\nap_scan=0\nnetwork={{\n  key_mgmt=IEEE8021X\n  eap=MD5\n"
            f'  identity="{creds["identity"]}"\n  password="{creds["password"]}"\n  eapol_flags=0\n}}\n'
        )
        try:
            old = int(pidfile.read_text())
            os.kill(old, signal.SIGTERM)  # one supplicant per device: the new one starts over
            wait_until("the previous wpa_supplicant to stop", lambda: not services.pid_alive(old), 5)
        except (OSError, ValueError):
            pass
        run(
            "wpa_supplicant",
            "-B",
            "-D",
            "wired",
            "-i",
            WLAN,
            "-c",
            conf,
            "-P",
            pidfile,
            "-f",
            state / "wpa_supplicant.log",
            ns=self._ns(name),
        )

    def auth_status(self, name: str) -> str:
        return run("wpa_cli", "-p", self.state_dir(name) / "wpa", "-i", WLAN, "status", ns=self._ns(name), check=False)

    def status(self) -> list[dict]:
        return [
            {"name": name, "mac": self.mac(name), "ipv4": self.address(name, with_prefix=True)} for name in self.names()
        ]

    def _ns(self, name: str) -> str:
        ns = CLIENT_NS_PREFIX + name
        if ns not in netns_list():
            raise HomenetError(f"no client {name}")
        return ns

    def state_dir(self, name: str) -> Path:
        """Where its leases, radio settings and 802.1X identity are kept."""
        return self.run_dir / "clients" / name


def _air_port(name: str) -> str:
    """The station's port on the air (radio.py reads its counters)."""
    return f"c-{name}"
