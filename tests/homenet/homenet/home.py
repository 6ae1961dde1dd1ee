"""The emulated home around a Homework router, on one Linux machine.

Layout (every name prefixed, so `down` finds and removes them, even after a crash):

  client netns hw-c-NAME (wlan0) ─┐
  client netns hw-c-NAME (wlan0) ─┤ netns hw-air: Linux bridge "air", client ports isolated
                                  └─ air-up ══ wlan0 ─ OVS br-lan (netdev, OF1.3, fail-secure) ─ controller
  client netns hw-c-NAME (wlan0) ══ lan1 ─ OVS br-lan: a wired access port, one device on its cable
                                   (`add(wired=True)`), gated and isolated as the air is
  router = this (root) namespace: br-lan holds each /30's gateway; NAT out of hw-wan
  hw-wan ══ the ISP (isp.py: a sliced aggregation switch, and household B beside this one)
         ══ eth0 in netns hw-inet: DNS (dnsmasq) for example.test, HTTP on :80, iperf3

The air behaves like a radio: stations reach each other only through the router (WPA2's
client isolation), a station never receives its own frames back (802.11 stations drop
group frames carrying their own source address), and the air never learns a station's
address from frames the router sends into it (an access point learns its stations from
their association, not from its distribution side).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from homework_controller.radio import radio_settings

from . import ipv6, services
from .isp import ISP
from .net import ensure_ns, kill_all_in, link_exists, netns_list, run, veth
from .services import HomenetError, Processes
from .wait import wait_until

REPO = Path(__file__).resolve().parents[3]
RUN = Path(os.environ.get("HOMENET_RUN", "/run/homenet"))
PYTHON = Path(os.environ.get("HOMENET_PYTHON", sys.executable))
HWDB_BIN = REPO / "hwdb" / "target" / "release" / "hwdb"

NS_AIR, NS_INET, CLIENT_NS_PREFIX = "hw-air", "hw-inet", "hw-c-"
BRIDGE, WLAN, AIR_UP, AIR_BRIDGE, WAN = "br-lan", "wlan0", "air-up", "air", "hw-wan"
LAN_PORT = "lan1"  # the router's wired access port (a device's cable), beside the radio's
ROUTER_MAC = "02:48:57:00:00:01"
WAN_ROUTER_IP, WAN_INET_IP = "198.51.100.2", "198.51.100.1"
INET_DNS_IP = "198.51.100.53"
INET_HOSTS = {
    "www.example.test": "198.51.100.80",
    "games.example.test": "198.51.100.81",
    "video.example.test": "198.51.100.82",
    # An OS's captive-portal probe (Android's http://connectivitycheck.gstatic.com/generate_204), answered
    # 204 by the emulated internet's web server, as the real one does.
    "connectivitycheck.gstatic.com": "198.51.100.80",
}
INTERNET_HOST, INTERNET_IP = "www.example.test", INET_HOSTS["www.example.test"]
API = "http://127.0.0.1:8081/ws.v1"
WEBUI_URL = "http://127.0.0.1:8080"
# The router's own address on the LAN, where devices reach the web UI (10.2.0.0/30 is the
# router's; every device's /30 routes to it through the router).
ROUTER_LAN_IP = "10.2.0.1"
GUEST_PASSPHRASE = "correct horse battery staple"
NFT_TABLE, NFT_WLAN_TABLE, NFT_AIR_TABLE = "homenet", "homenet_wlan", "air"
CLIENT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,10}$")
MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
# The emulated broadband line: 20 Mbit/s up, 30 down. The router is told these rates and shapes a
# little below them; the veths themselves are faster, so the router's shaper is where the queue
# forms, as SQM arranges on a real line. The downlink's queue is capped by the emulation itself:
# OVS's userspace datapath sends to the wireless port through a packet socket whose send buffer
# (~200 KB) counts what waits in the shaper, so at most ~25 ms queue at 50 Mbit/s, ~40 ms at 30
# (a router's kernel datapath has no such cap). 30 keeps the Normal class's delay measurable.
LINE_UP_KBIT, LINE_DOWN_KBIT = 20_000, 30_000
EMULATED_PARTS = (
    "radio",
    "inet-dns",
    "inet-http",
    "inet-iperf",
    "inet-iperf-b",
    "inet-iperf6",
    "isp-b-router",
    "isp-b-hwdb",
    "isp-slicer",
    "isp-dhcp6",
)
# iperf3 servers run one test at a time: household B's downloads have a server of their own, and
# bulk transfers over IPv6 one on the internet's IPv6 address.
IPERF_PORT, NEIGHBOUR_IPERF_PORT, IPERF6_PORT = 5201, 5202, 5203


def ovs_running() -> bool:
    return subprocess.run(["ovs-vsctl", "--timeout=3", "show"], capture_output=True).returncode == 0


def mac_for(name: str) -> str:
    """Each device name gets the same locally administered MAC every time."""
    digest = hashlib.sha256(name.encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in digest[:5])


class Home:
    """The emulated home: bring it up or down, add devices, act in them, ask the router."""

    def __init__(self, run_dir: Path = RUN):
        self.run_dir = run_dir
        self.processes = Processes(run_dir)
        self.station_dump = run_dir / "station-dump.txt"
        self.isp = ISP(
            run_dir,
            self.processes,
            PYTHON,
            HWDB_BIN,
            a_address=WAN_ROUTER_IP,
            a_wan=WAN,
            inet_ns=NS_INET,
            upstream_dns=INET_DNS_IP,
        )
        self.services = services.load(
            {
                "PYTHON": PYTHON,
                "HWDB_BIN": HWDB_BIN,
                "STATE": run_dir,
                "RUN": run_dir,
                "LAN_IFACE": BRIDGE,
                "WLAN_PORT": WLAN,
                "ACCESS_PORTS": f"{WLAN},{LAN_PORT}",
                "UPSTREAM_DNS": INET_DNS_IP,
                "STATIONS": f"file:{self.station_dump}",
                "LAN_ADDRESS": ROUTER_LAN_IP,
                "HOSTAPD_IFACE": BRIDGE,
                "WAN_IFACE": WAN,
                "LATENCY_TARGET": f"http://{INTERNET_IP}",
                "WIFI_SSID": "Homework",
                # The emulated air is a bridge with 802.1X (driver=wired): the controller issues devices'
                # own passphrases and keeps the radio's settings as on a router, but no radio uses them.
                "WIFI_PSK_FILE": run_dir / "hostapd.wpa_psk",
                "RADIO_SETTINGS": run_dir / "radio.conf",
                "UPLINK_KBIT": LINE_UP_KBIT,
                "DOWNLINK_KBIT": LINE_DOWN_KBIT,
                # The web UI hands uploads over here; the emulated home is not an image and has no
                # installer to read them (image/tests boots the real one).
                "UPDATES": run_dir / "updates",
                "SETUP_CODE_FILE": "",
                "SERVICE_FILES": run_dir,  # dhcpcd's configuration and hook, as the image's /usr/lib/homework
                **self.isp.slice_settings(),
            }
        )

    # ---- up / down

    def up(self) -> None:
        _require_root()
        if not HWDB_BIN.exists() or not (REPO / "webui" / "frontend" / "dist" / "index.html").exists():
            raise HomenetError("hwdb or the web UI is not built: run `make deps` first")
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self._start_ovs()
        self._build_air()
        self.isp.build()
        self._build_internet()
        self._build_router()
        ipv6.build_router(self.run_dir, BRIDGE, WAN, self.run_dir)
        # The router's prefix-delegation client is services.toml's wan-pd, started before the others: the ISP
        # registers what it delegated before the controller dials the slice.
        ipv6.start_prefix_delegation(self.processes, self.run_dir, WAN, self.run_dir, lambda: self.start("wan-pd"))
        self.processes.start("radio", [PYTHON, "-m", "homenet", "radio-loop"])
        self._render_hostapd_conf()
        self._first_radio_settings()
        run("ip", "addr", "replace", f"{ROUTER_LAN_IP}/32", "dev", BRIDGE)  # where devices reach the web UI
        # Before the router's controller, which connects to its slice at once; the ISP registers what its
        # DHCPv6 server delegated to the household.
        self.isp.start(a_delegated=ipv6.delegated_now(self.run_dir))
        for name in services.start_order(self.services):
            self.start(name)

    def start(self, name: str) -> None:
        """Start one router service as deploy/services.toml defines it, and wait until it is ready."""
        service = self.services[name]
        self.processes.start(name, service.command, cwd=REPO, nice=service.nice)
        wait_until(
            f"{name} to be ready",
            lambda: services.is_ready(service),
            service.ready_timeout_s,
            hint=lambda: self.processes.log_tail(name),
        )

    def restart(self, name: str) -> None:
        self.processes.stop(name)
        self.start(name)

    def fresh_webui(self) -> None:
        """The web UI as a household first meets it: no accounts yet, a new setup code (for tests that
        begin at the first visit, whichever test made an owner before them)."""
        self.processes.stop("webui")
        shutil.rmtree(self.run_dir / "webui", ignore_errors=True)
        self.start("webui")

    def down(self) -> None:
        _require_root()
        for name in [*reversed(services.start_order(self.services)), *EMULATED_PARTS]:
            self.processes.stop(name)
        for ns in netns_list():
            if ns.startswith("hw-"):
                kill_all_in(ns)
                run("ip", "netns", "delete", ns, check=False)
                shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        if ovs_running():
            run("ovs-vsctl", "--if-exists", "del-br", BRIDGE, check=False)
        for link in (WLAN, LAN_PORT, WAN):
            if link_exists(link):
                run("ip", "link", "delete", link, check=False)
        # homework_dns, homework_portal: the controller's DNS redirect and its port 80 to the web UI
        controllers = (("ip", "homework_dns"), ("ip6", "homework_dns"), ("ip", "homework_portal"))
        for family, table in (("ip", NFT_TABLE), ("netdev", NFT_WLAN_TABLE), *controllers):
            run("nft", "delete", "table", family, table, check=False)
        orig = self.run_dir / "ip_forward.orig"
        if orig.exists():
            Path("/proc/sys/net/ipv4/ip_forward").write_text(orig.read_text())
        ipv6.tear_down(self.run_dir)
        if (self.run_dir / "ovs-started-by-homenet").exists():
            run("/usr/share/openvswitch/scripts/ovs-ctl", "stop", check=False)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def _start_ovs(self) -> None:
        if ovs_running():
            return
        run("/usr/share/openvswitch/scripts/ovs-ctl", "start", "--system-id=random", "--no-monitor")
        (self.run_dir / "ovs-started-by-homenet").touch()
        wait_until("Open vSwitch", ovs_running, 20)

    def _build_air(self) -> None:
        ensure_ns(NS_AIR)
        if not link_exists(AIR_BRIDGE, NS_AIR):
            # group_fwd_mask 8 lets EAPOL (01:80:c2:00:00:03) cross the bridge, as it crosses a real AP.
            run(
                "ip",
                "link",
                "add",
                AIR_BRIDGE,
                "type",
                "bridge",
                "stp_state",
                "0",
                "group_fwd_mask",
                "8",
                "mcast_snooping",
                "0",
                ns=NS_AIR,
            )
            run("ip", "link", "set", AIR_BRIDGE, "up", ns=NS_AIR)
            # A station never hears its own frames back: the set holds each station's port and MAC.
            run(
                "nft",
                "-f",
                "-",
                ns=NS_AIR,
                input=f"""
