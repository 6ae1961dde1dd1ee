"""The ISP in front of the emulated home: an aggregation switch sliced by isp-flowvisor, and a neighbour.

  hw-inet eth0 ══ agg-up ─ br-agg ─ agg-down ══ dist-agg ─ bridge "dist" (hw-dist) ─┬─ dist-a ══ hw-wan: household A
                 (private OVS, hw-isp;                                             └─ dist-b ══ wan (hw-hb): household B
                  the slicer controls it)  agg-down's egress: the shared downlink's HTB tree

- **hw-isp** holds the aggregation switch: an ovsdb-server/ovs-vswitchd of its own
  (`isp_flowvisor.testing.PrivateOVS`), userspace datapath, bridge `br-agg` whose controller is the
  real `isp-flowvisor` slicer, also running in hw-isp so that its `[queues]` tree lands on `agg-down`.
  The slicer reaches the switch over a Unix socket in the switch's run directory, and households
  reach the slicer in-band, through the switch, at SLICER_IP on br-agg's own port (TLS: an ISP CA
  made at `up`, the slicer's certificate, one client certificate per household).
- Household A is the emulated home's router (root namespace), public address 198.51.100.2 as before.
- Household B is a lighter router in hw-hb: this project's controller and hwdb, started from
  deploy/services.toml like A's, the controller on a bridge of its own (a second private OVS in hw-hb: its
  controller listens on hw-hb's loopback) with nothing but an idle wireless port. B's "downloads"
  are made by B's router itself, to its public address 198.51.100.3 (no NAT, no devices behind it).

A table miss on br-agg goes to NORMAL, so the ISP is transparent: every address of the emulated
internet and of A is what it was before the ISP existed.
"""

from __future__ import annotations

import functools
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import services
from .net import ensure_ns, link_exists, netns_list, run, veth
from .services import HomenetError, Processes
from .wait import wait_until

REPO = Path(__file__).resolve().parents[2]

NS_ISP, NS_DIST, NS_B = "hw-isp", "hw-dist", "hw-hb"
AGG, AGG_UP, AGG_DOWN = "br-agg", "agg-up", "agg-down"
UPLINK_PORT, DOWNLINK_PORT = 1, 2  # OpenFlow port numbers on br-agg, shared by every household
DIST, DIST_AGG, DIST_A, DIST_B, B_WAN = "dist", "dist-agg", "dist-a", "dist-b", "wan"
SLICER_IP, SLICER_PORT = "198.51.100.254", 6643
SLICER_RPC, SLICER_METRICS = "127.0.0.1:6644", "127.0.0.1:9644"  # hw-isp's loopback
HOUSEHOLD_B_IP = "198.51.100.3"
# The shared downlink: above household A's own line (30 Mbit/s, which A's router shapes to 27), so
# that A alone still queues in its own router as before; households share it by guaranteed rate, so
# with B downloading A gets about its 5 and its own downloads queue here, at the ISP. (This queue
# is capped as the router's downlink is, by the switch's packet socket: ~200 KB for all households,
# so the lower A's rate, the longer A's share of it takes: ~100 ms at 5 Mbit/s.)
LINK_MBIT = 40
GUARANTEED_MBIT = {"a": 5, "b": 35}
B_BRIDGE, B_WLAN = "br-lan", "wlan0"


@dataclass(frozen=True)
class Household:
    name: str
    address: str
    cert: Path
    key: Path


