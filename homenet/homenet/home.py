"""The emulated home around a Homework router, on one Linux machine: `Home` composes its parts.

- `topology` (topology.Topology): namespaces, veths, the air, the emulated internet, the router's
  OVS bridge, NAT and firewall;
- `isp` (isp.ISP): the ISP's sliced aggregation switch, its slicer, household B;
- `router` (services.RouterServices): the router's real services, started from deploy/services.toml
  with the emulated home's settings (`router_settings`: its paths and interfaces);
- `stations` (stations.Stations): the devices, each in a namespace of its own;
- `wsv1` (wsv1.WsV1Client): the controller's ws.v1 API.

`Home`'s own methods bring it all up and down in order; the rest are the parts' methods, kept here
because the tests, the benchmarks and the CLI call them on the home (`home.dhcp("laptop")`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from . import ipv6
from .isp import ISP
from .net import run
from .services import HomenetError, Processes, RouterServices
from .stations import MAC_RE, Stations, mac_for
from .topology import (
    BRIDGE,
    CLIENT_NS_PREFIX,
    INET_DNS_IP,
    INET_HOSTS,
    INTERNET_HOST,
    INTERNET_IP,
    IPERF6_PORT,
    IPERF_PORT,
    LAN_PORT,
    LINE_DOWN_KBIT,
    LINE_UP_KBIT,
    NEIGHBOUR_IPERF_PORT,
    NS_AIR,
    NS_INET,
    ROUTER_LAN_IP,
    ROUTER_MAC,
    WAN,
    WAN_INET_IP,
    WAN_ROUTER_IP,
    WLAN,
    Topology,
)
from .wsv1 import API, WsV1Client

# Defaults of what `Home` injects into the router's services: this repository's builds.
REPO = Path(__file__).resolve().parents[2]
RUN = Path(os.environ.get("HOMENET_RUN", "/run/homenet"))
PYTHON = Path(os.environ.get("HOMENET_PYTHON", sys.executable))
HWDB_BIN = REPO / "hwdb" / "target" / "release" / "hwdb"
WEBUI_URL = "http://127.0.0.1:8080"
GUEST_PASSPHRASE = "correct horse battery staple"
# Background processes that are not the router's services, stopped at `down` after them.
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

# What callers import from here (most are the parts' modules', imported above for them).
__all__ = [
    "API",
    "BRIDGE",
    "CLIENT_NS_PREFIX",
    "HWDB_BIN",
    "INET_HOSTS",
    "INTERNET_HOST",
    "INTERNET_IP",
    "IPERF6_PORT",
    "IPERF_PORT",
    "LAN_PORT",
    "NEIGHBOUR_IPERF_PORT",
    "NS_AIR",
    "NS_INET",
    "PYTHON",
    "REPO",
    "ROUTER_LAN_IP",
    "ROUTER_MAC",
    "WAN_INET_IP",
    "WAN_ROUTER_IP",
    "WEBUI_URL",
    "WLAN",
    "Home",
    "HomenetError",
    "mac_for",
    "router_settings",
    "run",
]


def router_settings(run_dir: Path, python: Path, hwdb_bin: Path, station_dump: Path) -> dict[str, object]:
    """services.toml's [settings] for a router in the emulated home (all but the ISP slice's)."""
    return {
        "PYTHON": python,
        "HWDB_BIN": hwdb_bin,
        "STATE": run_dir,
        "RUN": run_dir,
        "LAN_IFACE": BRIDGE,
        "WLAN_PORT": WLAN,
        "ACCESS_PORTS": f"{WLAN},{LAN_PORT}",
        "UPSTREAM_DNS": INET_DNS_IP,
        "STATIONS": f"file:{station_dump}",
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
        "ROLE_SPOOL": "",  # the emulated home's box is a router and nothing else
        "SERVICE_FILES": run_dir,  # dhcpcd's configuration and hook, as the image's /usr/lib/homework
    }


class Home:
    """The emulated home: bring it up or down, add devices, act in them, ask the router.

    run_dir holds its state and logs; python runs the router's Python services (with the
    controller, the web UI and homenet installed); hwdb_bin is hwdb's executable; repo is where the
    services start (the controller reads its hostapd template and the web UI its built frontend
    from beside their packages)."""

    def __init__(self, run_dir: Path = RUN, python: Path = PYTHON, hwdb_bin: Path = HWDB_BIN, repo: Path = REPO):
        self.run_dir, self.repo = run_dir, repo
        self.processes = Processes(run_dir)
        self.station_dump = run_dir / "station-dump.txt"
        self.python = python
        self.topology = Topology(run_dir, self.processes, python)
        self.isp = ISP(
            run_dir,
            self.processes,
            python,
            hwdb_bin,
            a_address=WAN_ROUTER_IP,
            a_wan=WAN,
            inet_ns=NS_INET,
            upstream_dns=INET_DNS_IP,
        )
        self.router = RouterServices(
            {**router_settings(run_dir, python, hwdb_bin, self.station_dump), **self.isp.slice_settings()},
            self.processes,
            cwd=repo,
        )
        self.services = self.router.services
        self.stations = Stations(run_dir, self.topology, self.router.add_8021x_user)
        self.wsv1 = WsV1Client()

    # ---- up / down

    def up(self) -> None:
        _require_root()
        hwdb_bin = Path(str(self.router.settings["HWDB_BIN"]))
        if not hwdb_bin.exists() or not (self.repo / "webui" / "frontend" / "dist" / "index.html").exists():
            raise HomenetError("hwdb or the web UI is not built: run `make deps` first")
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.topology.start_ovs()
        self.topology.build_air()
        self.isp.build()
        self.topology.build_internet()
        self.topology.build_router()
        ipv6.build_router(self.run_dir, BRIDGE, WAN, self.run_dir)
        # The router's prefix-delegation client is services.toml's wan-pd, started before the others: the ISP
        # registers what it delegated before the controller dials the slice.
        ipv6.start_prefix_delegation(
            self.processes, self.run_dir, WAN, self.run_dir, lambda: self.router.start("wan-pd")
        )
        self.processes.start("radio", [self.python, "-m", "homenet", "radio-loop"])
        self.router.render_hostapd_conf()
        self.router.first_radio_settings(GUEST_PASSPHRASE)
        self.topology.add_lan_address()
        # Before the router's controller, which connects to its slice at once; the ISP registers what its
        # DHCPv6 server delegated to the household.
        self.isp.start(a_delegated=ipv6.delegated_now(self.run_dir))
        self.router.start_all()

    def down(self) -> None:
        """Removes everything, also after a crash (it finds what to remove by its names)."""
        _require_root()
        self.router.stop_all()
        for name in EMULATED_PARTS:
            self.processes.stop(name)
        self.topology.tear_down()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def status(self) -> dict:
        return {
            **self.topology.status(),
            "isp": self.isp.status(),
            "clients": self.stations.status(),
            "logs": str(self.processes.logs),
            **self.router.status(),
        }

    # ---- the router's services (self.router)

    def start(self, name: str) -> None:
        self.router.start(name)

    def restart(self, name: str) -> None:
        self.router.restart(name)

    def fresh_webui(self) -> None:
        """The web UI as a household first meets it (for tests that begin at the first visit, whichever
        test made an owner before them)."""
        self.router.fresh_webui()

    def hwdb(self, query: str) -> list[dict]:
        return self.router.hwdb(query)

    def setup_code(self) -> str:
        return self.router.setup_code()

    # ---- the devices (self.stations)

    def clients(self) -> list[str]:
        return self.stations.names()

    def add(
        self,
        name: str,
        mac: str | None = None,
        rssi: int = -50,
        retries: float = 0,
        dot1x: str | None = None,
        wired: bool = False,
    ) -> str:
        _require_root()
        return self.stations.add(name, mac, rssi, retries, dot1x, wired)

    def remove(self, name: str) -> None:
        self.stations.remove(name)

    def mac(self, name: str) -> str:
        return self.stations.mac(name)

    def exec(self, name: str, *cmd, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return self.stations.exec(name, *cmd, check=check, timeout=timeout)

    def spawn(self, name: str, *cmd, **popen_args) -> subprocess.Popen:
        return self.stations.spawn(name, *cmd, **popen_args)

    def dhcp(self, name: str, timeout: int = 20, host_name: str | None = None, vendor_class: str = "") -> str:
        return self.stations.dhcp(name, timeout, host_name, vendor_class)

    def release(self, name: str) -> None:
        self.stations.release(name)

    def address(self, name: str, with_prefix: bool = False) -> str | None:
        return self.stations.address(name, with_prefix)

    def lease_left(self, name: str) -> int:
        return self.stations.lease_left(name)

    def fetch(self, name: str, url: str = f"http://{INTERNET_HOST}/", timeout: float = 5) -> str:
        return self.stations.fetch(name, url, timeout)

    def radio(self, name: str, rssi: int | None = None, retries: float | None = None) -> None:
        self.stations.radio(name, rssi, retries)

    def auth(self, name: str) -> None:
        self.stations.auth(name)

    def auth_status(self, name: str) -> str:
        return self.stations.auth_status(name)

    def join(self, name: str, permit: bool = True) -> str:
        """A device joins (and, permitted, renews into its hour-long lease); returns its address."""
        self.add(name)
        address = self.dhcp(name).split("/")[0]
        if permit:
            self.permit(name)
            self.dhcp(name)
        return address

    # ---- the controller's ws.v1 (self.wsv1), devices by name or MAC

    def api(self, verb: str, path: str, timeout: float = 5) -> tuple[int, Any]:
        """Call the controller's ws.v1: (HTTP status, JSON body)."""
        return self.wsv1.call(verb, path, timeout)

    def decide(self, method: str, device: str) -> dict:
        """permit, deny, whitelist, blacklist a device (by name or MAC) as the household's tools do."""
        return self.wsv1.decide(method, device if MAC_RE.match(device) else self.mac(device))

    def permit(self, device: str) -> dict:
        return self.decide("permit", device)

    def deny(self, device: str) -> dict:
        return self.decide("deny", device)

    # ---- the network (self.topology)

    def flows(self, table: int) -> str:
        return self.topology.flows(table)

    def internet_spawn(self, *cmd, **popen_args) -> subprocess.Popen:
        return self.topology.internet_spawn(*cmd, **popen_args)

    def internet_capture(self, capture_filter: str) -> AbstractContextManager[Callable[[], list[str]]]:
        return self.topology.internet_capture(capture_filter)


def _require_root() -> None:
    if os.geteuid() != 0:
        raise HomenetError("homenet needs root (network namespaces, OVS)")