table bridge {NFT_AIR_TABLE} {{
  set own {{ type ifname . ether_addr; }}
  chain forward {{
    type filter hook forward priority filter; policy accept;
    oifname . ether saddr @own drop
  }}
}}
""",
            )
        veth(WLAN, AIR_UP, b_ns=NS_AIR)
        run("ip", "link", "set", AIR_UP, "master", AIR_BRIDGE, ns=NS_AIR)
        # What the router sends never teaches the air where a station is.
        run("bridge", "link", "set", "dev", AIR_UP, "learning", "off", ns=NS_AIR)

    def _build_internet(self) -> None:
        # (the links themselves are the ISP's: self.isp.build)
        run("ip", "addr", "replace", f"{WAN_ROUTER_IP}/24", "dev", WAN)
        for ip in [WAN_INET_IP, INET_DNS_IP, *INET_HOSTS.values()]:
            run("ip", "addr", "replace", f"{ip}/24", "dev", "eth0", ns=NS_INET)
        www = self.run_dir / "www"
        www.mkdir(exist_ok=True)
        (www / "index.html").write_text("<!doctype html><title>example.test</title><h1>Hello from the internet</h1>\n")
        (www / "big.bin").write_bytes(bytes(1_000_000))  # for tests that need a download in progress
        args = [
            "dnsmasq",
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            f"--listen-address={INET_DNS_IP}",
            "--local=/example.test/",
            "--log-queries",
            "--log-facility=-",
            f"--pid-file={self.run_dir / 'dnsmasq.real.pid'}",
        ]
        args += [f"--host-record={name},{ip}" for name, ip in INET_HOSTS.items()]
        args += ipv6.dnsmasq_records()
        ipv6.build_internet(WAN, NS_INET)
        self.processes.start("inet-dns", args, ns=NS_INET)
        self.processes.start("inet-http", [PYTHON, "-m", "homenet.web", "--directory", www], ns=NS_INET)
        # Bulk transfers that saturate the line, for the priority tests.
        self.processes.start(
            "inet-iperf", ["iperf3", "--server", "--bind", WAN_INET_IP, "--port", IPERF_PORT], ns=NS_INET
        )
        self.processes.start(
            "inet-iperf-b", ["iperf3", "--server", "--bind", WAN_INET_IP, "--port", NEIGHBOUR_IPERF_PORT], ns=NS_INET
        )
        self.processes.start(
            "inet-iperf6", ["iperf3", "--server", "--bind", ipv6.WAN6_INET_IP, "--port", IPERF6_PORT], ns=NS_INET
        )

    def _build_router(self) -> None:
        orig = self.run_dir / "ip_forward.orig"
        if not orig.exists():
            orig.write_text(Path("/proc/sys/net/ipv4/ip_forward").read_text())
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
        if not run("nft", "list", "table", "ip", NFT_TABLE, check=False):
            run(
                "nft",
                "-f",
                "-",
                input=f"""