class ISP:
    def __init__(
        self,
        run_dir: Path,
        processes: Processes,
        python: Path,
        hwdb_bin: Path,
        a_address: str,
        a_wan: str,
        inet_ns: str,
        upstream_dns: str,
    ):
        self.dir = run_dir / "isp"
        self.processes = processes
        self.python, self.hwdb_bin, self.upstream_dns = python, hwdb_bin, upstream_dns
        self.a_wan, self.inet_ns = a_wan, inet_ns
        self.certs = self.dir / "certs"
        self.ca = self.certs / "isp-ca.pem"
        self.token_file = self.dir / "fvctl.token"  # made by the slicer at its first start
        self.households = {
            name: Household(name, address, self.certs / f"{name}.crt", self.certs / f"{name}.key")
            for name, address in (("a", a_address), ("b", HOUSEHOLD_B_IP))
        }

    @functools.cached_property
    def agg_ovs(self):
        return self._ovs("agg-ovs", NS_ISP)

    @functools.cached_property
    def b_ovs(self):
        return self._ovs("b-ovs", NS_B)

    def _ovs(self, name: str, ns: str):
        """isp-flowvisor's test library's PrivateOVS: an ovsdb-server/ovs-vswitchd of our own in a namespace
        of our own (the userspace datapath's `ovs-netdev` tap would clash with the system OVS's anywhere
        else). Imported here, not with this module: every homenet process (the call, the web server)
        imports the package, and the test library brings os-ken and the slicer's own modules with it."""
        from isp_flowvisor.testing import PrivateOVS

        ovs = PrivateOVS(self.dir / name)
        ovs.netns = ns  # its start() creates the namespace; `Home.down` finds it by the hw- prefix
        return ovs

    # ---- up

    def build(self) -> None:
        """The links: the internet's, the switch's and the households' WANs (before addresses go on them)."""
        if NS_ISP not in netns_list():
            self.agg_ovs.dir.mkdir(parents=True, exist_ok=True)  # (`down` may have removed it since)
            self.agg_ovs.start()
        for ns in (NS_DIST, self.inet_ns):
            ensure_ns(ns)
        veth(AGG_UP, "eth0", a_ns=NS_ISP, b_ns=self.inet_ns)
        veth(AGG_DOWN, DIST_AGG, a_ns=NS_ISP, b_ns=NS_DIST)
        veth(self.a_wan, DIST_A, b_ns=NS_DIST)
        if not link_exists(DIST, NS_DIST):
            run("ip", "link", "add", DIST, "type", "bridge", "stp_state", "0", ns=NS_DIST)
            run("ip", "link", "set", DIST, "up", ns=NS_DIST)
        for port in (DIST_AGG, DIST_A):
            run("ip", "link", "set", port, "master", DIST, ns=NS_DIST)
        # The switch's namespace answers ARP only for its own address, on its own port: its kernel
        # also sees every frame on agg-up/agg-down (userspace datapath) and must not answer there.
        run("sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1", ns=NS_ISP)
        run("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", ns=NS_ISP)
        self.agg_ovs.vsctl(
            "--may-exist",
            "add-br",
            AGG,
            "--",
            "set",
            "bridge",
            AGG,
            "datapath_type=netdev",
            "protocols=OpenFlow13",
            "fail_mode=secure",
            "other-config:disable-in-band=true",
            f"other-config:datapath-id={0x15b:016x}",
            "--",
            "--may-exist",
            "add-port",
            AGG,
            AGG_UP,
            "--",
            "set",
            "interface",
            AGG_UP,
            f"ofport_request={UPLINK_PORT}",
            "--",
            "--may-exist",
            "add-port",
            AGG,
            AGG_DOWN,
            "--",
            "set",
            "interface",
            AGG_DOWN,
            f"ofport_request={DOWNLINK_PORT}",
            "--",
            "set-controller",
            AGG,
            f"unix:{self.switch_socket}",
            "--",
            "set",
            "controller",
            AGG,
            "max_backoff=1000",
        )
        wait_until(f"{AGG}'s own port", lambda: link_exists(AGG, NS_ISP), 10)
        run("ip", "addr", "replace", f"{SLICER_IP}/24", "dev", AGG, ns=NS_ISP)
        run("ip", "link", "set", AGG, "up", ns=NS_ISP)

    @property
    def switch_socket(self) -> Path:
        return self.agg_ovs.dir / "slicer.sock"  # OVS connects only to sockets in its own run directory

    def start(self, a_delegated: str = "") -> None:
        """The slicer with both households registered (A with the IPv6 prefix the ISP's DHCPv6 server
        delegated to it, if any: its flowspace on the slice), then household B's router."""
        self._issue_certificates()
        config = self.dir / "slicer.toml"
        config.write_text(f"""
[switch]
listen = "unix:{self.switch_socket}"
shared_ports = [{UPLINK_PORT}, {DOWNLINK_PORT}]

[households]
listen = "{SLICER_IP}:{SLICER_PORT}"
tls_cert = "{self.certs / 'slicer.crt'}"
tls_key = "{self.certs / 'slicer.key'}"
tls_ca = "{self.ca}"

[admin]
rpc = "{SLICER_RPC}"
metrics = "{SLICER_METRICS}"

[registry]
backend = "file"
path = "{self.dir / 'households.json'}"

[queues]
interface = "{AGG_DOWN}"
link_mbit = {LINK_MBIT}
""")
        self.processes.start(
            "isp-slicer",
            [self.python, "-m", "isp_flowvisor.cli", config, "--token-file", str(self.token_file)],
            ns=NS_ISP,
        )
        wait_until(
            "the slicer and its switch",
            lambda: "\nisp_flowvisor_switch_connected 1\n" in self.metrics(),
            30,
            hint=lambda: self.processes.log_tail("isp-slicer"),
        )
        registered = {h["name"] for h in self.fvctl("list")}
        for h in self.households.values():
            if h.name not in registered:
                delegated = ["--address", a_delegated] if h.name == "a" and a_delegated else []
                self.fvctl(
                    "add",
                    h.name,
                    "--address",
                    f"{h.address}/32",
                    *delegated,
                    "--rate",
                    str(GUARANTEED_MBIT[h.name]),
                    "--quota",
                    "1000",
                    "--msg-rate",
                    "500",
                    "--msg-burst",
                    "1000",
                    "--cert",
                    h.cert,
                )
        self._start_b()

    def slice_settings(self) -> dict[str, object]:
        """deploy/services.toml's slice settings for household A's router."""
        a = self.households["a"]
        return {
            "SLICE": f"{SLICER_IP}:{SLICER_PORT}",
            "SLICE_CERT": a.cert,
            "SLICE_KEY": a.key,
            "SLICE_CA": self.ca,
            "PUBLIC_ADDRESS": a.address,
        }

    def _start_b(self) -> None:
        b = self.households["b"]
        if NS_B not in netns_list():
            self.b_ovs.dir.mkdir(parents=True, exist_ok=True)
            self.b_ovs.start()
        veth(B_WAN, DIST_B, a_ns=NS_B, b_ns=NS_DIST)
        run("ip", "link", "set", DIST_B, "master", DIST, ns=NS_DIST)
        run("ip", "addr", "replace", f"{b.address}/24", "dev", B_WAN, ns=NS_B)
        self.b_ovs.vsctl(
            "--may-exist",
            "add-br",
            B_BRIDGE,
            "--",
            "set",
            "bridge",
            B_BRIDGE,
            "datapath_type=netdev",
            "protocols=OpenFlow13",
            "fail_mode=secure",
            "other-config:disable-in-band=true",
            "--",
            "--may-exist",
            "add-port",
            B_BRIDGE,
            B_WLAN,
            "--",
            "set",
            "interface",
            B_WLAN,
            "type=internal",
            "--",
            "set-controller",
            B_BRIDGE,
            "tcp:127.0.0.1:6653",
        )
        for link in (B_BRIDGE, B_WLAN):  # the controller's DHCP socket binds to the (idle) wireless port
            wait_until(f"household B's {link}", functools.partial(link_exists, link, NS_B), 10)
            run("ip", "link", "set", link, "up", ns=NS_B)
        (self.dir / "b").mkdir(exist_ok=True)
        defined = self._b_services()
        self.processes.start("isp-b-hwdb", defined["hwdb"].command, ns=NS_B, cwd=REPO)  # B's parent's priorities
        controller = defined["controller"]
        self.processes.start("isp-b-router", controller.command, ns=NS_B, cwd=REPO, nice=controller.nice)
        wait_until(
            "household B's router to connect to its slice",
            lambda: self.connected("b"),
            60,
            hint=lambda: self.processes.log_tail("isp-b-router"),
        )

    def _b_services(self) -> dict:
        """B's hwdb and controller as deploy/services.toml defines them, with B's settings (no radio, no
        hostapd, no shaping: the neighbour's router is lighter; its DNS goes to the internet's resolver)."""
        b, state = self.households["b"], self.dir / "b"
        return services.load(
            {
                "PYTHON": self.python,
                "HWDB_BIN": self.hwdb_bin,
                "STATE": state,
                "RUN": state,
                "LAN_IFACE": B_BRIDGE,
                "WLAN_PORT": B_WLAN,
                "ACCESS_PORTS": "",
                "UPSTREAM_DNS": self.upstream_dns,
                "STATIONS": "",
                "LAN_ADDRESS": "",
                "HOSTAPD_IFACE": B_BRIDGE,
                "WAN_IFACE": "",
                "LATENCY_TARGET": "",
                "WIFI_SSID": "",
                "WIFI_PSK_FILE": "",
                "RADIO_SETTINGS": "",
                "UPLINK_KBIT": 0,
                "DOWNLINK_KBIT": 0,
                "UPDATES": "",
                "SETUP_CODE_FILE": "",
                "ROLE_SPOOL": "",
                "SLICE": f"{SLICER_IP}:{SLICER_PORT}",
                "SLICE_CERT": b.cert,
                "SLICE_KEY": b.key,
                "SLICE_CA": self.ca,
                "PUBLIC_ADDRESS": b.address,
                "SERVICE_FILES": "",  # no prefix-delegation client: the tests write B's prefix
            },
            platform="homenet",
        )

    def _issue_certificates(self) -> None:
        """The ISP's CA, the slicer's certificate (for SLICER_IP, which households dial) and each household's."""
        if self.ca.exists():
            return
        from isp_flowvisor.testing import CA  # (imported here: see _ovs)

        ca = CA(self.certs, self.ca.stem)
        ca.issue("slicer", address=SLICER_IP)
        for h in self.households.values():
            ca.issue(h.name)

    # ---- asking it

    def fvctl(self, *args: object) -> Any:
        """fvctl's JSON answer (a list for `list`, an object for the rest), None when it prints nothing."""
        out = run(
            self.python,
            "-m",
            "isp_flowvisor.fvctl",
            "--rpc",
            SLICER_RPC,
            "--token-file",
            self.token_file,
            *args,
            ns=NS_ISP,
        )
        return json.loads(out) if out.strip() else None

    def metrics(self) -> str:
        proc = subprocess.run(
            ["ip", "netns", "exec", NS_ISP, "curl", "-s", "-m", "3", f"http://{SLICER_METRICS}/metrics"],
            capture_output=True,
            text=True,
        )
        return proc.stdout

    def connected(self, household: str) -> bool:
        return f'\nisp_flowvisor_household_connected{{household="{household}"}} 1\n' in self.metrics()

    def stats(self) -> dict:
        """fvctl stats: per household its rules, counters, tc queue bytes and drops."""
        result = self.fvctl("stats")
        assert isinstance(result, dict)
        return result

    def flows(self) -> list[str]:
        """br-agg's flow table, every household's rules with their slots in the cookies."""
        return self.agg_ovs.flows(AGG)

    def status(self) -> dict:
        if NS_ISP not in netns_list():
            return {"up": False}
        slicer = bool(self.processes.pid("isp-slicer"))
        report: dict = {"up": True, "slicer": slicer, "switch_connected": False, "households": {}}
        if slicer:
            report["switch_connected"] = "\nisp_flowvisor_switch_connected 1\n" in self.metrics()
            try:
                report["households"] = {
                    name: {
                        "address": s["addresses"],
                        "connected": s["connected"],
                        "rules": s["rules"],
                        "queues": s["queues"],
                    }
                    for name, s in self.stats().items()
                }
            except HomenetError:
                pass
        report["b_router"] = bool(self.processes.pid("isp-b-router")) and bool(self.processes.pid("isp-b-hwdb"))
        return report

    def b_spawn(self, *cmd, **popen_args) -> subprocess.Popen:
        """A process on household B's router (its WAN holds B's public address)."""
        return subprocess.Popen(["ip", "netns", "exec", NS_B, *map(str, cmd)], **popen_args)
