"""The emulated home's network: namespaces, veths, the air, the internet and the router's OVS bridge.

Layout (every name prefixed, so `tear_down` finds and removes them, even after a crash):

  client netns hw-c-NAME (wlan0) ─┐
  client netns hw-c-NAME (wlan0) ─┤ netns hw-air: Linux bridge "air", client ports isolated
                                  └─ air-up ══ wlan0 ─ OVS br-lan (netdev, OF1.3, fail-secure) ─ controller
  client netns hw-c-NAME (wlan0) ══ lan1 ─ OVS br-lan: a wired access port, one device on its cable
                                   (`plug_in`), gated and isolated as the air is
  router = this (root) namespace: br-lan holds each /30's gateway; NAT out of hw-wan
  hw-wan ══ the ISP (isp.py: a sliced aggregation switch, and household B beside this one)
         ══ eth0 in netns hw-inet: DNS (dnsmasq) for example.test, HTTP on :80, iperf3

The air behaves like a radio: stations reach each other only through the router (WPA2's
client isolation), a station never receives its own frames back (802.11 stations drop
group frames carrying their own source address), and the air never learns a station's
address from frames the router sends into it (an access point learns its stations from
their association, not from its distribution side).

Nothing here starts the router's services (router_services.py) or acts in a device (stations.py).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from homework_deploy import ovs_bridge

from . import ipv6
from .net import ensure_ns, kill_all_in, link_exists, netns_list, nft_table, run, veth
from .services import HomenetError, Processes
from .wait import wait_until

NS_AIR, NS_INET, CLIENT_NS_PREFIX = "hw-air", "hw-inet", "hw-c-"
BRIDGE, WLAN, AIR_UP, AIR_BRIDGE, WAN = "br-lan", "wlan0", "air-up", "air", "hw-wan"
LAN_PORT = "lan1"  # the router's wired access port (a device's cable), beside the radio's
ROUTER_MAC = "02:48:57:00:00:01"
CONTROLLER = "tcp:127.0.0.1:6653"
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
# The router's own address on the LAN, where devices reach the web UI (10.2.0.0/30 is the
# router's; every device's /30 routes to it through the router).
ROUTER_LAN_IP = "10.2.0.1"
NFT_TABLE, NFT_WLAN_TABLE, NFT_AIR_TABLE = "homenet", "homenet_wlan", "air"
# The emulated broadband line: 20 Mbit/s up, 30 down. The router is told these rates and shapes a
# little below them; the veths themselves are faster, so the router's shaper is where the queue
# forms, as SQM arranges on a real line. The downlink's queue is capped by the emulation itself:
# OVS's userspace datapath sends to the wireless port through a packet socket whose send buffer
# (~200 KB) counts what waits in the shaper, so at most ~25 ms queue at 50 Mbit/s, ~40 ms at 30
# (a router's kernel datapath has no such cap). 30 keeps the Normal class's delay measurable.
LINE_UP_KBIT, LINE_DOWN_KBIT = 20_000, 30_000
# iperf3 servers run one test at a time: household B's downloads have a server of their own, and
# bulk transfers over IPv6 one on the internet's IPv6 address.
IPERF_PORT, NEIGHBOUR_IPERF_PORT, IPERF6_PORT = 5201, 5202, 5203
# The internet's processes (Processes names), stopped at tear-down.
INTERNET_PARTS = ("inet-dns", "inet-http", "inet-iperf", "inet-iperf-b", "inet-iperf6")
OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"


def ovs_running() -> bool:
    return subprocess.run(["ovs-vsctl", "--timeout=3", "show"], capture_output=True).returncode == 0


class Topology:
    """The emulated home's links and namespaces: build them, connect a device, tear them all down."""

    def __init__(self, run_dir: Path, processes: Processes, python: Path):
        self.run_dir = run_dir
        self.processes = processes
        self.python = python  # runs the internet's web server (homenet.web)

    # ---- building (in this order; the ISP's links, isp.py, come between the air and the internet)

    def start_ovs(self) -> None:
        if ovs_running():
            return
        run(OVS_CTL, "start", "--system-id=random", "--no-monitor")
        (self.run_dir / "ovs-started-by-homenet").touch()
        wait_until("Open vSwitch", ovs_running, 20)

    def build_air(self) -> None:
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
            nft_table(
                "bridge",
                NFT_AIR_TABLE,
                """
  set own { type ifname . ether_addr; }
  chain forward {
    type filter hook forward priority filter; policy accept;
    oifname . ether saddr @own drop
  }
""",
                ns=NS_AIR,
            )
        veth(WLAN, AIR_UP, b_ns=NS_AIR)
        run("ip", "link", "set", AIR_UP, "master", AIR_BRIDGE, ns=NS_AIR)
        # What the router sends never teaches the air where a station is.
        run("bridge", "link", "set", "dev", AIR_UP, "learning", "off", ns=NS_AIR)

    def build_internet(self) -> None:
        """The internet's addresses and servers (its links are the ISP's: ISP.build)."""
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
        self.processes.start("inet-http", [self.python, "-m", "homenet.web", "--directory", www], ns=NS_INET)
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

    def build_router(self) -> None:
        """The router's side in this namespace: forwarding, NAT and firewall, and OVS br-lan with the
        air's port; its LAN address comes once hostapd's configuration is rendered (`add_lan_address`)."""
        orig = self.run_dir / "ip_forward.orig"
        if not orig.exists():
            orig.write_text(Path("/proc/sys/net/ipv4/ip_forward").read_text())
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
        nft_table(
            "ip",
            NFT_TABLE,
            f"""
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
""",
        )
        # With the userspace datapath, this kernel still sees every frame that arrives on wlan0
        # and would answer ARP and IP for the router's own addresses behind OVS's back. The
        # netdev ingress hook runs after OVS's packet socket has its copy, so this drop only
        # silences the kernel. (The kernel datapath on a real router steals the frames itself.)
        Path(f"/proc/sys/net/ipv6/conf/{WLAN}/disable_ipv6").write_text("1\n")
        nft_table(
            "netdev",
            NFT_WLAN_TABLE,
            f"""
  chain ingress {{
    type filter hook ingress device "{WLAN}" priority 0; policy drop;
  }}
""",
        )
        # The image's bridge too (homework_deploy.ovs_bridge), but on OVS's userspace datapath.
        try:
            ovs_bridge.set_up(BRIDGE, [WLAN], ROUTER_MAC, CONTROLLER, datapath_type="netdev")
        except ovs_bridge.BridgeError as exc:
            raise HomenetError(str(exc)) from exc
        Path(f"/proc/sys/net/ipv6/conf/{BRIDGE}/disable_ipv6").write_text("1\n")
        run("ip", "link", "set", BRIDGE, "up")

    def add_lan_address(self) -> None:
        run("ip", "addr", "replace", f"{ROUTER_LAN_IP}/32", "dev", BRIDGE)  # where devices reach the web UI

    def is_built(self) -> bool:
        return link_exists(AIR_BRIDGE, NS_AIR)

    # ---- a device's link: a port on the air, or the cable to the router's wired access port

    def join_air(self, ns: str, port: str, mac: str) -> None:
        """A station's radio link: `wlan0` in its namespace, `port` on the air (isolated)."""
        veth(port, WLAN, a_ns=NS_AIR, b_ns=ns, b_mac=mac)
        run("ip", "link", "set", port, "master", AIR_BRIDGE, ns=NS_AIR)
        # Isolated ports reach the uplink but not each other: what WPA2 does between stations.
        run("bridge", "link", "set", "dev", port, "isolated", "on", ns=NS_AIR)
        run("nft", "add", "element", "bridge", NFT_AIR_TABLE, "own", f'{{ "{port}" . {mac} }}', ns=NS_AIR)

    def leave_air(self, port: str, mac: str) -> None:
        # The air's end first, and synchronously: a deleted namespace takes its links down later
        # (once its last process is gone), so a device added again under the same name would find
        # the old port still there, keep it, and lose it a moment later.
        run("ip", "link", "delete", port, ns=NS_AIR, check=False)
        wait_until(f"the air's port {port} to go", lambda: not link_exists(port, NS_AIR), 10)
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

    def lan_port_taken(self) -> bool:
        return link_exists(LAN_PORT)

    def plug_in(self, ns: str, mac: str) -> None:
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

    def unplug(self) -> None:
        run("ovs-vsctl", "--if-exists", "del-port", BRIDGE, LAN_PORT, check=False)
        run("nft", "delete", "chain", "netdev", NFT_WLAN_TABLE, LAN_PORT, check=False)
        run("ip", "link", "delete", LAN_PORT, check=False)

    # ---- the internet's side, and the bridge's rules

    def internet_spawn(self, *cmd, **popen_args) -> subprocess.Popen:
        """A process on the internet's side (the emulated internet's namespace)."""
        return subprocess.Popen(["ip", "netns", "exec", NS_INET, *map(str, cmd)], **popen_args)

    @contextlib.contextmanager
    def internet_capture(self, capture_filter: str) -> Iterator[Callable[[], list[str]]]:
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

    def flows(self, table: int) -> str:
        """br-lan's OpenFlow rules in one table, as ovs-ofctl prints them."""
        return run("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", BRIDGE, f"table={table}")

    def status(self) -> dict:
        return {
            "ovs": ovs_running(),
            "bridge": link_exists(BRIDGE),
            "internet": {
                "namespace": NS_INET in netns_list(),
                "dns": bool(self.processes.pid("inet-dns")),
                "http": bool(self.processes.pid("inet-http")),
            },
        }

    # ---- tearing down

    def tear_down(self) -> None:
        """Every namespace, link, bridge and nftables table the emulated home made (the router's
        services are stopped first, by the caller); OVS stops if `start_ovs` started it."""
        for name in INTERNET_PARTS:
            self.processes.stop(name)
        for ns in netns_list():
            if ns.startswith("hw-"):
                kill_all_in(ns)
                run("ip", "netns", "delete", ns, check=False)
                remove_etc(ns)
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
            run(OVS_CTL, "stop", check=False)


def remove_etc(ns: str) -> None:
    """A namespace's own /etc files (`ip netns exec` bind-mounts /etc/netns/NS over /etc)."""
    shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