table ip {NFT_TABLE} {{
  chain postrouting {{
    type nat hook postrouting priority srcnat; policy accept;
    oifname "{WAN}" ip saddr 10.2.0.0/16 masquerade
  }}
  # The router's own services are for the LAN: from the WAN only answers get in, as a
  # router's firewall has it.
  chain input {{
    type filter hook input priority filter; policy accept;
    iifname "{WAN}" ct state established,related accept
    iifname "{WAN}" drop
  }}
  # The emulated home's only way out is the emulated internet: nothing from it may leave
  # by this machine's own network.
  chain forward {{
    type filter hook forward priority filter; policy accept;
    iifname "{BRIDGE}" oifname != {{ "{WAN}", "{BRIDGE}" }} drop
  }}
}}
""",
            )
        # With the userspace datapath, this kernel still sees every frame that arrives on wlan0
        # and would answer ARP and IP for the router's own addresses behind OVS's back. The
        # netdev ingress hook runs after OVS's packet socket has its copy, so this drop only
        # silences the kernel. (The kernel datapath on a real router steals the frames itself.)
        Path(f"/proc/sys/net/ipv6/conf/{WLAN}/disable_ipv6").write_text("1\n")
        if not run("nft", "list", "table", "netdev", NFT_WLAN_TABLE, check=False):
            run(
                "nft",
                "-f",
                "-",
                input=f"""
table netdev {NFT_WLAN_TABLE} {{
  chain ingress {{
    type filter hook ingress device "{WLAN}" priority 0; policy drop;
  }}
}}
""",
            )
        run(
            "ovs-vsctl",
            "--may-exist",
            "add-br",
            BRIDGE,
            "--",
            "set",
            "bridge",
            BRIDGE,
            "datapath_type=netdev",
            "protocols=OpenFlow13",
            "fail-mode=secure",
            f"other-config:hwaddr={ROUTER_MAC}",
            "other-config:disable-in-band=true",
            "--",
            "--may-exist",
            "add-port",
            BRIDGE,
            WLAN,
            "--",
            "set-controller",
            BRIDGE,
            "tcp:127.0.0.1:6653",
        )
        # Reconnect within a second of a controller restart (the default backoff grows to 8 s).
        run("ovs-vsctl", "set", "controller", BRIDGE, "max_backoff=1000", "inactivity_probe=5000")
        wait_until(f"{BRIDGE} interface", lambda: link_exists(BRIDGE), 10)
        Path(f"/proc/sys/net/ipv6/conf/{BRIDGE}/disable_ipv6").write_text("1\n")
        run("ip", "link", "set", BRIDGE, "up")

    def _first_radio_settings(self) -> None:
        """What the image writes when it first serves a radio: the world domain, a guest passphrase."""
        settings = self.run_dir / "radio.conf"
        if not settings.exists():
            settings.write_text(radio_settings.render(radio_settings.RadioSettings(passphrase=GUEST_PASSPHRASE)))
        (self.run_dir / "updates").mkdir(exist_ok=True)

    def _render_hostapd_conf(self) -> None:
        """Real hostapd as the 802.1X authenticator on the router's LAN side (driver=wired)."""
        eap_users = self.run_dir / "hostapd.eap_user"
        if not eap_users.exists():
            eap_users.write_text("# identity, EAP method, password: one device a line (homenet client add --8021x)\n")
        conf = run(
            PYTHON,
            "-m",
            "homework_controller.radio.hostapd_conf",
            "--driver",
            "wired",
            "--interface",
            BRIDGE,
            "--ctrl-dir",
            self.run_dir / "hostapd",
            "--eap-users",
            eap_users,
        )
        (self.run_dir / "hostapd.conf").write_text(conf)

    # ---- devices

    def clients(self) -> list[str]:
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
        _require_root()
        if not CLIENT_NAME_RE.match(name):
            raise HomenetError(f"client name {name!r}: use 1-11 of a-z, 0-9, '-' (starting with a letter or digit)")
        ns = CLIENT_NS_PREFIX + name
        if ns in netns_list():
            raise HomenetError(f"client {name} already exists")
        if not link_exists(AIR_BRIDGE, NS_AIR):
            raise HomenetError("homenet is not up: run `homenet up` first")
        mac = (mac or mac_for(name)).lower()
        if not MAC_RE.match(mac):
            raise HomenetError(f"not a MAC address: {mac}")
        # dhclient-script writes /etc/resolv.conf; inside `ip netns exec` that is this file.
        etc = Path("/etc/netns") / ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text("")
        state = self._state(name)
        state.mkdir(parents=True, exist_ok=True)
        if wired and link_exists(LAN_PORT):
            raise HomenetError(f"the wired port {LAN_PORT} is taken: one device per cable")
        ensure_ns(ns)
        if wired:
            self._plug_in(ns, mac)
            (state / "wired").touch()
            return mac
        port = f"c-{name}"
        veth(port, WLAN, a_ns=NS_AIR, b_ns=ns, b_mac=mac)
        run("ip", "link", "set", port, "master", AIR_BRIDGE, ns=NS_AIR)
        # Isolated ports reach the uplink but not each other: what WPA2 does between stations.
        run("bridge", "link", "set", "dev", port, "isolated", "on", ns=NS_AIR)
        run("nft", "add", "element", "bridge", NFT_AIR_TABLE, "own", f'{{ "{port}" . {mac} }}', ns=NS_AIR)
        (state / "radio.json").write_text(json.dumps({"rssi": rssi, "retries_per_s": retries}))
        if dot1x:
            self._add_8021x_identity(name, dot1x)
        return mac

    def _plug_in(self, ns: str, mac: str) -> None:
        """A cable from the device (its end named wlan0 too, so every helper here finds it) to the router's
        wired access port, which OVS gets as a port (the controller rebuilds its rules on the new port)."""
        veth(LAN_PORT, WLAN, b_ns=ns, b_mac=mac)
        Path(f"/proc/sys/net/ipv6/conf/{LAN_PORT}/disable_ipv6").write_text("1\n")
        # As on wlan0: the kernel sees what OVS's packet socket gets and would answer it behind OVS's back.
        run(
            "nft",
            "add",
            "chain",
            "netdev",
            NFT_WLAN_TABLE,
            LAN_PORT,
            f'{{ type filter hook ingress device "{LAN_PORT}" priority 0; policy drop; }}',
        )
        run("ovs-vsctl", "--may-exist", "add-port", BRIDGE, LAN_PORT)

    def _unplug(self) -> None:
        run("ovs-vsctl", "--if-exists", "del-port", BRIDGE, LAN_PORT, check=False)
        run("nft", "delete", "chain", "netdev", NFT_WLAN_TABLE, LAN_PORT, check=False)
        run("ip", "link", "delete", LAN_PORT, check=False)

    def _add_8021x_identity(self, name: str, dot1x: str) -> None:
        identity, _, password = dot1x.partition(":")
        if not identity or not password or '"' in dot1x:
            raise HomenetError("--8021x takes IDENTITY:PASSWORD (no double quotes)")
        (self._state(name) / "8021x.json").write_text(json.dumps({"identity": identity, "password": password}))
        with (self.run_dir / "hostapd.eap_user").open("a") as users:
            users.write(f'"{identity}" MD5 "{password}"\n')
        pid = self.processes.pid("hostapd")
        if pid:
            os.kill(pid, signal.SIGHUP)  # hostapd re-reads its user file

    def remove(self, name: str) -> None:
        ns = self._ns(name)
        mac = self.mac(name)
        kill_all_in(ns)
        if (self._state(name) / "wired").exists():
            self._unplug()
            run("ip", "netns", "delete", ns)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
            shutil.rmtree(self._state(name), ignore_errors=True)
            return
        # The air's end first, and synchronously: a deleted namespace takes its links down later
        # (once its last process is gone), so a device added again under the same name would find
        # the old port still there, keep it, and lose it a moment later.
        port = f"c-{name}"
        run("ip", "link", "delete", port, ns=NS_AIR, check=False)
        wait_until(f"the air's port {port} to go", lambda: not link_exists(port, NS_AIR), 10)
        run("ip", "netns", "delete", ns)
        run(
            "nft",
            "delete",
            "element",
            "bridge",
            NFT_AIR_TABLE,
            "own",
            f'{{ "{port}" . {mac} }}',
            ns=NS_AIR,
            check=False,
        )
        shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        shutil.rmtree(self._state(name), ignore_errors=True)

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

    def dhcp(self, name: str, timeout: int = 20, host_name: str | None = None, vendor_class: str = "") -> str:
        """The real ISC dhclient gets a lease (and keeps renewing it); returns e.g. '10.2.0.6/30'.
        host_name: what it calls itself (option 12; default its client name): a phone back under a new
        private MAC still says its own name. vendor_class: option 60, as Android's client sends it."""
        ns, state = self._ns(name), self._state(name)
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
        state = self._state(name)
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
            pid = int((self._state(name) / "dhclient.pid").read_text())
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

    def radio(self, name: str, rssi: int | None = None, retries: float | None = None) -> None:
        """How a device's radio link looks to the router: signal strength and retries per second."""
        path = self._state(name) / "radio.json"
        settings = json.loads(path.read_text()) if path.exists() else {}
        if rssi is not None:
            settings["rssi"] = rssi
        if retries is not None:
            settings["retries_per_s"] = retries
        path.write_text(json.dumps(settings))

    def auth(self, name: str) -> None:
        """Real wpa_supplicant (-D wired) in the device: authenticate with its 802.1X identity."""
        state = self._state(name)
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
        return run("wpa_cli", "-p", self._state(name) / "wpa", "-i", WLAN, "status", ns=self._ns(name), check=False)

    def _ns(self, name: str) -> str:
        ns = CLIENT_NS_PREFIX + name
        if ns not in netns_list():
            raise HomenetError(f"no client {name}")
        return ns

    def _state(self, name: str) -> Path:
        return self.run_dir / "clients" / name

    # ---- the router

    def api(self, verb: str, path: str, timeout: float = 5) -> tuple[int, Any]:
        """Call the controller's ws.v1: (HTTP status, JSON body)."""
        req = urllib.request.Request(f"{API}/{path}", method=verb)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def decide(self, method: str, device: str) -> dict:
        """permit, deny, whitelist, blacklist a device (by name or MAC) as the household's tools do."""
        mac = device if MAC_RE.match(device) else self.mac(device)
        status, body = self.api("POST", f"{method}/{mac}")
        if status != 200:
            raise HomenetError(f"{method} {device}: {status} {body}")
        return body

    def permit(self, device: str) -> dict:
        return self.decide("permit", device)

    def join(self, name: str, permit: bool = True) -> str:
        """A device joins (and, permitted, renews into its hour-long lease); returns its address."""
        self.add(name)
        address = self.dhcp(name).split("/")[0]
        if permit:
            self.permit(name)
            self.dhcp(name)
        return address

    def deny(self, device: str) -> dict:
        return self.decide("deny", device)

    def flows(self, table: int) -> str:
        return run("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", BRIDGE, f"table={table}")

    def hwdb(self, query: str) -> list[dict]:
        """Rows of an hwdb query, as the household's tools see them."""
        result = json.loads(run(HWDB_BIN, "query", "--server", "127.0.0.1:987", "--json", query) or "{}")
        names = [c["name"] for c in result.get("columns", [])]
        return [dict(zip(names, row, strict=True)) for row in result.get("rows", [])]

    def internet_spawn(self, *cmd, **popen_args) -> subprocess.Popen:
        """A process on the internet's side (the emulated internet's namespace)."""
        return subprocess.Popen(["ip", "netns", "exec", NS_INET, *map(str, cmd)], **popen_args)

    @contextlib.contextmanager
    def internet_capture(self, capture_filter: str):
        """tcpdump on the internet's side of the router, listening before the block runs; yields a
        function giving the lines captured so far (one a packet)."""
        with tempfile.TemporaryDirectory() as tmp:
            seen, log = Path(tmp) / "seen.txt", Path(tmp) / "tcpdump.log"
            with seen.open("w") as out, log.open("w") as err:
                capture = subprocess.Popen(
                    ["ip", "netns", "exec", NS_INET, "tcpdump", "-nli", "eth0", "-l", capture_filter],
                    stdout=out,
                    stderr=err,
                )
            try:
                wait_until("tcpdump to listen", lambda: "listening on" in log.read_text(), 10, hint=log.read_text)
                yield lambda: [line for line in seen.read_text().splitlines() if line.strip()]
            finally:
                capture.terminate()
                capture.wait(timeout=10)

    def setup_code(self) -> str:
        """The web UI's one-time first-run code: what the router's console and label show."""
        try:
            return (self.run_dir / "webui" / "setup-code").read_text().strip()
        except FileNotFoundError:
            raise HomenetError("no setup code: the owner account exists already (first run is done)") from None

    def status(self) -> dict:
        clients = []
        for name in self.clients():
            clients.append({"name": name, "mac": self.mac(name), "ipv4": self.address(name, with_prefix=True)})
        report = {
            "ovs": ovs_running(),
            "bridge": link_exists(BRIDGE),
            "internet": {
                "namespace": NS_INET in netns_list(),
                "dns": bool(self.processes.pid("inet-dns")),
                "http": bool(self.processes.pid("inet-http")),
            },
            "isp": self.isp.status(),
            "clients": clients,
            "logs": str(self.processes.logs),
        }
        for name, service in self.services.items():
            pid = self.processes.pid(name)
            report[name] = {"pid": pid, "ready": bool(pid) and services.is_ready(service)}
        return report


def _require_root() -> None:
    if os.geteuid() != 0:
        raise HomenetError("homenet needs root (network namespaces, OVS)")
